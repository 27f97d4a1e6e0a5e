// Executor: where CPU work runs. Search, scan and (later) index-build tasks are submitted here
// and nowhere else, so the CPU reservation is one number in the config (I-2).
//
// Contract for tasks (I-1): a task never blocks. It does not wait on a queue, a future, a
// condition variable or I/O; it does its work and returns. Work that needs something not yet
// available is expressed by returning and being re-submitted by whoever makes it available.
// A task reports failure through whatever it captured, never by throwing: the thread-backed
// executors catch and log what a task throws (the task is abandoned, the executor goes on), but
// whoever waits for the task learns nothing from that.
//
// Thread-safety: Submit() may be called from any thread, including from inside a task.
#pragma once

#include "absl/functional/any_invocable.h"

namespace shoal::core {

class Executor {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  virtual ~Executor() = default;

  // Schedules `task` to run once, later, on one of the executor's threads.
  virtual void Submit(Task task) = 0;

  // How many tasks may run at the same time.
  virtual int concurrency() const = 0;
};

// True while the calling thread runs a task of the CPU arena (a TbbExecutor). Blocking helpers
// (RunAndWait, ParallelFor) check it and refuse, which makes I-1 checkable in every build.
bool InArenaTask();

}  // namespace shoal::core
