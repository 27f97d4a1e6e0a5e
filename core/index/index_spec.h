// IndexSpec: how a collection is (to be) indexed. Per-request search parameters live in the
// search request, not here (faiss's SearchParameters habit).
#pragma once

#include <cstdint>

namespace shoal::core {

enum class IndexType : uint8_t { kFlat = 1, kIvfFlat = 2, kIvfSq8 = 3, kIvfPq = 4 };

struct IndexSpec {
  IndexType type = IndexType::kFlat;
  uint32_t nlist = 0;           // 0 = chosen at build time
  uint32_t pq_m = 0;            // IVF_PQ only
  uint32_t default_nprobe = 0;  // 0 = server default
  uint32_t pq_bits = 0;         // IVF_PQ only: 0 or 8 = 8-bit codes, 4 = fast-scan
};

}  // namespace shoal::core
