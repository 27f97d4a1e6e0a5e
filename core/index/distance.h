// Distance kernels for float32 vectors, with runtime dispatch to AVX-512, AVX2+FMA or a
// portable loop. Debian's FAISS is a generic build whose fvec_L2sqr is a scalar loop, so the
// hot scan path uses these instead.
//
// The kernel is chosen once, on first use, from the CPU's features; the environment variable
// SHOAL_SIMD=scalar|avx2|avx512 forces a lower level (for tests and comparisons).
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace shoal::core {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// The highest level this CPU supports (ignores SHOAL_SIMD).
SimdLevel DetectSimdLevel();
// The level in use.
SimdLevel ActiveSimdLevel();
std::string_view SimdLevelName(SimdLevel level);

float L2Sqr(const float* a, const float* b, size_t dim);
float InnerProduct(const float* a, const float* b, size_t dim);

// out[i] = distance(query, base + i * dim) for i in [0, n). base is row-major.
void L2SqrMany(const float* query, const float* base, size_t n, size_t dim, float* out);
void InnerProductMany(const float* query, const float* base, size_t n, size_t dim, float* out);

// The same kernels at a fixed level, for tests. REQUIRES: the CPU supports `level`.
float L2SqrAt(SimdLevel level, const float* a, const float* b, size_t dim);
float InnerProductAt(SimdLevel level, const float* a, const float* b, size_t dim);

}  // namespace shoal::core
