// Blocking wrappers for the collection tests: Upsert / Delete wait for their WAL
// acknowledgement, and a buffered pread scheduler stands in for the server's I/O.
//
// Thread-safety: the functions share no state; each call blocks its own thread only.
#pragma once

#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/collection/collection.h"
#include "storage/sched/io_scheduler.h"

namespace shoal::testing {

// Upserts `points` and waits for the acknowledgement (or the error).
inline absl::Status UpsertAndWait(storage::Collection& c,
                                  std::vector<storage::PointRecord> points) {
  std::promise<absl::StatusOr<uint64_t>> done;
  c.Upsert(std::move(points), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
  return done.get_future().get().status();
}

// Deletes `ids` and waits for the acknowledgement (or the error).
inline absl::Status DeleteAndWait(storage::Collection& c, std::vector<uint64_t> ids) {
  std::promise<absl::StatusOr<uint64_t>> done;
  c.Delete(std::move(ids), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
  return done.get_future().get().status();
}

// A scheduler over buffered pread: works on any filesystem, needs no io_uring.
inline absl::StatusOr<std::unique_ptr<storage::IoScheduler>> BufferedPreadScheduler() {
  storage::IoSchedulerOptions io;
  io.backend = storage::IoBackendKind::kPread;
  io.direct_io = false;
  return storage::IoScheduler::Create(io);
}

}  // namespace shoal::testing
