// ThreadExecutor: a few dedicated threads for *blocking* work — collection create/drop
// (fsyncs, renames), the demo loader. It is deliberately separate from the CPU arena
// (TbbExecutor): work here may wait, work on the arena may not (I-1).
//
// Thread-safety: Submit() is thread-safe. The destructor runs every queued task, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace shoal::core
