#include "core/index/fastscan_model.h"

#include <cstring>

namespace shoal::core {

void LayoutPartitionCodes(const IvfModel& model, uint8_t* codes, size_t n) {
  if (!IsFastScan(model) || n == 0) return;
  const size_t row_bytes = model.CodeSize();
  const std::vector<uint8_t> rows(codes, codes + n * row_bytes);
  WriteFastScanRegion(rows.data(), n, model.pq_m, row_bytes - model.QuantizerCodeSize(), codes);
}

void ScoreFastScanPartition(const IvfModel& model, const FastScanLut* const* luts,
                            const float* coarse_keys, size_t nq, const uint8_t* codes, size_t n,
                            float* keys) {
  const size_t term_bytes = model.CodeSize() - model.QuantizerCodeSize();
  FastScanRegionKeys(luts, nq, codes, n, term_bytes, keys);
  if (coarse_keys == nullptr) return;
  for (size_t j = 0; j < nq; ++j) {
    float* out = keys + j * n;
    for (size_t i = 0; i < n; ++i) out[i] += coarse_keys[j];
  }
}

}  // namespace shoal::core
