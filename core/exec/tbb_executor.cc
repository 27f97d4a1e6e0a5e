#include "core/exec/tbb_executor.h"

#include <omp.h>

#include <chrono>

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
struct TbbExecutor::Impl {
  explicit Impl(int threads) : arena(threads, /*reserved_for_masters=*/0) {}
  tbb::task_arena arena;
};

TbbExecutor::TbbExecutor(int threads)
    : threads_(threads < 1 ? 1 : threads), impl_(std::make_unique<Impl>(threads_)) {
  impl_->arena.initialize();
}

TbbExecutor::~TbbExecutor() { WaitIdle(); }

void TbbExecutor::Submit(Task task) {
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  // task_arena::enqueue copies its functor; the shared_ptr makes a move-only task copyable.
  auto shared = std::make_shared<Task>(std::move(task));
  SHOAL_HAPPENS_BEFORE(shared.get());
  impl_->arena.enqueue([this, shared] {
    SHOAL_HAPPENS_AFTER(shared.get());
    running_.fetch_add(1, std::memory_order_relaxed);
    // FAISS code inside a task must not fan out to OpenMP threads behind the arena's back
    // (I-2). The setting is a thread-local store, cheap enough to repeat per task.
    omp_set_num_threads(1);
    const auto start = std::chrono::steady_clock::now();
    std::move (*shared)();
    *shared = nullptr;  // release what the task captured before reporting idle
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    busy_micros_.fetch_add(micros, std::memory_order_relaxed);
    running_.fetch_sub(1, std::memory_order_relaxed);
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(idle_mu_);
      idle_cv_.notify_all();
    }
  });
}

void TbbExecutor::WaitIdle() {
  std::unique_lock<std::mutex> lock(idle_mu_);
  idle_cv_.wait(lock, [this] { return outstanding_.load(std::memory_order_acquire) == 0; });
}

}  // namespace shoal::core
