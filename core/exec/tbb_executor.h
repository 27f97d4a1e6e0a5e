// TbbExecutor: an Executor over a oneTBB task_arena with a fixed number of slots.
//
// The arena's concurrency is the CPU reservation (config `cpu.threads`). Every task runs with
// single-threaded OpenMP so FAISS cannot start a thread pool behind the reservation's back
// (I-2). The destructor waits, outside the arena, for every
// submitted task to finish.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/exec/executor.h"

namespace shoal::core {

class TbbExecutor final : public Executor {
 public:
  // REQUIRES: threads >= 1.
  explicit TbbExecutor(int threads);
  ~TbbExecutor() override;

  void Submit(Task task) override;
  int concurrency() const override { return threads_; }

  // Tasks submitted but not finished (queued or running).
  int64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  // Tasks running right now.
  int64_t running() const { return running_.load(std::memory_order_relaxed); }
  // Total CPU-busy time of the arena, in microseconds, since construction.
  int64_t busy_micros() const { return busy_micros_.load(std::memory_order_relaxed); }

  // Blocks the caller (which must not be an arena thread) until no task is outstanding.
  void WaitIdle();

 private:
  struct Impl;
  const int threads_;
  std::unique_ptr<Impl> impl_;
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> busy_micros_{0};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
};

}  // namespace shoal::core
