#include "core/exec/run_and_wait.h"

#include <exception>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace shoal::core {
namespace {

// Shared by the waiter and every task; the last task to end may still hold it after the waiter
// returned, so it lives on the heap.
struct WaitState {
  absl::Mutex mu;
  size_t remaining ABSL_GUARDED_BY(mu) = 0;
  absl::Status first ABSL_GUARDED_BY(mu);

  bool AllDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return remaining == 0; }
  bool failed() {
    absl::MutexLock lock(&mu);
    return !first.ok();
  }
  void Done(absl::Status status, size_t count = 1) {
    absl::MutexLock lock(&mu);
    if (first.ok() && !status.ok()) first = std::move(status);
    remaining -= count;
  }
};

absl::Status CallCatching(const std::function<absl::Status(size_t)>& fn, size_t i) {
  try {
    return fn(i);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("task ", i, " threw: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("task ", i, " threw a non-standard exception"));
  }
}

}  // namespace

absl::Status ParallelFor(Executor& executor, size_t n,
                         const std::function<absl::Status(size_t)>& fn) {
  if (InArenaTask()) {
    return absl::FailedPreconditionError(
        "RunAndWait/ParallelFor called from a CPU arena task: waiting there can deadlock the "
        "arena (DESIGN.md I-1); run the wait on an admin thread");
  }
  if (n == 0) return absl::OkStatus();
  auto state = std::make_shared<WaitState>();
  {
    absl::MutexLock lock(&state->mu);
    state->remaining = n;
  }
  for (size_t i = 0; i < n; ++i) {
    try {
      executor.Submit([state, &fn, i] {
        // Once a task failed the rest are skipped: the caller gets the first failure anyway.
        state->Done(state->failed() ? absl::OkStatus() : CallCatching(fn, i));
      });
    } catch (const std::exception& e) {  // e.g. std::bad_alloc while queueing
      state->Done(absl::ResourceExhaustedError(absl::StrCat("submitting task ", i, ": ", e.what())),
                  n - i);
      break;
    }
  }
  absl::MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(state.get(), &WaitState::AllDone));
  return state->first;
}

absl::Status RunAndWait(Executor& executor, const std::function<absl::Status()>& fn) {
  return ParallelFor(executor, 1, [&](size_t) { return fn(); });
}

}  // namespace shoal::core
