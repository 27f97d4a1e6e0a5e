// 4-bit "fast-scan" PQ kernels: distance estimates for many vectors and several queries at once
// from in-register table lookups (the idea of FAISS's IndexPQFastScan / pq4_fast_scan and of
// ScaNN, written for Shoal's partition-major scans).
//
// Codes. A vector's code is FAISS's compact 4-bit PQ code (ProductQuantizer with nbits = 4):
// m / 2 bytes, byte p = c[2p] | c[2p+1] << 4. A partition's codes are stored in blocks of 32
// vectors, transposed so that the 32 bytes of sub-quantizer pair p are contiguous:
//   block[p * 32 + i] = code of row i, byte p.
// One 32-byte load therefore yields, in its low nibbles, sub-quantizer 2p's codes of all 32
// rows and, in its high nibbles, sub-quantizer 2p+1's: each half feeds one vpshufb against
// that sub-quantizer's 16-entry table. AVX-512 loads 64 bytes (two pairs) per step.
//
// Tables. The caller gives, per query, m x 16 floats T (the contribution of code c of
// sub-quantizer j to the key) and an offset, so that key(x) = offset + term(x) + sum_j T[j][c_j]
// (term is an optional per-vector float stored beside the code, e.g. the residual scheme's
// |r|^2 + 2<c, r>). FastScanLut quantizes T to uint8: each table is shifted by its minimum and
// all are scaled by one factor a = 255 / (largest table range), q = round((T - min) * a). The
// estimate is key ~ offset + sum_j min_j + S / a + term with S = sum_j q[j][c_j]; its error is at
// most m / (2a) (FastScanLut::error_bound()).
//
// 16-bit accumulation. Lookups are summed in 16-bit lanes (even rows and odd rows of a 32-row
// block in separate accumulators, FAISS's trick of adding the byte pair as one 16-bit word and
// subtracting the odd bytes afterwards). Every entry is <= 255, so a group of at most 256
// sub-quantizers sums to <= 65280 < 2^16 and the modular 16-bit arithmetic is exact; past 256
// sub-quantizers the sum is flushed into float accumulators (exact below 2^24) and restarted.
//
// Thresholds. FastScanPartition keeps one running threshold per query (the k-th best key so
// far, from the caller): a row is a candidate only when its estimate is <= the threshold, one
// vector compare per 16 rows, and the caller sees only candidates.
//
// Dispatch follows core/index/distance.h (SHOAL_SIMD forces a lower level). The AVX-512 level
// needs AVX-512BW and uses AVX2 otherwise. Every level computes bit-identical keys.
//
// Thread-safety: FastScanLut is immutable after Build(); functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "core/index/distance.h"

namespace shoal::core {

inline constexpr size_t kFastScanBlockRows = 32;
// Queries scored together in one pass over a block (their accumulators stay in registers).
inline constexpr size_t kFastScanQueriesPerPass = 4;

// Bytes of one block of 32 rows with m sub-quantizers. REQUIRES: m even.
constexpr size_t FastScanBlockBytes(size_t m) { return kFastScanBlockRows * m / 2; }
// Bytes of n rows in blocks (the last block padded with zero codes).
constexpr size_t FastScanPackedBytes(size_t n, size_t m) {
  return (n + kFastScanBlockRows - 1) / kFastScanBlockRows * FastScanBlockBytes(m);
}

// codes: n compact codes of m / 2 bytes. out: FastScanPackedBytes(n, m) bytes.
// REQUIRES: m even, m > 0.
void PackFastScanCodes(const uint8_t* codes, size_t n, size_t m, uint8_t* out);
// The compact code (m / 2 bytes) of row i of packed blocks.
void UnpackFastScanCode(const uint8_t* packed, size_t m, size_t i, uint8_t* code);

// One query's quantized tables, laid out for the kernels.
class FastScanLut {
 public:
  // tables: m x 16 floats (see the file comment). REQUIRES: m even, m > 0, finite tables.
  void Build(const float* tables, size_t m, float offset);

  size_t m() const { return m_; }
  // The quantized entry of code c of sub-quantizer j.
  uint8_t entry(size_t j, size_t c) const;
  // key = offset() + S * inv_scale() + term, computed as fma(S, inv_scale, offset) + term.
  float offset() const { return offset_; }
  float inv_scale() const { return inv_scale_; }
  // |estimate - exact key| <= error_bound() (up to float rounding).
  float error_bound() const { return 0.5f * static_cast<float>(m_) * inv_scale_; }
  // Kernel layout: per group of 4 sub-quantizers g, 128 bytes: 64 bytes of "low" tables
  // [T(4g) x2, T(4g+2) x2] then 64 of "high" tables [T(4g+1) x2, T(4g+3) x2] (16 bytes each,
  // repeated for both 128-bit lanes of a shuffle); missing sub-quantizers are zero.
  const uint8_t* layout() const { return layout_.data(); }

 private:
  size_t m_ = 0;
  float offset_ = 0, inv_scale_ = 1;
  std::vector<uint8_t> layout_;
};

// Keys of the 32 rows of one block for nq queries: keys[q * 32 + i] for row i (terms: 32
// floats or null for 0). REQUIRES: nq <= kFastScanQueriesPerPass; all luts have the same m.
void FastScanBlock(const FastScanLut* const* luts, size_t nq, const uint8_t* block,
                   const float* terms, float* keys);
void FastScanBlockAt(SimdLevel level, const FastScanLut* const* luts, size_t nq,
                     const uint8_t* block, const float* terms, float* keys);

// Called for a row whose estimate is <= its query's threshold; returns that query's new
// threshold (e.g. the caller's top-k threshold after pushing the row).
using FastScanSink = absl::FunctionRef<float(size_t query, uint32_t row, float key)>;

// Scans n rows of packed blocks for nq queries (any nq; taken kFastScanQueriesPerPass at a
// time, each group sweeping the partition's blocks while its tables stay in L1). thresholds[q]
// is query q's threshold (+inf: every row is a candidate) and is updated from the sink.
// terms: n floats or null.
void FastScanPartition(const FastScanLut* const* luts, size_t nq, const uint8_t* packed, size_t n,
                       const float* terms, float* thresholds, FastScanSink sink);
void FastScanPartitionAt(SimdLevel level, const FastScanLut* const* luts, size_t nq,
                         const uint8_t* packed, size_t n, const float* terms, float* thresholds,
                         FastScanSink sink);

// ---- Partitions as stored in a segment.
//
// A fast-scan partition's code region has exactly the size of n row-major rows of
// m / 2 code bytes + term_bytes (so segment extents are unchanged): the floor(n / 32) full blocks,
// then the n % 32 tail rows' compact codes row-major, then, if term_bytes is 4, the n float terms
// (unaligned). The scan packs the tail into a block on the fly.

// rows: n rows of row_bytes = m / 2 + term_bytes (compact code, then the float term if
// term_bytes == 4). out: n * row_bytes bytes. REQUIRES: term_bytes 0 or 4.
void WriteFastScanRegion(const uint8_t* rows, size_t n, size_t m, size_t term_bytes, uint8_t* out);
// The compact code of row i and its term (0 without terms) from a region.
void ReadFastScanRegionRow(const uint8_t* region, size_t n, size_t m, size_t term_bytes, size_t i,
                           uint8_t* code, float* term);
// Like FastScanPartition, on a region.
void FastScanRegion(const FastScanLut* const* luts, size_t nq, const uint8_t* region, size_t n,
                    size_t term_bytes, float* thresholds, FastScanSink sink);
// keys[q * n + i] for every row of a region.
void FastScanRegionKeys(const FastScanLut* const* luts, size_t nq, const uint8_t* region, size_t n,
                        size_t term_bytes, float* keys);

// The level FastScan* uses (ActiveSimdLevel(), lowered to AVX2 without AVX-512BW).
SimdLevel FastScanSimdLevel();

}  // namespace shoal::core
