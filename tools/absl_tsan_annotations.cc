// ThreadSanitizer builds only: makes Debian's (uninstrumented) absl::Mutex visible to TSan.
//
// libabsl_synchronization is not built with -fsanitize=thread, so TSan sees none of its
// happens-before edges and reports every absl::Mutex-guarded access as a race. This file
// interposes the Mutex and CondVar entry points Shoal uses: each forwards to the real function
// (dlsym RTLD_NEXT) and tells TSan that releasing the mutex happens before acquiring it again
// (__tsan_release / __tsan_acquire on the mutex's address). Waiting (Await, CondVar::Wait)
// releases and re-acquires inside abseil, so it is annotated as both.
//
// Linked into every executable of the tsan preset (cmake/ShoalHelpers.cmake), nowhere else.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);

namespace {

template <typename Fn>
Fn Real(const char* symbol) {
  void* p = dlsym(RTLD_NEXT, symbol);
  if (p == nullptr) {
    std::fprintf(stderr, "absl_tsan_annotations: %s not found\n", symbol);
    std::abort();
  }
  return reinterpret_cast<Fn>(p);
}

using MuFn = void (*)(absl::Mutex*);
using MuBoolFn = bool (*)(absl::Mutex*);
using MuCondFn = void (*)(absl::Mutex*, const absl::Condition&);
using MuCondTimeoutFn = bool (*)(absl::Mutex*, const absl::Condition&, absl::Duration);
using CvWaitFn = void (*)(absl::CondVar*, absl::Mutex*);
using CvWaitTimeoutFn = bool (*)(absl::CondVar*, absl::Mutex*, absl::Duration);

// While abseil runs, reads are not recorded. abseil evaluates a waiter's Condition on the thread
// that releases the mutex, and the Condition (with its captures) lives on the waiter's stack:
// without this, the waiter reusing that stack later is reported as a race with the releasing
// thread's read, which nothing orders (the wake-up is a futex abseil does not annotate).
struct IgnoreReadsInAbseil {
  IgnoreReadsInAbseil() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); }
  ~IgnoreReadsInAbseil() { AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
};

// Mangled names of the absl (inline namespace debian3) members wrapped below.
#define SHOAL_ABSL_NS "N4absl7debian3"

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const MuFn real = Real<MuFn>("_Z" SHOAL_ABSL_NS "5Mutex4LockEv");
  {
    IgnoreReadsInAbseil ignore;
    real(this);
  }
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const MuFn real = Real<MuFn>("_Z" SHOAL_ABSL_NS "5Mutex6UnlockEv");
  __tsan_release(this);
  {
    IgnoreReadsInAbseil ignore;
    real(this);
  }
}

bool Mutex::TryLock() {
  static const MuBoolFn real = Real<MuBoolFn>("_Z" SHOAL_ABSL_NS "5Mutex7TryLockEv");
  bool locked;
  {
    IgnoreReadsInAbseil ignore;
    locked = real(this);
  }
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static const MuFn real = Real<MuFn>("_Z" SHOAL_ABSL_NS "5Mutex10ReaderLockEv");
  {
    IgnoreReadsInAbseil ignore;
    real(this);
  }
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static const MuFn real = Real<MuFn>("_Z" SHOAL_ABSL_NS "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  {
    IgnoreReadsInAbseil ignore;
    real(this);
  }
}

void Mutex::Await(const Condition& cond) {
  static const MuCondFn real = Real<MuCondFn>("_Z" SHOAL_ABSL_NS "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  {
    IgnoreReadsInAbseil ignore;
    real(this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const MuCondTimeoutFn real = Real<MuCondTimeoutFn>(
      "_Z" SHOAL_ABSL_NS "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  bool met;
  {
    IgnoreReadsInAbseil ignore;
    met = real(this, cond, timeout);
  }
  __tsan_acquire(this);
  return met;
}

void Mutex::LockWhen(const Condition& cond) {
  static const MuCondFn real =
      Real<MuCondFn>("_Z" SHOAL_ABSL_NS "5Mutex8LockWhenERKNS0_9ConditionE");
  {
    IgnoreReadsInAbseil ignore;
    real(this, cond);
  }
  __tsan_acquire(this);
}

void CondVar::Wait(Mutex* mu) {
  static const CvWaitFn real = Real<CvWaitFn>("_Z" SHOAL_ABSL_NS "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  {
    IgnoreReadsInAbseil ignore;
    real(this, mu);
  }
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const CvWaitTimeoutFn real = Real<CvWaitTimeoutFn>(
      "_Z" SHOAL_ABSL_NS "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  bool timed_out;
  {
    IgnoreReadsInAbseil ignore;
    timed_out = real(this, mu, timeout);
  }
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
