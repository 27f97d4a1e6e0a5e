// Match kernels: the loops that test a dense column of numbers against a compiled leaf
// (core/filter/typed_leaf.h) and OR the answers into a bitset, 64 rows to a word — one vector
// compare per 8 (AVX-512) or 4 (AVX2) values (per literal, for a set) and the compare mask is
// the bits, where the scalar loop spends seven instructions a row. Dispatched at the engine's
// SIMD level (core/index/distance.h: the CPU's, lowered by SHOAL_SIMD); the scalar loop is the
// reference. The answers are exactly the leaf's predicates: IntLeaf's interval and set tests,
// DoubleLeaf's native IEEE compares (a NaN value satisfies only !=).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/filter/filter.h"
#include "core/index/distance.h"

namespace shoal::storage {

// Sets bit i of `words` (bit i % 64 of words[i / 64]) for each i < n with
// (uint64(v[i]) - uint64(lo) <= span) != outside; other bits are left as they are.
void OrIntervalBits(const int64_t* v, size_t n, int64_t lo, uint64_t span, bool outside,
                    uint64_t* words);

// Sets bit i of `words` for each i < n with (v[i] in set[0, size)) != negate: one equality
// compare per literal, for the short sets of an `in` leaf (kMaxSetLiterals at most; past that a
// binary search per value is cheaper).
inline constexpr size_t kMaxSetLiterals = 32;
void OrSetBits(const int64_t* v, size_t n, const int64_t* set, size_t size, bool negate,
               uint64_t* words);

// Sets bit i of `words` for each i < n with `v[i] op x`.
void OrCompareBits(const double* v, size_t n, core::filter::CompareOp op, double x,
                   uint64_t* words);

// The same at a given level (tests compare each level with the scalar loop). REQUIRES: the CPU
// supports `level`.
void OrIntervalBitsAt(core::SimdLevel level, const int64_t* v, size_t n, int64_t lo, uint64_t span,
                      bool outside, uint64_t* words);
void OrSetBitsAt(core::SimdLevel level, const int64_t* v, size_t n, const int64_t* set, size_t size,
                 bool negate, uint64_t* words);
void OrCompareBitsAt(core::SimdLevel level, const double* v, size_t n, core::filter::CompareOp op,
                     double x, uint64_t* words);

}  // namespace shoal::storage
