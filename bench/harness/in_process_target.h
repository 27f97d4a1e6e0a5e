// InProcessTarget: what FAISS and hnswlib targets share — resource figures read from this
// process. The process's RSS also holds the harness's dataset and memory the allocator kept
// from earlier targets, so memory is measured as heap bytes in use (mallinfo2, every arena)
// now minus just before Build(): what the index holds.
//
// Thread-safety: as Target.
#pragma once

#include <malloc.h>
#include <unistd.h>

#include "core/base/sanitizers.h"

#if defined(SHOAL_ASAN) || defined(SHOAL_TSAN)
// From the sanitizer runtime (GCC ships no header for it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

#include "bench/harness/process_usage.h"
#include "bench/harness/target.h"

namespace shoal::bench {

class InProcessTarget : public Target {
 public:
  bool in_process() const final { return true; }

  ResourceUsage Usage() override {
    const uint64_t heap = HeapInUse();
    return {.cpu_seconds = ReadProcessUsage(getpid()).cpu_seconds,
            .index_heap_bytes = heap > heap_before_build_ ? heap - heap_before_build_ : 0};
  }

 protected:
  // Call first thing in Build().
  void MarkBuildStart() { heap_before_build_ = HeapInUse(); }

 private:
  static uint64_t HeapInUse() {
#if defined(SHOAL_ASAN) || defined(SHOAL_TSAN)
    return __sanitizer_get_current_allocated_bytes();  // the sanitizer owns malloc
#else
    const struct mallinfo2 m = mallinfo2();
    return uint64_t(m.uordblks) + uint64_t(m.hblkhd);  // small blocks + mmapped ones
#endif
  }

  uint64_t heap_before_build_ = 0;
};

}  // namespace shoal::bench
