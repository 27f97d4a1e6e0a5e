// IoScheduler: asynchronous positional reads with priorities, a bytes/requests-in-flight
// budget, coalescing, deadlines and cancellation — IoPolicy (what to read next) driving an
// IoBackend (io_uring or pread).
//
// Read() returns at once; its callback runs exactly once, on an I/O thread, with the bytes or
// with CANCELLED / DEADLINE_EXCEEDED / the read's error. Callbacks must be short and never
// block or search (the query engine re-enqueues CPU work on its arena from them, I-1).
// Files are opened with O_DIRECT where the filesystem allows it (otherwise buffered, per
// file; ReadMode::kBuffered asks for the page cache); reads are widened to 4 KiB alignment
// internally, callers see exactly their range. A read submitted alone lands in a buffer of
// exactly its aligned size (the partition cache keeps it without a copy); coalesced reads share
// one pooled buffer. A ReadResult keeps its part alive.
//
// Batches (Plug/Unplug, the block layer's plugging): reads queued by a thread between Plug()
// and the matching Unplug() wait in the policy and reach the backend together at Unplug() —
// one backend submission (one wake-up of the I/O thread, one io_uring_enter), in the policy's
// order, adjacent ranges coalesced — instead of one submission per read as they trickle in.
// A query's partition fetches are issued this way, so all of its reads are in flight at once
// (up to the depth and byte limits). Plugs nest; only the outermost Unplug() dispatches.
// Reads of other threads, and completions, still dispatch at once (and may take plugged reads
// with them). Unplug() never blocks.
//
// Thread-safety: every method is thread-safe. The destructor answers queued reads with
// CANCELLED, waits until no thread is handing reads to the backend (a completion that arrived
// just before may still be submitting: it must finish before the backend goes), then destroys
// the backend, which waits for reads in flight; their completions submit nothing more.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
  uint64_t query = 0;  // smaller = older; the oldest query always progresses (I-4); CancelQuery
  uint32_t rank = 0;   // partition rank within the query, 0 = nearest
  IoClock::time_point deadline = IoClock::time_point::max();
  // While other reads are in flight, leave this one queued for the next completion to
  // dispatch (on the I/O thread) instead of submitting it from the calling thread; at once
  // otherwise. For reads issued where submitting would cost the caller: an arena task that
  // returns uncached bytes and so grants the next read (storage/cache/uncached_budget.h).
  bool dispatch_on_completion = false;
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
  // Tests only: called by the destructor, on its thread and unlocked, when it is about to wait
  // for a completion still inside the backend's Submit() (never when none is), so that a test
  // holding that Submit learns without a timing guess that the destructor now waits for it.
  std::function<void()> on_close_waiting_for_submit;
};

struct IoSchedulerStats {
  uint64_t reads = 0;        // requests answered with data
  uint64_t submissions = 0;  // kernel reads (after coalescing)
  uint64_t bytes_read = 0;   // bytes the kernel read
  uint64_t errors = 0;
  uint64_t cancelled = 0;
  uint64_t expired = 0;
  uint64_t kernel_us = 0;  // summed over submissions: kernel time, submission to completion
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

  // Holds back this thread's reads until the matching Unplug() (see above). REQUIRES: the
  // caller calls Unplug() on the same thread before it returns to its caller's caller.
  void Plug();
  void Unplug();
  // Plug() for the lifetime of a scope, so an exception cannot leave this thread plugged.
  class ScopedPlug {
   public:
    explicit ScopedPlug(IoScheduler* scheduler) : scheduler_(scheduler) { scheduler_->Plug(); }
    ~ScopedPlug() { scheduler_->Unplug(); }
    ScopedPlug(const ScopedPlug&) = delete;
    ScopedPlug& operator=(const ScopedPlug&) = delete;

   private:
    IoScheduler* const scheduler_;
  };

  // Queues a read; returns an id for Cancel(). Dispatched at once unless this thread is plugged.
  uint64_t Read(const ReadRequest& request, ReadCallback callback);
  // A queued read is dropped and answered CANCELLED; an in-flight one completes and is answered
  // CANCELLED (its bytes discarded). No-op for an unknown or finished id.
  void Cancel(uint64_t id);
  // Every read of `query` (ReadRequest::query) still queued is dropped and answered CANCELLED,
  // on the calling thread; its reads in flight complete normally (their bytes may serve other
  // queries through the partition cache). Called when a query is cancelled or expires.
  void CancelQuery(uint64_t query);

  std::string_view backend_name() const { return backend_->name(); }
  IoSchedulerStats stats() const;
  size_t pending() const;  // queued + in flight
  size_t queued() const;   // waiting for the policy to submit them

 private:
  struct Pending;
  explicit IoScheduler(IoSchedulerOptions options);
  void OnComplete(IoResult result);
  // REQUIRES: mu_ held. Moves what the policy allows into `reads`; answers expired requests.
  // Counts a submitter when it returns reads: the caller must pass them to Submit().
  void DispatchLocked(std::vector<IoRead>* reads, std::vector<std::function<void()>>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands reads from DispatchLocked to the backend, without mu_ held.
  void Submit(std::vector<IoRead> reads) ABSL_LOCKS_EXCLUDED(mu_);
  // How deeply the calling thread has plugged this scheduler (0 = not plugged).
  int& PlugDepth();
  bool NoSubmitters() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return submitting_ == 0; }

  const IoSchedulerOptions options_;
  std::shared_ptr<BufferPool> pool_;
  // Set once by Create(); destroyed only after closing_ is set and submitting_ is zero, so no
  // completion ever reads it while it is being reset.
  std::unique_ptr<IoBackend> backend_;

  mutable absl::Mutex mu_;
  // The destructor runs: nothing more is dispatched, so nothing more is submitted.
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Threads between DispatchLocked() and the end of their backend_->Submit().
  int submitting_ ABSL_GUARDED_BY(mu_) = 0;
  IoPolicy policy_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  struct Flight {
    IoSubmission submission;
    std::shared_ptr<AlignedBuffer> buffer;
    uint64_t aligned_offset;
    IoClock::time_point submitted;
  };
  std::unordered_map<uint64_t, Flight> flights_ ABSL_GUARDED_BY(mu_);
  struct File {
    int fd;
    bool direct;
  };
  std::unordered_map<uint64_t, File> files_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_file_ ABSL_GUARDED_BY(mu_) = 1;
  IoSchedulerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::storage
