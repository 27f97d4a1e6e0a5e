#include "core/exec/tbb_executor.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "oneapi/tbb/task_arena.h"

// libtbb is not built with ThreadSanitizer, so TSan cannot see that enqueue() happens before
// the task runs, and would report every byte a task reads as a race. Tell it explicitly.
#if defined(__SANITIZE_THREAD__)
#define SHOAL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHOAL_TSAN 1
#endif
#endif
#ifdef SHOAL_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define SHOAL_HAPPENS_BEFORE(addr) __tsan_release(addr)
#define SHOAL_HAPPENS_AFTER(addr) __tsan_acquire(addr)
#else
#define SHOAL_HAPPENS_BEFORE(addr)
#define SHOAL_HAPPENS_AFTER(addr)
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
  // Locked by the task that brings `outstanding` to zero, so WaitIdle's Await re-checks.
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

struct TbbExecutor::Impl {
  explicit Impl(int threads) : arena(threads, /*reserved_for_masters=*/0) {}
  tbb::task_arena arena;
};

TbbExecutor::TbbExecutor(int threads)
    : threads_(threads < 1 ? 1 : threads),
      counters_(std::make_shared<Counters>()),
      impl_(std::make_unique<Impl>(threads_)) {
  impl_->arena.initialize();
}

TbbExecutor::~TbbExecutor() { WaitIdle(); }

void TbbExecutor::Submit(Task task) {
  counters_->outstanding.fetch_add(1, std::memory_order_relaxed);
  // task_arena::enqueue copies its functor; the shared_ptr makes a move-only task copyable.
  auto shared = std::make_shared<Task>(std::move(task));
  SHOAL_HAPPENS_BEFORE(shared.get());
  impl_->arena.enqueue([counters = counters_, shared] {
    SHOAL_HAPPENS_AFTER(shared.get());
    counters->running.fetch_add(1, std::memory_order_relaxed);
    // FAISS code inside a task must not fan out to OpenMP threads behind the arena's back
    // (I-2). The setting is a thread-local store, cheap enough to repeat per task.
    omp_set_num_threads(1);
    const auto start = std::chrono::steady_clock::now();
    counters->RunTask(*shared);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    counters->busy_micros.fetch_add(micros, std::memory_order_relaxed);
    counters->running.fetch_sub(1, std::memory_order_relaxed);
    if (counters->outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::MutexLock lock(&counters->idle_mu);  // wakes WaitIdle to re-check
    }
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
