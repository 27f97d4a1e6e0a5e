// Distances between float32 queries and half-precision (IEEE binary16) rows: the coarse router
// shortlists a single query's partitions against a half copy of the centroids (half the bytes
// of the float table, which a query otherwise streams whole), then re-scores the shortlist with
// the float kernels of core/index/distance.h.
//
// Halves convert to floats exactly, so a kernel here computes the float distance to the decoded
// row, within the same rounding bound as distance.h's kernels (core/index/rounding_bound.h holds
// for any order of summation).
// Runtime dispatch follows distance.h's level (ActiveSimdLevel, SHOAL_SIMD): AVX-512 and
// AVX2+F16C convert in registers; the portable loop decodes in software.
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shoal::core {

// The nearest half to x (round to nearest even; +-inf past the half range), and back (exact).
uint16_t FloatToHalf(float x);
float HalfToFloat(uint16_t h);

// out[i] = |query - base_i|^2 or <query, base_i> for i in [0, n); base is n x dim halves.
void L2SqrHalfMany(const float* query, const uint16_t* base, size_t n, size_t dim, float* out);
void InnerProductHalfMany(const float* query, const uint16_t* base, size_t n, size_t dim,
                          float* out);

}  // namespace shoal::core
