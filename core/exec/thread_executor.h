// ThreadExecutor: a few dedicated threads for *blocking* work — collection create/drop
// (fsyncs, renames), the demo loader. It is deliberately separate from the CPU arena
// (TbbExecutor): work here may wait, work on the arena may not (I-1). A task that throws is
// logged and abandoned; the thread goes on with the next task.
//
// Thread-safety: Submit() is thread-safe. The destructor runs every queued task, then joins.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/executor.h"

namespace shoal::core {

class ThreadExecutor final : public Executor {
 public:
  explicit ThreadExecutor(int threads);
  ~ThreadExecutor() override;

  void Submit(Task task) override;
  int concurrency() const override { return int(threads_.size()); }

 private:
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shoal::core
