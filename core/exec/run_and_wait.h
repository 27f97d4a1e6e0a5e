// RunAndWait / ParallelFor: run CPU work on an executor (the bounded arena, I-2) from a thread
// that is allowed to block — an admin or maintenance thread — and wait for it there.
//
// Never call these from an arena task: that is the waiting-inside-the-pool pattern I-1 forbids
// (with one arena thread it deadlocks). They check it at run time, in every build, and answer
// FAILED_PRECONDITION at once instead of waiting.
//
// Failures: each call of `fn` returns a Status; one that throws counts as INTERNAL with the
// exception's what(). A failed call still counts as done (the wait always ends), calls that start
// after a failure are skipped, and the first failure is what the helper returns.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "core/exec/executor.h"

namespace shoal::core {

// Runs fn(i) for i in [0, n) as n tasks on `executor` and returns when every task has ended:
// OK, or the first failure.
absl::Status ParallelFor(Executor& executor, size_t n,
                         const std::function<absl::Status(size_t)>& fn);

// Runs fn() as one task on `executor` and returns its status when it has ended.
absl::Status RunAndWait(Executor& executor, const std::function<absl::Status()>& fn);

}  // namespace shoal::core
