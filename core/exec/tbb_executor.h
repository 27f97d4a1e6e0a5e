// TbbExecutor: an Executor over a oneTBB task_arena with a fixed number of slots.
//
// The arena's concurrency is the CPU reservation (config `cpu.threads`). Every task runs with
// single-threaded OpenMP so FAISS cannot start a thread pool behind the reservation's back
// (I-2), and with InArenaTask() true so blocking helpers refuse to wait there (I-1). A task
// that throws is logged and abandoned; the executor and its other tasks go on (an exception
// leaving a TBB enqueued task would end the process). The destructor waits, outside the
// arena, for every submitted task to finish. ThreadSanitizer builds run the same contract on
// plain threads instead of TBB, whose hand-offs TSan cannot see (tbb_executor.cc says why).
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>

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
  int64_t outstanding() const;
  // Tasks running right now.
  int64_t running() const;
  // Total CPU-busy time of the arena, in microseconds, since construction.
  int64_t busy_micros() const;
  // Tasks that threw (each logged once).
  int64_t failed_tasks() const;

  // Blocks the caller (which must not be an arena thread) until no task is outstanding.
  void WaitIdle();

 private:
  struct Counters;
  struct Impl;
  const int threads_;
  // Shared with every queued task, so a task that ends as the executor is destroyed never
  // touches freed counters.
  const std::shared_ptr<Counters> counters_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::core
