// ManualExecutor: an Executor that only queues. Tests (and single-threaded tools) decide when
// and in which order tasks run, which makes scheduling bugs reproducible: RunOne() runs the
// oldest task, RunAll() drains the queue, including tasks submitted while draining.
//
// Thread-safety: Submit() is thread-safe; Run*() may be called from one thread at a time.
#pragma once

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/executor.h"

namespace shoal::core {

class ManualExecutor final : public Executor {
 public:
  explicit ManualExecutor(int concurrency = 1) : concurrency_(concurrency) {}

  void Submit(Task task) override {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  int concurrency() const override { return concurrency_; }

  // Runs the oldest queued task; false when the queue was empty.
  bool RunOne() {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return false;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::move(task)();
    return true;
  }

  // Runs tasks until none is queued; returns how many ran.
  int RunAll() {
    int n = 0;
    while (RunOne()) ++n;
    return n;
  }

  size_t queued() const {
    absl::MutexLock lock(&mu_);
    return queue_.size();
  }

 private:
  const int concurrency_;
  mutable absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::core
