// Seeded bugs: deliberate concurrency and memory mistakes that prove the sanitizer passes can see
// what they are there to see, as the model check's seeded bugs prove the model can.
//
// A seeded bug is a named place in the code that does the wrong thing (skips a lock, reads
// freed memory) when it is switched on, and the right thing otherwise. They exist only in
// sanitizer builds (asan, tsan, fuzz: compiled in when the compiler says a sanitizer is on, so
// no preset needs a flag of its own and no extra build is needed); in every other build
// SHOAL_SEEDED_BUG(name) is the constant false and the compiler drops the wrong branch. A
// process switches them on at start-up from the environment:
//
//   SHOAL_SEEDED_BUGS=scan_share.register_unlocked[,name...]
//
// `make test-tsan-seeded` and `make test-asan-seeded` (tools/run-seeded.sh) run, for each
// seeded bug, the tests that reach it with the bug on, and fail unless the sanitizer reports
// it. The names are listed in kSeededBugs below; an unknown name in SHOAL_SEEDED_BUGS ends the
// process at its first check with exit code 2, so a misspelt seed cannot pass by never firing.
//
// Thread-safety: SeededBugOn may run on any thread; the environment is read once.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/base/sanitizers.h"

#if defined(SHOAL_TSAN) || defined(SHOAL_ASAN)
#define SHOAL_SEEDED_BUGS_COMPILED 1
#endif

namespace shoal::core {

// Every seeded bug, with what it breaks. tools/run-seeded.sh names the tests that reach each.
inline constexpr absl::string_view kSeededBugs[] = {
    "scan_share.register_unlocked",      // ScanShare::Register without ScanShare's mutex (TSan)
    "uncached_budget.acquire_unlocked",  // UncachedBudget::Acquire without its mutex (TSan)
    "tls.publish_unlocked",              // TlsCertificates::Publish swaps the pair unlocked (TSan)
    "ivf_search.hand_back_after_free",   // a hand-back's candidates freed before the merge (ASan)
};

#ifdef SHOAL_SEEDED_BUGS_COMPILED
// True when `name` (one of kSeededBugs) is switched on in SHOAL_SEEDED_BUGS.
bool SeededBugOn(absl::string_view name);
#define SHOAL_SEEDED_BUG(name) ::shoal::core::SeededBugOn(name)
#else
#define SHOAL_SEEDED_BUG(name) false
#endif

// absl::MutexLock, except that seeded bug `seed` skips the lock. The thread-safety analysis
// sees a lock either way: a seeded bug must not change what compiles.
class ABSL_SCOPED_LOCKABLE SeedableMutexLock {
 public:
  SeedableMutexLock(absl::Mutex* mu, absl::string_view seed)
      ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : mu_(SHOAL_SEEDED_BUG(seed) ? nullptr : mu) {
    static_cast<void>(seed);
    if (mu_ != nullptr) mu_->Lock();
  }
  ~SeedableMutexLock() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (mu_ != nullptr) mu_->Unlock();
  }
  SeedableMutexLock(const SeedableMutexLock&) = delete;
  SeedableMutexLock& operator=(const SeedableMutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

}  // namespace shoal::core
