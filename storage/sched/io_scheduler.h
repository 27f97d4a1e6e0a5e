// IoScheduler: asynchronous positional reads with priorities, a bytes/requests-in-flight
// budget, coalescing, deadlines and cancellation — IoPolicy (what to read next) driving an
// IoBackend (io_uring or pread).
//
// Read() returns at once; its callback runs exactly once, on an I/O thread, with the bytes or
// with CANCELLED / DEADLINE_EXCEEDED / the read's error. Callbacks must be short and never
// block or search (the query engine re-enqueues CPU work on its arena from them, I-1).
// Files are opened with O_DIRECT where the filesystem allows it (otherwise buffered, per
// file; ReadMode::kBuffered asks for the page cache); reads are widened to 4 KiB alignment
// internally, callers see exactly their range. Coalesced reads share one pooled buffer; a
// ReadResult keeps its part alive.
//
// Thread-safety: every method is thread-safe. The destructor waits for reads in flight and
// answers queued ones with CANCELLED.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "storage/io/aligned_buffer.h"
#include "storage/io/io_backend.h"
#include "storage/sched/io_policy.h"

namespace shoal::storage {

// How a file's reads meet the kernel. kDirect bypasses the page cache (O_DIRECT) when
// IoSchedulerOptions::direct_io is set and the filesystem allows it: right for large partition
// reads that Shoal caches itself. kBuffered always goes through the page cache: right for small
// random reads Shoal does not cache (refine rows), where the kernel's cache is the row cache.
enum class ReadMode { kDirect, kBuffered };

struct ReadRequest {
  uint64_t file = 0;  // from OpenFile()
  uint64_t offset = 0;
  uint32_t length = 0;
  uint64_t query = 0;  // smaller = older; the oldest query always progresses (I-4)
  uint32_t rank = 0;   // partition rank within the query, 0 = nearest
  IoClock::time_point deadline = IoClock::time_point::max();
};

struct ReadResult {
  std::shared_ptr<const AlignedBuffer> buffer;  // keeps `data` alive
  const char* data = nullptr;
  uint32_t size = 0;
  uint64_t queue_us = 0;   // Read() to submission
  uint64_t kernel_us = 0;  // submission to completion
};

using ReadCallback = absl::AnyInvocable<void(absl::StatusOr<ReadResult>) &&>;

struct IoSchedulerOptions {
  IoLimits limits;
  IoBackendKind backend = IoBackendKind::kAuto;
  bool direct_io = true;
  // Builds the backend instead of NewIoBackend(backend, ...) when set: tests wrap a real
  // backend to inject EIO and short reads (tests/fakes/faulty_io_backend.h).
  std::function<absl::StatusOr<std::unique_ptr<IoBackend>>(IoCallback)> make_backend;
};

struct IoSchedulerStats {
  uint64_t reads = 0;        // requests answered with data
  uint64_t submissions = 0;  // kernel reads (after coalescing)
  uint64_t bytes_read = 0;   // bytes the kernel read
  uint64_t errors = 0;
  uint64_t cancelled = 0;
  uint64_t expired = 0;
};

class IoScheduler {
 public:
  static absl::StatusOr<std::unique_ptr<IoScheduler>> Create(IoSchedulerOptions options);
  ~IoScheduler();

  // Opens a file for reading; returns its handle for ReadRequest::file.
  absl::StatusOr<uint64_t> OpenFile(const std::string& path, ReadMode mode = ReadMode::kDirect);
  // REQUIRES: no read of the file is queued or in flight.
  void CloseFile(uint64_t file);
  bool is_direct(uint64_t file) const;

  // Queues a read; returns an id for Cancel().
  uint64_t Read(const ReadRequest& request, ReadCallback callback);
  // A queued read is dropped and answered CANCELLED; an in-flight one completes and is answered
  // CANCELLED (its bytes discarded). No-op for an unknown or finished id.
  void Cancel(uint64_t id);

  std::string_view backend_name() const { return backend_->name(); }
  IoSchedulerStats stats() const;
  size_t pending() const;  // queued + in flight

 private:
  struct Pending;
  explicit IoScheduler(IoSchedulerOptions options);
  void OnComplete(IoResult result);
  // REQUIRES: mu_ held. Moves what the policy allows into `reads`; answers expired requests.
  void DispatchLocked(std::vector<IoRead>* reads, std::vector<std::function<void()>>* answers);

  const IoSchedulerOptions options_;
  std::shared_ptr<BufferPool> pool_;
  std::unique_ptr<IoBackend> backend_;

  mutable std::mutex mu_;
  bool closing_ = false;  // guarded by mu_: the destructor runs, nothing more is submitted
  IoPolicy policy_;                                                 // guarded by mu_
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending_;  // guarded by mu_
  struct Flight {
    IoSubmission submission;
    std::shared_ptr<AlignedBuffer> buffer;
    uint64_t aligned_offset;
    IoClock::time_point submitted;
  };
  std::unordered_map<uint64_t, Flight> flights_;  // guarded by mu_
  struct File {
    int fd;
    bool direct;
  };
  std::unordered_map<uint64_t, File> files_;  // guarded by mu_
  uint64_t next_id_ = 1;                      // guarded by mu_
  uint64_t next_file_ = 1;                    // guarded by mu_
  IoSchedulerStats stats_;                    // guarded by mu_
};

}  // namespace shoal::storage
