#include "core/index/half_distance.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/index/distance.h"
#include "core/index/gcc_intrinsics_warnings.h"

namespace shoal::core {
namespace {

float L2Scalar(const float* q, const uint16_t* h, size_t dim) {
  float sum = 0;
  for (size_t i = 0; i < dim; ++i) {
    const float d = q[i] - HalfToFloat(h[i]);
    sum += d * d;
  }
  return sum;
}

float IpScalar(const float* q, const uint16_t* h, size_t dim) {
  float sum = 0;
  for (size_t i = 0; i < dim; ++i) sum += q[i] * HalfToFloat(h[i]);
  return sum;
}

__attribute__((target("avx512f"))) __m512 Load16(const uint16_t* h) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
}

// Two accumulators over 32 dims a step; the tail (dim % 16) in scalar code.
__attribute__((target("avx512f"))) float L2Avx512(const float* q, const uint16_t* h, size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(q + i), Load16(h + i));
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(q + i + 16), Load16(h + i + 16));
    acc0 = _mm512_fmadd_ps(d0, d0, acc0);
    acc1 = _mm512_fmadd_ps(d1, d1, acc1);
  }
  for (; i + 16 <= dim; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(q + i), Load16(h + i));
    acc0 = _mm512_fmadd_ps(d, d, acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + L2Scalar(q + i, h + i, dim - i);
}

__attribute__((target("avx512f"))) float IpAvx512(const float* q, const uint16_t* h, size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), Load16(h + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), Load16(h + i + 16), acc1);
  }
  for (; i + 16 <= dim; i += 16)
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), Load16(h + i), acc0);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + IpScalar(q + i, h + i, dim - i);
}

__attribute__((target("avx2,fma,f16c"))) __m256 Load8(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

__attribute__((target("avx2,fma,f16c"))) float Sum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma,f16c"))) float L2Avx2(const float* q, const uint16_t* h,
                                                      size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(q + i), Load8(h + i));
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(q + i + 8), Load8(h + i + 8));
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
  }
  return Sum8(_mm256_add_ps(acc0, acc1)) + L2Scalar(q + i, h + i, dim - i);
}

__attribute__((target("avx2,fma,f16c"))) float IpAvx2(const float* q, const uint16_t* h,
                                                      size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), Load8(h + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), Load8(h + i + 8), acc1);
  }
  return Sum8(_mm256_add_ps(acc0, acc1)) + IpScalar(q + i, h + i, dim - i);
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports has no "f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

using HalfKernel = float (*)(const float*, const uint16_t*, size_t);

struct HalfKernels {
  HalfKernel l2, ip;
};

const HalfKernels& Active() {
  static const HalfKernels kernels = []() -> HalfKernels {
    const SimdLevel level = ActiveSimdLevel();
    if (level == SimdLevel::kAvx512) return {L2Avx512, IpAvx512};
    if (level == SimdLevel::kAvx2 && HasF16c()) return {L2Avx2, IpAvx2};
    return {L2Scalar, IpScalar};
  }();
  return kernels;
}

}  // namespace

uint16_t FloatToHalf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN, inf
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to inf
  if (abs < 0x38800000u) {
    // Below 2^-14: a subnormal half, x / 2^-24 rounded to nearest even (the scaling is exact;
    // 1024 is the smallest normal half, which the encoding gets right).
    float a;
    std::memcpy(&a, &abs, sizeof a);
    return sign | uint16_t(std::nearbyint(a * 0x1p24f));
  }
  // Rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits, to nearest even;
  // a carry into the exponent is the right encoding.
  uint32_t h = (abs - 0x38000000u) >> 13;
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | uint16_t(h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = float(mantissa) * 0x1p-24f;  // zero or subnormal: exact
  } else {
    const uint32_t bits = (exponent == 31 ? 0x7f800000u : (exponent + 112) << 23) | mantissa << 13;
    std::memcpy(&magnitude, &bits, sizeof magnitude);
  }
  return (h & 0x8000u) ? -magnitude : magnitude;
}

void L2SqrHalfMany(const float* query, const uint16_t* base, size_t n, size_t dim, float* out) {
  const HalfKernel l2 = Active().l2;
  for (size_t i = 0; i < n; ++i) out[i] = l2(query, base + i * dim, dim);
}

void InnerProductHalfMany(const float* query, const uint16_t* base, size_t n, size_t dim,
                          float* out) {
  const HalfKernel ip = Active().ip;
  for (size_t i = 0; i < n; ++i) out[i] = ip(query, base + i * dim, dim);
}

}  // namespace shoal::core
