// HeapAllocations() where allocations are not counted: a weak definition in shoal_server, which
// shoald's alloc_counter.cc overrides (tests, tools and sanitizer builds keep this one); see
// server/alloc_counter.h.
#include "server/alloc_counter.h"

namespace shoal::server {

__attribute__((weak)) std::optional<uint64_t> HeapAllocations() { return std::nullopt; }

}  // namespace shoal::server
