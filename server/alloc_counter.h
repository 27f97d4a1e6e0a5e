// Heap allocations made by the process, for shoal_process_heap_allocations_total (shoal-bench
// reports them per query: the hot path should allocate O(1) times per request, not per
// candidate or partition).
//
// alloc_counter.cc interposes glibc's malloc, calloc, realloc and memalign (each counts one
// and forwards to __libc_*): every library's allocations are counted, operator new's included.
// aligned_alloc and posix_memalign are not interposed (glibc serves them itself, from the same
// heap), so over-aligned new is not counted. It is linked into shoald only, and not into
// sanitizer builds (ASan and TSan interpose malloc themselves); everywhere else the weak
// definition in alloc_counter_none.cc answers nullopt.
//
// Thread-safety: thread-safe (one relaxed atomic counter).
#pragma once

#include <cstdint>
#include <optional>

namespace shoal::server {

// Allocations so far; nullopt when this binary does not count them.
std::optional<uint64_t> HeapAllocations();

}  // namespace shoal::server
