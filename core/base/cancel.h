// CancelToken: the deadline and cancellation flag of one request, shared between the RPC layer
// that owns the request and the tasks that work on it.
//
// Work that waits rather than runs (a query whose reads are queued) cannot poll; it registers
// OnCancel() to be told, so its queued reads can leave the I/O queue at once.
//
// Thread-safety: Cancel(), Check() and OnCancel() may be called from any thread at any time.
// Check() is cheap (an atomic load and a clock read) and is meant to be called between units of
// work.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace shoal::core {

class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;

  // A token that never expires.
  CancelToken() : deadline_(Clock::time_point::max()) {}
  explicit CancelToken(Clock::time_point deadline) : deadline_(deadline) {}

  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  using Callback = absl::AnyInvocable<void() &&>;

  // Cancels the request and runs every OnCancel() callback, on this thread, once.
  void Cancel() {
    cancelled_.store(true, std::memory_order_relaxed);
    std::vector<Callback> run;
    {
      absl::MutexLock lock(&mu_);
      if (fired_) return;
      fired_ = true;
      run.swap(callbacks_);
    }
    for (Callback& fn : run) std::move(fn)();
  }

  // Runs `fn` once when Cancel() is called, on the cancelling thread — or now, on this thread,
  // if it already was. `fn` must be short and must not block. Callbacks live as long as the
  // token: register one per request, not one per read. (A deadline does not call them by
  // itself; the RPC layer cancels the token when gRPC reports the deadline.)
  void OnCancel(Callback fn) const {
    {
      absl::MutexLock lock(&mu_);
      if (!fired_) {
        callbacks_.push_back(std::move(fn));
        return;
      }
    }
    std::move(fn)();
  }

  // OK while the request should go on; CANCELLED or DEADLINE_EXCEEDED once it should stop.
  absl::Status Check() const {
    if (cancelled_.load(std::memory_order_relaxed)) {
      return absl::CancelledError("request cancelled by the client");
    }
    if (deadline_ != Clock::time_point::max() && Clock::now() >= deadline_) {
      return absl::DeadlineExceededError("deadline exceeded");
    }
    return absl::OkStatus();
  }

  Clock::time_point deadline() const { return deadline_; }

 private:
  const Clock::time_point deadline_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  mutable bool fired_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::core
