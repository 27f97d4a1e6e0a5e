// Rounding bounds for float distance keys computed in different summation orders (BLAS sgemm,
// the SIMD kernels of core/index/distance.h). Shared by every place that scores with sgemm
// and must still give exactly the single-query kernels' answer: the coarse router
// (core/index/coarse_router.h) and the exact-FLAT partition scan (core/index/ivf_scan.cc).
//
// For a query q and a row x of `dim` floats, an L2 key |q|^2 + |x|^2 - 2<q, x> or |q - x|^2 and
// an inner-product key -<q, x>, computed in float in any summation order, are within
// DistanceRoundingBound(dim, |q|^2, |x|^2) of the true value: gamma(n) = n u / (1 - n u),
// u = 2^-24, bounds the relative error of an n-term dot product; 8 * gamma(dim + 8) * (|q|^2 +
// |x|^2) covers the norms, the product and the additions of the L2 form (and |<q, x>| <=
// (|q|^2 + |x|^2) / 2 the IP one) with a factor of two to spare, plus an absolute term for
// products that underflow. Two computations of one key thus differ by at most twice the bound.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

namespace shoal::core {

// gamma(n) = n u / (1 - n u): the relative rounding bound of an n-term dot product.
inline float DotGamma(size_t n) {
  const double u = std::ldexp(1.0, -24);
  return float(double(n) * u / (1.0 - double(n) * u));
}

// See above. query_norm_sq / row_norm_sq: |q|^2 and |x|^2 (or an upper bound of them).
inline float DistanceRoundingBound(size_t dim, float query_norm_sq, float row_norm_sq) {
  return 8 * DotGamma(dim + 8) * (query_norm_sq + row_norm_sq) +
         float(dim) * std::numeric_limits<float>::min();
}

}  // namespace shoal::core
