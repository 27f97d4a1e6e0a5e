// RunAndWait / ParallelFor: run CPU work on an executor (the bounded arena, I-2) from a thread
// that is allowed to block — an admin or maintenance thread — and wait for it there.
//
// Never call these from a task of `executor` itself: that is the waiting-inside-the-pool
// pattern I-1 forbids (with one arena thread it deadlocks). The waiting happens outside.
//
// Thread-safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>

#include "core/exec/executor.h"

namespace shoal::core {

// Runs fn(i) for i in [0, n) as n tasks on `executor` and returns when all have run.
inline void ParallelFor(Executor& executor, size_t n, const std::function<void(size_t)>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = n;
  for (size_t i = 0; i < n; ++i) {
    executor.Submit([&, i] {
      fn(i);
      std::lock_guard<std::mutex> lock(mu);
      if (--remaining == 0) cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return remaining == 0; });
}

inline void RunAndWait(Executor& executor, const std::function<void()>& fn) {
  ParallelFor(executor, 1, [&](size_t) { fn(); });
}

}  // namespace shoal::core
