// Glue between an IVF model with 4-bit PQ codes (IndexSpec.pq_bits = 4) and the fast-scan
// kernels (core/index/fastscan.h): which models use them, how a partition's rows are laid out
// in a segment, and how a partition is scored for several queries.
//
// A 4-bit model's partition holds the same bytes per row as any residual PQ model (m / 2 code
// bytes, then the float term for L2), rearranged by WriteFastScanRegion into 32-row blocks so a
// scan feeds in-register shuffles; segment extents and checksums cover the rearranged bytes.
// The per-query tables are the residual scheme's f * <q_j, codeword> tables (one per query for
// every partition); a row's key is coarse_key + term + sum of the table entries.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/index/fastscan.h"
#include "core/index/ivf_model.h"

namespace shoal::core {

// Refine factor a 4-bit PQ search uses when the request asks for none (0): the fast-scan
// estimates only shortlist, the exact re-rank from raw vectors decides (docs/NOTES.md).
inline constexpr uint32_t kDefaultFastScanRefine = 10;

inline bool IsFastScan(const IvfModel& model) {
  return model.encoding == VectorEncoding::kPq && model.pq_nbits == 4;
}

// Rearranges a partition's n encoded rows (model.CodeSize() bytes each, as EncodeVectors wrote
// them) in place into the fast-scan region layout. No-op for other models.
void LayoutPartitionCodes(const IvfModel& model, uint8_t* codes, size_t n);

// keys[j * n + i] for row i of a fast-scan partition and the query whose table is luts[j]:
// coarse_keys[j] (null: 0) + term + table sum. REQUIRES: IsFastScan(model).
void ScoreFastScanPartition(const IvfModel& model, const FastScanLut* const* luts,
                            const float* coarse_keys, size_t nq, const uint8_t* codes, size_t n,
                            float* keys);

}  // namespace shoal::core
