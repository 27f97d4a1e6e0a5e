#include "core/exec/thread_executor.h"

#include <exception>

#include "core/base/logging.h"

namespace shoal::core {

ThreadExecutor::ThreadExecutor(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

ThreadExecutor::~ThreadExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void ThreadExecutor::Submit(Task task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void ThreadExecutor::Run() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ThreadExecutor::HasWorkOrStopping));
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      std::move(task)();
    } catch (const std::exception& e) {
      Logger("exec")->error("a blocking task threw and was abandoned: {}", e.what());
    } catch (...) {
      Logger("exec")->error("a blocking task threw a non-standard exception and was abandoned");
    }
  }
}

}  // namespace shoal::core
