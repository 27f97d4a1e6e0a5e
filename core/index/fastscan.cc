#include "core/index/fastscan.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/index/gcc_intrinsics_warnings.h"

namespace shoal::core {
namespace {

// Sub-quantizers per 16-bit accumulation chunk: 256 entries of <= 255 sum to <= 65280.
constexpr size_t kGroupsPerChunk = 64;  // groups of 4 sub-quantizers
constexpr size_t kRows = kFastScanBlockRows;

size_t LayoutOffset(size_t j) {
  const size_t r = j % 4;
  return (j / 4) * 128 + (r & 1) * 64 + (r >> 1) * 32;
}

// Kernels write keys[q * 32 + i] and masks[q] (bit i: keys <= thresholds[q]).
using BlockKernel = void (*)(const FastScanLut* const* luts, size_t nq, const uint8_t* block,
                             const float* terms, const float* thresholds, float* keys,
                             uint32_t* masks);

void BlockScalar(const FastScanLut* const* luts, size_t nq, const uint8_t* block,
                 const float* terms, const float* thresholds, float* keys, uint32_t* masks) {
  const size_t m = luts[0]->m();
  for (size_t q = 0; q < nq; ++q) {
    const FastScanLut& lut = *luts[q];
    uint32_t mask = 0;
    for (size_t i = 0; i < kRows; ++i) {
      float s = 0;
      for (size_t j0 = 0; j0 < m; j0 += 4 * kGroupsPerChunk) {
        uint32_t chunk = 0;
        for (size_t j = j0; j < std::min(m, j0 + 4 * kGroupsPerChunk); ++j) {
          const uint8_t byte = block[(j / 2) * kRows + i];
          chunk += lut.entry(j, (j % 2 == 0) ? (byte & 15) : (byte >> 4));
        }
        s += static_cast<float>(chunk);
      }
      const float key = std::fma(s, lut.inv_scale(), lut.offset()) + (terms ? terms[i] : 0.0f);
      keys[q * kRows + i] = key;
      if (key <= thresholds[q]) mask |= 1u << i;
    }
    masks[q] = mask;
  }
}

// ---- AVX2: one pair of sub-quantizers (32 bytes) per step.

// Adds the 16-bit chunk sums (even rows in `even`, odd rows in `odd`) to s[0..31] in row order.
__attribute__((target("avx2,fma"))) void FlushAvx2(__m256i even, __m256i odd, float* s) {
  const __m256i lo = _mm256_unpacklo_epi16(even, odd);  // rows 0-7 | 16-23
  const __m256i hi = _mm256_unpackhi_epi16(even, odd);  // rows 8-15 | 24-31
  const __m256i r0 = _mm256_permute2x128_si256(lo, hi, 0x20);
  const __m256i r1 = _mm256_permute2x128_si256(lo, hi, 0x31);
  const __m128i parts[4] = {_mm256_castsi256_si128(r0), _mm256_extracti128_si256(r0, 1),
                            _mm256_castsi256_si128(r1), _mm256_extracti128_si256(r1, 1)};
  for (int k = 0; k < 4; ++k) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(parts[k]));
    _mm256_storeu_ps(s + 8 * k, _mm256_add_ps(_mm256_loadu_ps(s + 8 * k), f));
  }
}

template <int NQ>
__attribute__((target("avx2,fma"))) void BlockAvx2N(const FastScanLut* const* luts,
                                                    const uint8_t* block, const float* terms,
                                                    const float* thresholds, float* keys,
                                                    uint32_t* masks) {
  const size_t pairs = luts[0]->m() / 2;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  alignas(32) float s[NQ][kRows] = {};
  for (size_t p0 = 0; p0 < pairs; p0 += 2 * kGroupsPerChunk) {
    __m256i acc0[NQ], acc1[NQ];
    for (int q = 0; q < NQ; ++q) acc0[q] = acc1[q] = _mm256_setzero_si256();
    const size_t p_end = std::min(pairs, p0 + 2 * kGroupsPerChunk);
    for (size_t p = p0; p < p_end; ++p) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + p * kRows));
      const __m256i lo = _mm256_and_si256(v, nibble);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      const size_t off = (p / 2) * 128 + (p & 1) * 32;
      for (int q = 0; q < NQ; ++q) {
        const uint8_t* t = luts[q]->layout() + off;
        const __m256i rl = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)t), lo);
        const __m256i rh = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)(t + 64)), hi);
        acc0[q] = _mm256_add_epi16(acc0[q], _mm256_add_epi16(rl, rh));
        acc1[q] = _mm256_add_epi16(
            acc1[q], _mm256_add_epi16(_mm256_srli_epi16(rl, 8), _mm256_srli_epi16(rh, 8)));
      }
    }
    for (int q = 0; q < NQ; ++q) {
      FlushAvx2(_mm256_sub_epi16(acc0[q], _mm256_slli_epi16(acc1[q], 8)), acc1[q], s[q]);
    }
  }
  for (int q = 0; q < NQ; ++q) {
    const __m256 inv = _mm256_set1_ps(luts[q]->inv_scale());
    const __m256 off = _mm256_set1_ps(luts[q]->offset());
    const __m256 thr = _mm256_set1_ps(thresholds[q]);
    uint32_t mask = 0;
    for (int k = 0; k < 4; ++k) {
      const __m256 t = terms ? _mm256_loadu_ps(terms + 8 * k) : _mm256_setzero_ps();
      const __m256 key = _mm256_add_ps(_mm256_fmadd_ps(_mm256_load_ps(s[q] + 8 * k), inv, off), t);
      _mm256_storeu_ps(keys + q * kRows + 8 * k, key);
      mask |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(key, thr, _CMP_LE_OQ)))
              << (8 * k);
    }
    masks[q] = mask;
  }
}

// ---- AVX-512BW: two pairs (64 bytes, 4 sub-quantizers) per step.

__attribute__((target("avx512f,avx512bw"))) void FlushAvx512(__m512i even, __m512i odd, float* s) {
  // Words 0-15 hold sub-quantizers 4g, 4g+1; words 16-31 hold 4g+2, 4g+3: fold the halves.
  const __m256i e =
      _mm256_add_epi16(_mm512_castsi512_si256(even), _mm512_extracti64x4_epi64(even, 1));
  const __m256i o =
      _mm256_add_epi16(_mm512_castsi512_si256(odd), _mm512_extracti64x4_epi64(odd, 1));
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(e), o, 1);
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24,
                                         8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i rows = _mm512_permutexvar_epi16(order, both);
  const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(rows)));
  const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(rows, 1)));
  _mm512_storeu_ps(s, _mm512_add_ps(_mm512_loadu_ps(s), f0));
  _mm512_storeu_ps(s + 16, _mm512_add_ps(_mm512_loadu_ps(s + 16), f1));
}

template <int NQ>
__attribute__((target("avx512f,avx512bw"))) void BlockAvx512N(const FastScanLut* const* luts,
                                                              const uint8_t* block,
                                                              const float* terms,
                                                              const float* thresholds, float* keys,
                                                              uint32_t* masks) {
  const size_t pairs = luts[0]->m() / 2;
  const size_t groups = (pairs + 1) / 2;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  alignas(64) float s[NQ][kRows] = {};
  for (size_t g0 = 0; g0 < groups; g0 += kGroupsPerChunk) {
    __m512i acc0[NQ], acc1[NQ];
    for (int q = 0; q < NQ; ++q) acc0[q] = acc1[q] = _mm512_setzero_si512();
    const size_t g_end = std::min(groups, g0 + kGroupsPerChunk);
    for (size_t g = g0; g < g_end; ++g) {
      // An odd last pair loads 32 bytes; its missing partner's tables are zero.
      const __mmask64 load = (2 * g + 1 < pairs) ? ~__mmask64{0} : __mmask64{0xffffffff};
      const __m512i v = _mm512_maskz_loadu_epi8(load, block + g * 64);
      const __m512i lo = _mm512_and_si512(v, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
      for (int q = 0; q < NQ; ++q) {
        const uint8_t* t = luts[q]->layout() + g * 128;
        const __m512i rl = _mm512_shuffle_epi8(_mm512_loadu_si512(t), lo);
        const __m512i rh = _mm512_shuffle_epi8(_mm512_loadu_si512(t + 64), hi);
        acc0[q] = _mm512_add_epi16(acc0[q], _mm512_add_epi16(rl, rh));
        acc1[q] = _mm512_add_epi16(
            acc1[q], _mm512_add_epi16(_mm512_srli_epi16(rl, 8), _mm512_srli_epi16(rh, 8)));
      }
    }
    for (int q = 0; q < NQ; ++q) {
      FlushAvx512(_mm512_sub_epi16(acc0[q], _mm512_slli_epi16(acc1[q], 8)), acc1[q], s[q]);
    }
  }
  for (int q = 0; q < NQ; ++q) {
    const __m512 inv = _mm512_set1_ps(luts[q]->inv_scale());
    const __m512 off = _mm512_set1_ps(luts[q]->offset());
    const __m512 thr = _mm512_set1_ps(thresholds[q]);
    uint32_t mask = 0;
    for (int k = 0; k < 2; ++k) {
      const __m512 t = terms ? _mm512_loadu_ps(terms + 16 * k) : _mm512_setzero_ps();
      const __m512 key = _mm512_add_ps(_mm512_fmadd_ps(_mm512_load_ps(s[q] + 16 * k), inv, off), t);
      _mm512_storeu_ps(keys + q * kRows + 16 * k, key);
      mask |= static_cast<uint32_t>(_mm512_cmp_ps_mask(key, thr, _CMP_LE_OQ)) << (16 * k);
    }
    masks[q] = mask;
  }
}

#define SHOAL_FASTSCAN_DISPATCH(NAME, IMPL)                                                      \
  void NAME(const FastScanLut* const* luts, size_t nq, const uint8_t* block, const float* terms, \
            const float* thresholds, float* keys, uint32_t* masks) {                             \
    switch (nq) {                                                                                \
      case 1:                                                                                    \
        return IMPL<1>(luts, block, terms, thresholds, keys, masks);                             \
      case 2:                                                                                    \
        return IMPL<2>(luts, block, terms, thresholds, keys, masks);                             \
      case 3:                                                                                    \
        return IMPL<3>(luts, block, terms, thresholds, keys, masks);                             \
      default:                                                                                   \
        return IMPL<4>(luts, block, terms, thresholds, keys, masks);                             \
    }                                                                                            \
  }

SHOAL_FASTSCAN_DISPATCH(BlockAvx2, BlockAvx2N)
SHOAL_FASTSCAN_DISPATCH(BlockAvx512, BlockAvx512N)
#undef SHOAL_FASTSCAN_DISPATCH

SimdLevel Supported(SimdLevel level) {
  if (level == SimdLevel::kAvx512) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bw")) return SimdLevel::kAvx2;
  }
  return level;
}

BlockKernel KernelAt(SimdLevel level) {
  switch (Supported(level)) {
    case SimdLevel::kAvx512:
      return BlockAvx512;
    case SimdLevel::kAvx2:
      return BlockAvx2;
    case SimdLevel::kScalar:
      break;
  }
  return BlockScalar;
}

// Where a scan finds its blocks: `full` whole blocks at `blocks`, then (tail != null) the
// remaining rows as compact row-major codes; terms: n floats at any alignment, or null.
struct BlockSource {
  const uint8_t* blocks;
  size_t full;
  const uint8_t* tail;
  const uint8_t* terms;
};

void ScanPartition(BlockKernel kernel, const FastScanLut* const* luts, size_t nq,
                   const BlockSource& src, size_t n, float* thresholds, FastScanSink sink) {
  if (nq == 0 || n == 0) return;
  const size_t m = luts[0]->m(), block_bytes = FastScanBlockBytes(m);
  const size_t blocks = (n + kRows - 1) / kRows;
  alignas(64) float keys[kFastScanQueriesPerPass * kRows];
  alignas(64) float block_terms[kRows];
  uint32_t masks[kFastScanQueriesPerPass];
  std::vector<uint8_t> tail_block;
  if (src.full < blocks) {
    tail_block.resize(block_bytes);
    PackFastScanCodes(src.tail, n - src.full * kRows, m, tail_block.data());
  }
  for (size_t q0 = 0; q0 < nq; q0 += kFastScanQueriesPerPass) {
    const size_t group = std::min(kFastScanQueriesPerPass, nq - q0);
    for (size_t b = 0; b < blocks; ++b) {
      const size_t rows = std::min(kRows, n - b * kRows);
      const float* t = nullptr;
      if (src.terms != nullptr) {
        std::memcpy(block_terms, src.terms + b * kRows * sizeof(float), rows * sizeof(float));
        std::fill(block_terms + rows, block_terms + kRows, 0.0f);
        t = block_terms;
      }
      const uint8_t* block = b < src.full ? src.blocks + b * block_bytes : tail_block.data();
      kernel(luts + q0, group, block, t, thresholds + q0, keys, masks);
      const uint32_t valid = rows == kRows ? ~0u : (1u << rows) - 1;
      for (size_t q = 0; q < group; ++q) {
        for (uint32_t mask = masks[q] & valid; mask != 0; mask &= mask - 1) {
          const int i = __builtin_ctz(mask);
          const float key = keys[q * kRows + i];
          float& threshold = thresholds[q0 + q];
          if (key <= threshold) threshold = sink(q0 + q, uint32_t(b * kRows + i), key);
        }
      }
    }
  }
}

}  // namespace

void PackFastScanCodes(const uint8_t* codes, size_t n, size_t m, uint8_t* out) {
  const size_t bytes = m / 2, block_bytes = FastScanBlockBytes(m);
  std::memset(out, 0, FastScanPackedBytes(n, m));
  for (size_t i = 0; i < n; ++i) {
    uint8_t* block = out + (i / kRows) * block_bytes;
    for (size_t p = 0; p < bytes; ++p) block[p * kRows + i % kRows] = codes[i * bytes + p];
  }
}

void UnpackFastScanCode(const uint8_t* packed, size_t m, size_t i, uint8_t* code) {
  const uint8_t* block = packed + (i / kRows) * FastScanBlockBytes(m);
  for (size_t p = 0; p < m / 2; ++p) code[p] = block[p * kRows + i % kRows];
}

void FastScanLut::Build(const float* tables, size_t m, float offset) {
  m_ = m;
  layout_.assign((m + 3) / 4 * 128, 0);
  float max_range = 0;
  double bias = 0;
  std::vector<float> mins(m);
  for (size_t j = 0; j < m; ++j) {
    const float* t = tables + j * 16;
    const auto [lo, hi] = std::minmax_element(t, t + 16);
    mins[j] = *lo;
    bias += *lo;
    max_range = std::max(max_range, *hi - *lo);
  }
  float scale = max_range > 0 ? 255.0f / max_range : 1.0f;
  if (!std::isfinite(scale) || !(scale > 0)) scale = 1.0f;  // an infinite range gives 0
  inv_scale_ = 1.0f / scale;
  offset_ = offset + static_cast<float>(bias);
  for (size_t j = 0; j < m; ++j) {
    uint8_t q[16];
    for (size_t c = 0; c < 16; ++c) {
      const float v = std::nearbyint((tables[j * 16 + c] - mins[j]) * scale);
      // NaN (a NaN or infinite entry) passes std::clamp, and its cast to uint8_t is undefined:
      // it takes the worst code, as +inf does, so it never looks near.
      q[c] = std::isnan(v) ? 255 : static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
    }
    std::memcpy(&layout_[LayoutOffset(j)], q, 16);
    std::memcpy(&layout_[LayoutOffset(j) + 16], q, 16);
  }
}

uint8_t FastScanLut::entry(size_t j, size_t c) const { return layout_[LayoutOffset(j) + c]; }

SimdLevel FastScanSimdLevel() {
  static const SimdLevel level = Supported(ActiveSimdLevel());
  return level;
}

void FastScanBlockAt(SimdLevel level, const FastScanLut* const* luts, size_t nq,
                     const uint8_t* block, const float* terms, float* keys) {
  const float inf[kFastScanQueriesPerPass] = {
      std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  uint32_t masks[kFastScanQueriesPerPass];
  if (nq > 0) KernelAt(level)(luts, nq, block, terms, inf, keys, masks);
}

void FastScanBlock(const FastScanLut* const* luts, size_t nq, const uint8_t* block,
                   const float* terms, float* keys) {
  FastScanBlockAt(FastScanSimdLevel(), luts, nq, block, terms, keys);
}

void FastScanPartitionAt(SimdLevel level, const FastScanLut* const* luts, size_t nq,
                         const uint8_t* packed, size_t n, const float* terms, float* thresholds,
                         FastScanSink sink) {
  const BlockSource src{packed, (n + kRows - 1) / kRows, nullptr,
                        reinterpret_cast<const uint8_t*>(terms)};
  ScanPartition(KernelAt(level), luts, nq, src, n, thresholds, sink);
}

void FastScanPartition(const FastScanLut* const* luts, size_t nq, const uint8_t* packed, size_t n,
                       const float* terms, float* thresholds, FastScanSink sink) {
  FastScanPartitionAt(FastScanSimdLevel(), luts, nq, packed, n, terms, thresholds, sink);
}

void WriteFastScanRegion(const uint8_t* rows, size_t n, size_t m, size_t term_bytes, uint8_t* out) {
  const size_t code_bytes = m / 2, row_bytes = code_bytes + term_bytes;
  const size_t full = n / kRows;
  std::vector<uint8_t> codes(n * code_bytes);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&codes[i * code_bytes], rows + i * row_bytes, code_bytes);
  }
  PackFastScanCodes(codes.data(), full * kRows, m, out);
  std::memcpy(out + full * FastScanBlockBytes(m), codes.data() + full * kRows * code_bytes,
              (n - full * kRows) * code_bytes);
  uint8_t* terms = out + n * code_bytes;
  for (size_t i = 0; i < n && term_bytes != 0; ++i) {
    std::memcpy(terms + i * sizeof(float), rows + i * row_bytes + code_bytes, sizeof(float));
  }
}

void ReadFastScanRegionRow(const uint8_t* region, size_t n, size_t m, size_t term_bytes, size_t i,
                           uint8_t* code, float* term) {
  const size_t code_bytes = m / 2, full = n / kRows;
  if (i < full * kRows) {
    UnpackFastScanCode(region, m, i, code);
  } else {
    std::memcpy(code, region + full * FastScanBlockBytes(m) + (i - full * kRows) * code_bytes,
                code_bytes);
  }
  *term = 0;
  if (term_bytes != 0) {
    std::memcpy(term, region + n * code_bytes + i * sizeof(float), sizeof(float));
  }
}

void FastScanRegion(const FastScanLut* const* luts, size_t nq, const uint8_t* region, size_t n,
                    size_t term_bytes, float* thresholds, FastScanSink sink) {
  if (nq == 0) return;
  const size_t m = luts[0]->m(), full = n / kRows;
  const BlockSource src{region, full, region + full * FastScanBlockBytes(m),
                        term_bytes ? region + n * m / 2 : nullptr};
  ScanPartition(KernelAt(FastScanSimdLevel()), luts, nq, src, n, thresholds, sink);
}

void FastScanRegionKeys(const FastScanLut* const* luts, size_t nq, const uint8_t* region, size_t n,
                        size_t term_bytes, float* keys) {
  if (nq == 0 || n == 0) return;
  const BlockKernel kernel = KernelAt(FastScanSimdLevel());
  const size_t m = luts[0]->m(), block_bytes = FastScanBlockBytes(m), full = n / kRows;
  const uint8_t* terms = term_bytes ? region + n * m / 2 : nullptr;
  std::vector<uint8_t> tail_block;
  if (full * kRows < n) {
    tail_block.resize(block_bytes);
    PackFastScanCodes(region + full * block_bytes, n - full * kRows, m, tail_block.data());
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float inf[kFastScanQueriesPerPass] = {kInf, kInf, kInf, kInf};
  alignas(64) float block_keys[kFastScanQueriesPerPass * kRows];
  alignas(64) float block_terms[kRows];
  uint32_t masks[kFastScanQueriesPerPass];
  // Blocks outside, query groups inside: a block's codes stay in L1 across every query.
  for (size_t b = 0; b * kRows < n; ++b) {
    const size_t rows = std::min(kRows, n - b * kRows);
    const float* t = nullptr;
    if (terms != nullptr) {
      std::memcpy(block_terms, terms + b * kRows * sizeof(float), rows * sizeof(float));
      std::fill(block_terms + rows, block_terms + kRows, 0.0f);
      t = block_terms;
    }
    const uint8_t* block = b < full ? region + b * block_bytes : tail_block.data();
    for (size_t q0 = 0; q0 < nq; q0 += kFastScanQueriesPerPass) {
      const size_t group = std::min(kFastScanQueriesPerPass, nq - q0);
      kernel(luts + q0, group, block, t, inf, block_keys, masks);
      for (size_t q = 0; q < group; ++q) {
        std::memcpy(keys + (q0 + q) * n + b * kRows, block_keys + q * kRows, rows * sizeof(float));
      }
    }
  }
}

}  // namespace shoal::core
