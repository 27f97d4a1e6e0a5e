#include "core/exec/tbb_executor.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "core/base/tsan.h"
#include "oneapi/tbb/task_arena.h"
#ifdef SHOAL_TSAN
#include "core/exec/thread_executor.h"
#endif

namespace shoal::core {
namespace {

thread_local bool t_in_arena_task = false;

// Marks the thread as running an arena task for the scope's lifetime (tasks do not nest on a
// thread, but restoring the old value keeps that an observation, not an assumption).
class ArenaTaskScope {
 public:
  ArenaTaskScope() : was_(t_in_arena_task) { t_in_arena_task = true; }
  ~ArenaTaskScope() { t_in_arena_task = was_; }
  ArenaTaskScope(const ArenaTaskScope&) = delete;
  ArenaTaskScope& operator=(const ArenaTaskScope&) = delete;

 private:
  const bool was_;
};

}  // namespace

bool InArenaTask() { return t_in_arena_task; }

struct TbbExecutor::Counters {
  std::atomic<int64_t> outstanding{0};
  std::atomic<int64_t> running{0};
  std::atomic<int64_t> busy_micros{0};
  std::atomic<int64_t> failed{0};
  // Locked by the Queued task whose destruction brings `outstanding` to zero, so WaitIdle's
  // Await re-checks.
  absl::Mutex idle_mu;

  void RunTask(Executor::Task& task) {
    ArenaTaskScope scope;
    try {
      std::move(task)();
    } catch (const std::exception& e) {
      failed.fetch_add(1, std::memory_order_relaxed);
      Logger("exec")->error("a CPU task threw and was abandoned: {}", e.what());
    } catch (...) {
      failed.fetch_add(1, std::memory_order_relaxed);
      Logger("exec")->error("a CPU task threw a non-standard exception and was abandoned");
    }
    task = nullptr;  // release what the task captured before reporting idle
  }
};

#ifdef SHOAL_TSAN
// libtbb is not built with ThreadSanitizer: TSan sees neither that enqueue() happens before the
// task runs nor TBB's reuse of task memory across threads, and a suppression wide enough to hide
// that would hide every race between two of our tasks (a `race:` pattern matches any frame of
// either stack, and every task runs under TBB's frames). So under TSan the arena is `threads`
// plain threads over a mutex-guarded queue (ThreadExecutor, whose hand-offs TSan sees): the same
// bound on concurrency and the same task contract. Every other build runs on TBB.
struct TbbExecutor::Impl {
  explicit Impl(int threads) : pool(threads) {}
  void Enqueue(Executor::Task task) { pool.Submit(std::move(task)); }
  ThreadExecutor pool;
};
#else
struct TbbExecutor::Impl {
  explicit Impl(int threads) : arena(threads, /*reserved_for_masters=*/0) { arena.initialize(); }
  template <typename F>
  void Enqueue(F&& task) {
    arena.enqueue(std::forward<F>(task));
  }
  tbb::task_arena arena;
};
#endif

TbbExecutor::TbbExecutor(int threads)
    : threads_(threads < 1 ? 1 : threads),
      counters_(std::make_shared<Counters>()),
      impl_(std::make_unique<Impl>(threads_)) {}

TbbExecutor::~TbbExecutor() { WaitIdle(); }

namespace {

// One submitted task as the arena holds it. It counts in `outstanding` until it is destroyed,
// not merely until it has run: task_arena::enqueue copies its functor and a TBB worker frees
// that copy after the task returns, so WaitIdle (and the destructor) must wait for that too,
// or a process that exits right after would still hold the task's memory (LeakSanitizer saw
// 48 bytes per task in flaky test runs).
template <typename Counters>
struct Queued {
  Queued(Executor::Task t, std::shared_ptr<Counters> c)
      : task(std::move(t)), counters(std::move(c)) {}
  Queued(const Queued&) = delete;
  Queued& operator=(const Queued&) = delete;
  ~Queued() {
    if (counters->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::MutexLock lock(&counters->idle_mu);  // wakes WaitIdle to re-check
    }
  }
  Executor::Task task;
  std::shared_ptr<Counters> counters;
};

}  // namespace

void TbbExecutor::Submit(Task task) {
  counters_->outstanding.fetch_add(1, std::memory_order_relaxed);
  // task_arena::enqueue copies its functor; the shared_ptr makes a move-only task copyable.
  auto queued = std::make_shared<Queued<Counters>>(std::move(task), counters_);
  impl_->Enqueue([queued] {
    Counters& counters = *queued->counters;
    counters.running.fetch_add(1, std::memory_order_relaxed);
    // FAISS code inside a task must not fan out to OpenMP threads behind the arena's back
    // (I-2). The setting is a thread-local store, cheap enough to repeat per task.
    omp_set_num_threads(1);
    const auto start = std::chrono::steady_clock::now();
    counters.RunTask(queued->task);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    counters.busy_micros.fetch_add(micros, std::memory_order_relaxed);
    counters.running.fetch_sub(1, std::memory_order_relaxed);
  });
}

int64_t TbbExecutor::outstanding() const {
  return counters_->outstanding.load(std::memory_order_relaxed);
}
int64_t TbbExecutor::running() const { return counters_->running.load(std::memory_order_relaxed); }
int64_t TbbExecutor::busy_micros() const {
  return counters_->busy_micros.load(std::memory_order_relaxed);
}
int64_t TbbExecutor::failed_tasks() const {
  return counters_->failed.load(std::memory_order_relaxed);
}

void TbbExecutor::WaitIdle() {
  Counters* c = counters_.get();
  absl::MutexLock lock(&c->idle_mu);
  c->idle_mu.Await(absl::Condition(
      +[](Counters* c) { return c->outstanding.load(std::memory_order_acquire) == 0; }, c));
}

}  // namespace shoal::core
