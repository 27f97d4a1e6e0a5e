// libFuzzer target: RPC validation over arbitrary (parseable) requests never crashes, and a
// request it accepts really is well-formed.
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "server/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal;
  if (size == 0) return 0;
  const uint32_t dim = 1 + data[0] % 8;
  const void* body = data + 1;
  const int n = int(size - 1);
  v1::SearchRequest search;
  if (search.ParseFromArray(body, n) && server::ValidateSearch(search, dim).ok()) {
    for (const auto& q : search.queries()) {
      if (uint32_t(q.values_size()) != dim) std::abort();
      for (float v : q.values()) {
        if (!std::isfinite(v)) std::abort();
      }
    }
    if (search.k() == 0 || search.k() > server::kMaxK) std::abort();
  }
  v1::UpsertRequest upsert;
  if (upsert.ParseFromArray(body, n) && server::ValidateUpsert(upsert, dim).ok()) {
    for (const auto& p : upsert.points()) {
      if (uint32_t(p.vector_size()) != dim) std::abort();
    }
  }
  v1::CreateCollectionRequest create;
  if (create.ParseFromArray(body, n) && server::ValidateCreate(create).ok()) {
    if (create.dim() == 0 || create.dim() > server::kMaxDim || create.name().empty()) std::abort();
  }
  return 0;
}
