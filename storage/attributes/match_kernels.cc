#include "storage/attributes/match_kernels.h"

#include <immintrin.h>

#include "core/index/gcc_intrinsics_warnings.h"

namespace shoal::storage {
namespace {

using core::SimdLevel;
using core::filter::CompareOp;

// The reference loop: 64 answers to a word, without a branch per value.
template <typename T, typename P>
void OrScalar(const T* v, size_t n, P satisfies, uint64_t* words) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t b = 0; b < 64; ++b) word |= uint64_t(satisfies(v[i + b])) << b;
    words[i >> 6] |= word;
  }
  for (; i < n; ++i) words[i >> 6] |= uint64_t(satisfies(v[i])) << (i & 63);
}

struct Interval {
  int64_t lo;
  uint64_t span;
  bool outside;
  bool operator()(int64_t v) const { return (uint64_t(v) - uint64_t(lo) <= span) != outside; }
};

// `v op x` with op fixed at compile time, and the matching vector compare predicate (ordered
// and quiet, except != which is true for NaN as the scalar != is).
template <CompareOp kOp>
struct Compare {
  double x;
  bool operator()(double v) const {
    switch (kOp) {
      case CompareOp::kEq:
        return v == x;
      case CompareOp::kNe:
        return v != x;
      case CompareOp::kLt:
        return v < x;
      case CompareOp::kLe:
        return v <= x;
      case CompareOp::kGt:
        return v > x;
      case CompareOp::kGe:
        return v >= x;
    }
    return false;
  }
  static constexpr int kPredicate = kOp == CompareOp::kEq   ? _CMP_EQ_OQ
                                    : kOp == CompareOp::kNe ? _CMP_NEQ_UQ
                                    : kOp == CompareOp::kLt ? _CMP_LT_OQ
                                    : kOp == CompareOp::kLe ? _CMP_LE_OQ
                                    : kOp == CompareOp::kGt ? _CMP_GT_OQ
                                                            : _CMP_GE_OQ;
};

__attribute__((target("avx512f"))) void IntervalAvx512(const int64_t* v, size_t n,
                                                       const Interval& in, uint64_t* words) {
  const __m512i lo = _mm512_set1_epi64(in.lo);
  const __m512i span = _mm512_set1_epi64(int64_t(in.span));
  const uint64_t flip = in.outside ? ~uint64_t(0) : 0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t k = 0; k < 8; ++k) {
      const __m512i d = _mm512_sub_epi64(_mm512_loadu_si512(v + i + 8 * k), lo);
      word |= uint64_t(_mm512_cmple_epu64_mask(d, span)) << (8 * k);
    }
    words[i >> 6] |= word ^ flip;
  }
  OrScalar(v + i, n - i, in, words + (i >> 6));
}

__attribute__((target("avx2"))) void IntervalAvx2(const int64_t* v, size_t n, const Interval& in,
                                                  uint64_t* words) {
  // Unsigned d <= span as signed compares with the sign bits flipped: inside = !(d' > span').
  const __m256i sign = _mm256_set1_epi64x(int64_t(uint64_t(1) << 63));
  const __m256i lo = _mm256_set1_epi64x(in.lo);
  const __m256i span = _mm256_xor_si256(_mm256_set1_epi64x(int64_t(in.span)), sign);
  const uint64_t flip = in.outside ? 0 : ~uint64_t(0);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t above = 0;
    for (size_t k = 0; k < 16; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 4 * k));
      const __m256i d = _mm256_xor_si256(_mm256_sub_epi64(x, lo), sign);
      const __m256i gt = _mm256_cmpgt_epi64(d, span);
      above |= uint64_t(unsigned(_mm256_movemask_pd(_mm256_castsi256_pd(gt)))) << (4 * k);
    }
    words[i >> 6] |= above ^ flip;
  }
  OrScalar(v + i, n - i, in, words + (i >> 6));
}

// Membership in a short sorted set: one equality compare per literal per value.
struct InSet {
  const int64_t* set;
  size_t size;
  bool negate;
  bool operator()(int64_t v) const {
    bool in = false;
    for (size_t j = 0; j < size; ++j) in |= set[j] == v;
    return in != negate;
  }
};

__attribute__((target("avx512f"))) void SetAvx512(const int64_t* v, size_t n, const InSet& in,
                                                  uint64_t* words) {
  const uint64_t flip = in.negate ? ~uint64_t(0) : 0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t k = 0; k < 8; ++k) {
      const __m512i x = _mm512_loadu_si512(v + i + 8 * k);
      __mmask8 m = 0;
      for (size_t j = 0; j < in.size; ++j) {
        m |= _mm512_cmpeq_epi64_mask(x, _mm512_set1_epi64(in.set[j]));
      }
      word |= uint64_t(m) << (8 * k);
    }
    words[i >> 6] |= word ^ flip;
  }
  OrScalar(v + i, n - i, in, words + (i >> 6));
}

__attribute__((target("avx2"))) void SetAvx2(const int64_t* v, size_t n, const InSet& in,
                                             uint64_t* words) {
  const uint64_t flip = in.negate ? ~uint64_t(0) : 0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t k = 0; k < 16; ++k) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 4 * k));
      __m256i eq = _mm256_setzero_si256();
      for (size_t j = 0; j < in.size; ++j) {
        eq = _mm256_or_si256(eq, _mm256_cmpeq_epi64(x, _mm256_set1_epi64x(in.set[j])));
      }
      word |= uint64_t(unsigned(_mm256_movemask_pd(_mm256_castsi256_pd(eq)))) << (4 * k);
    }
    words[i >> 6] |= word ^ flip;
  }
  OrScalar(v + i, n - i, in, words + (i >> 6));
}

template <CompareOp kOp>
__attribute__((target("avx512f"))) void CompareAvx512(const double* v, size_t n, double x,
                                                      uint64_t* words) {
  const __m512d vx = _mm512_set1_pd(x);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t k = 0; k < 8; ++k) {
      const __mmask8 m =
          _mm512_cmp_pd_mask(_mm512_loadu_pd(v + i + 8 * k), vx, Compare<kOp>::kPredicate);
      word |= uint64_t(m) << (8 * k);
    }
    words[i >> 6] |= word;
  }
  OrScalar(v + i, n - i, Compare<kOp>{x}, words + (i >> 6));
}

template <CompareOp kOp>
__attribute__((target("avx2"))) void CompareAvx2(const double* v, size_t n, double x,
                                                 uint64_t* words) {
  const __m256d vx = _mm256_set1_pd(x);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
    for (size_t k = 0; k < 16; ++k) {
      const __m256d m = _mm256_cmp_pd(_mm256_loadu_pd(v + i + 4 * k), vx, Compare<kOp>::kPredicate);
      word |= uint64_t(unsigned(_mm256_movemask_pd(m))) << (4 * k);
    }
    words[i >> 6] |= word;
  }
  OrScalar(v + i, n - i, Compare<kOp>{x}, words + (i >> 6));
}

template <CompareOp kOp>
void CompareAt(SimdLevel level, const double* v, size_t n, double x, uint64_t* words) {
  switch (level) {
    case SimdLevel::kAvx512:
      return CompareAvx512<kOp>(v, n, x, words);
    case SimdLevel::kAvx2:
      return CompareAvx2<kOp>(v, n, x, words);
    case SimdLevel::kScalar:
      break;
  }
  OrScalar(v, n, Compare<kOp>{x}, words);
}

}  // namespace

void OrIntervalBitsAt(SimdLevel level, const int64_t* v, size_t n, int64_t lo, uint64_t span,
                      bool outside, uint64_t* words) {
  const Interval in{lo, span, outside};
  switch (level) {
    case SimdLevel::kAvx512:
      return IntervalAvx512(v, n, in, words);
    case SimdLevel::kAvx2:
      return IntervalAvx2(v, n, in, words);
    case SimdLevel::kScalar:
      break;
  }
  OrScalar(v, n, in, words);
}

void OrSetBitsAt(SimdLevel level, const int64_t* v, size_t n, const int64_t* set, size_t size,
                 bool negate, uint64_t* words) {
  const InSet in{set, size, negate};
  switch (level) {
    case SimdLevel::kAvx512:
      return SetAvx512(v, n, in, words);
    case SimdLevel::kAvx2:
      return SetAvx2(v, n, in, words);
    case SimdLevel::kScalar:
      break;
  }
  OrScalar(v, n, in, words);
}

void OrCompareBitsAt(SimdLevel level, const double* v, size_t n, CompareOp op, double x,
                     uint64_t* words) {
  switch (op) {
    case CompareOp::kEq:
      return CompareAt<CompareOp::kEq>(level, v, n, x, words);
    case CompareOp::kNe:
      return CompareAt<CompareOp::kNe>(level, v, n, x, words);
    case CompareOp::kLt:
      return CompareAt<CompareOp::kLt>(level, v, n, x, words);
    case CompareOp::kLe:
      return CompareAt<CompareOp::kLe>(level, v, n, x, words);
    case CompareOp::kGt:
      return CompareAt<CompareOp::kGt>(level, v, n, x, words);
    case CompareOp::kGe:
      return CompareAt<CompareOp::kGe>(level, v, n, x, words);
  }
}

void OrIntervalBits(const int64_t* v, size_t n, int64_t lo, uint64_t span, bool outside,
                    uint64_t* words) {
  OrIntervalBitsAt(core::ActiveSimdLevel(), v, n, lo, span, outside, words);
}

void OrCompareBits(const double* v, size_t n, CompareOp op, double x, uint64_t* words) {
  OrCompareBitsAt(core::ActiveSimdLevel(), v, n, op, x, words);
}

void OrSetBits(const int64_t* v, size_t n, const int64_t* set, size_t size, bool negate,
               uint64_t* words) {
  OrSetBitsAt(core::ActiveSimdLevel(), v, n, set, size, negate, words);
}

}  // namespace shoal::storage
