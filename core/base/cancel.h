// CancelToken: the deadline and cancellation flag of one request, shared between the RPC layer
// that owns the request and the tasks that work on it.
//
// Thread-safety: Cancel() and Check() may be called from any thread at any time. Check() is
// cheap (an atomic load and a clock read) and is meant to be called between units of work.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>

#include "absl/status/status.h"

namespace shoal::core {

class CancelToken {
 public:
  using Clock = std::chrono::steady_clock;

  // A token that never expires.
  CancelToken() : deadline_(Clock::time_point::max()) {}
  explicit CancelToken(Clock::time_point deadline) : deadline_(deadline) {}

  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }

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
};

}  // namespace shoal::core
