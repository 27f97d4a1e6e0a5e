// Wal: the write-ahead log of one collection, with group commit (I-5).
//
// Append() queues a framed record and returns at once. A dedicated WAL thread takes every
// record queued so far, writes them with one write, makes them durable with one fdatasync and
// then runs each record's callback, in append order, with the outcome. Callers acknowledge a
// write to their client only from that callback, so acknowledged means durable. Callbacks run
// on the WAL thread, which is how the memtable gets its single writer; they must be short.
//
// If a write or an fsync fails, the WAL stops accepting records for good (the kernel may have
// dropped the dirty pages, so retrying the fsync would lie): every later Append fails with
// the original error until the collection is reopened.
//
// ReplayWal() reads a WAL file back: a torn tail (an incomplete or corrupt last record, as a
// crash mid-write leaves) is truncated with a warning; a bad record followed by more data is
// corruption and returns DATA_LOSS.
//
// Thread-safety: Append() and Close() are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/format/wal_format.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

struct WalOptions {
  // Bytes queued and not yet durable past which Append fails with RESOURCE_EXHAUSTED.
  uint64_t max_pending_bytes = 512u << 20;
  // Called after each group fsync with its duration in seconds (for metrics).
  std::function<void(double)> on_sync;
};

class Wal {
 public:
  using Callback = absl::AnyInvocable<void(absl::Status) &&>;

  // Opens (creating if missing, with a header) the WAL file at `path` for appending.
  static absl::StatusOr<std::unique_ptr<Wal>> Open(FileSystem* fs, const std::string& path,
                                                   WalOptions options);
  ~Wal();

  // Queues `record` (from EncodeWalRecord); `done` runs on the WAL thread once it is durable
  // or has failed. After Close(), `done` runs at once with UNAVAILABLE.
  void Append(std::string record, Callback done);

  // Finishes everything queued, stops the thread, closes the file. Idempotent.
  absl::Status Close();

  uint64_t file_bytes() const;

 private:
  Wal(std::unique_ptr<WritableFile> file, WalOptions options);
  void Run();

  struct Pending {
    std::string record;
    Callback done;
  };

  const WalOptions options_;
  std::unique_ptr<WritableFile> file_;  // used by the WAL thread only, after construction
  std::atomic<uint64_t> file_bytes_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  uint64_t queued_bytes_ = 0;  // guarded by mu_
  bool closing_ = false;       // guarded by mu_
  absl::Status failed_;        // guarded by mu_; sticky write/fsync error
  std::thread thread_;
};

// Reads the records of the WAL file at `path` in order and hands each to `apply`.
// Truncates a torn tail (logging a warning, reporting it through `truncated_bytes`);
// returns DATA_LOSS for corruption anywhere else and the first error `apply` returns.
absl::Status ReplayWal(FileSystem* fs, const std::string& path,
                       const std::function<absl::Status(WalRecordType, std::string_view)>& apply,
                       uint64_t* truncated_bytes);

}  // namespace shoal::storage
