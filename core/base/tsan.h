// ThreadSanitizer helpers for hand-offs TSan cannot see: synchronisation inside an
// uninstrumented library (gRPC's completion queue, libtbb). SHOAL_TSAN is defined in TSan
// builds; HandOff(p) on one thread and TakeOver(p) on another order everything the first did
// before HandOff after everything the second does after TakeOver, at address p only. Both are
// no-ops in every other build.
//
// Thread-safety: any thread.
#pragma once

#include "core/base/sanitizers.h"

#ifdef SHOAL_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace shoal::core {

inline void TsanHandOff([[maybe_unused]] void* at) {
#ifdef SHOAL_TSAN
  __tsan_release(at);
#endif
}

inline void TsanTakeOver([[maybe_unused]] void* at) {
#ifdef SHOAL_TSAN
  __tsan_acquire(at);
#endif
}

}  // namespace shoal::core
