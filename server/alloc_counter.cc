#include "server/alloc_counter.h"

#include <atomic>
#include <cstddef>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}

namespace shoal::server {
namespace {
// Constant-initialized: malloc may run before any constructor.
constinit std::atomic<uint64_t> g_allocations{0};
}  // namespace

std::optional<uint64_t> HeapAllocations() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace shoal::server

extern "C" {
void* malloc(size_t size) {
  shoal::server::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) {
  shoal::server::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) {
  shoal::server::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) {
  shoal::server::g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(alignment, size);
}
}
