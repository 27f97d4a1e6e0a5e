// Wal: the write-ahead log of one collection, with group commit (I-5).
//
// Append() queues a framed record and returns at once. A dedicated WAL thread takes every
// record queued so far, writes them with one write, makes them durable with one fdatasync and
// then runs each record's callback, in append order, with the outcome. Callers acknowledge a
// write to their client only from that callback, so acknowledged means durable. Callbacks run
// on the WAL thread, which is how the memtable gets its single writer; they must be short.
//
// If a write or an fsync fails, the WAL stops accepting records for good (the kernel may have
// dropped the dirty pages, so retrying the fsync would lie): the failed batch and every later
// Append fail until the collection is reopened, with RESOURCE_EXHAUSTED ("disk full") when the
// disk was full and UNAVAILABLE for any other I/O error. The unacknowledged bytes of the failed
// batch are cut off again (best effort), so the file ends on the last durable record; if that
// cut fails too, replay treats them as a torn tail. Close() reports the failure.
//
// ReplayWal() reads a WAL file back: a torn tail (an incomplete or corrupt last record, as a
// crash mid-write leaves) is truncated with a warning; a bad record followed by more data is
// corruption and returns DATA_LOSS.
//
// Thread-safety: Append(), Close() and health() are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/format/wal_format.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

// The status a write gets once the WAL failed with `cause`: RESOURCE_EXHAUSTED "disk full" for
// ENOSPC (or a quota), UNAVAILABLE for any other I/O error; both say the collection is
// read-only until restart and carry the cause's message.
absl::Status WalFailureStatus(const absl::Status& cause);

struct WalOptions {
  // Bytes queued and not yet durable past which Append fails with RESOURCE_EXHAUSTED.
  uint64_t max_pending_bytes = 512u << 20;
  // Called after each group fsync with its duration in seconds (for metrics).
  std::function<void(double)> on_sync;
};

class Wal {
 public:
  using Callback = absl::AnyInvocable<void(absl::Status) &&>;

  // Opens (creating if missing, with a header) the WAL file at `path` for appending. A file
  // shorter than a header (a crash or a full disk while creating it) is started afresh.
  static absl::StatusOr<std::unique_ptr<Wal>> Open(FileSystem* fs, const std::string& path,
                                                   WalOptions options);
  ~Wal();

  // Queues `record` (from EncodeWalRecord); `done` runs on the WAL thread once it is durable
  // or has failed. After Close(), `done` runs at once with UNAVAILABLE.
  void Append(std::string record, Callback done);

  // Finishes everything queued, stops the thread, closes the file. Idempotent. Returns the
  // sticky write/fsync failure (see WalFailureStatus) if there was one, whenever it happened.
  absl::Status Close();

  // OK while the WAL accepts records; the sticky failure once a write or fsync failed.
  absl::Status health() const;

  // Bytes of the file that hold durable records (header included).
  uint64_t file_bytes() const;

 private:
  struct Pending {
    std::string record;
    Callback done;
  };

  Wal(FileSystem* fs, std::string path, std::unique_ptr<WritableFile> file, WalOptions options);
  void Run();
  // Waits for records (or Close); returns them all, empty once closing and drained.
  std::deque<Pending> TakeBatch();
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closing_ || !queue_.empty();
  }
  // Writes and syncs one batch; on failure makes the WAL read-only and cuts the batch's bytes.
  absl::Status WriteBatch(const std::deque<Pending>& batch);

  FileSystem* const fs_;
  const std::string path_;
  const WalOptions options_;
  std::unique_ptr<WritableFile> file_;  // used by the WAL thread only, then by Close
  std::atomic<uint64_t> file_bytes_{0};

  mutable absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;  // the thread is joined and the file closed
  absl::Status failed_ ABSL_GUARDED_BY(mu_);  // sticky, already a WalFailureStatus
  std::thread thread_;
  absl::Mutex close_mu_;  // serialises Close() calls (the join)
};

// Reads the records of the WAL file at `path` in order and hands each to `apply`.
// Truncates a torn tail (logging a warning, reporting it through `truncated_bytes`);
// returns DATA_LOSS for corruption anywhere else and the first error `apply` returns.
absl::Status ReplayWal(FileSystem* fs, const std::string& path,
                       const std::function<absl::Status(WalRecordType, std::string_view)>& apply,
                       uint64_t* truncated_bytes);

}  // namespace shoal::storage
