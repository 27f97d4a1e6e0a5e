#include "core/index/distance.h"

#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "core/index/gcc_intrinsics_warnings.h"

namespace shoal::core {
namespace {

float L2SqrScalar(const float* a, const float* b, size_t dim) {
  float sum = 0;
  for (size_t i = 0; i < dim; ++i) {
    const float d = a[i] - b[i];
    sum += d * d;
  }
  return sum;
}

float InnerProductScalar(const float* a, const float* b, size_t dim) {
  float sum = 0;
  for (size_t i = 0; i < dim; ++i) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) float HorizontalSum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

// Four independent accumulators hide the FMA latency; the tail is finished in scalar code.
__attribute__((target("avx2,fma"))) float L2SqrAvx2(const float* a, const float* b, size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16));
    __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24));
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
    acc2 = _mm256_fmadd_ps(d2, d2, acc2);
    acc3 = _mm256_fmadd_ps(d3, d3, acc3);
  }
  for (; i + 8 <= dim; i += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc0 = _mm256_fmadd_ps(d, d, acc0);
  }
  float sum = HorizontalSum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  return sum + L2SqrScalar(a + i, b + i, dim - i);
}

__attribute__((target("avx2,fma"))) float InnerProductAvx2(const float* a, const float* b,
                                                           size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= dim; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = HorizontalSum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  return sum + InnerProductScalar(a + i, b + i, dim - i);
}

// The tail uses a masked load, so there is no scalar remainder loop.
__attribute__((target("avx512f"))) float L2SqrAvx512(const float* a, const float* b, size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= dim; i += 64) {
    __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32));
    __m512 d3 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48));
    acc0 = _mm512_fmadd_ps(d0, d0, acc0);
    acc1 = _mm512_fmadd_ps(d1, d1, acc1);
    acc2 = _mm512_fmadd_ps(d2, d2, acc2);
    acc3 = _mm512_fmadd_ps(d3, d3, acc3);
  }
  for (; i + 16 <= dim; i += 16) {
    __m512 d = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    acc0 = _mm512_fmadd_ps(d, d, acc0);
  }
  if (i < dim) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (dim - i)) - 1);
    __m512 d =
        _mm512_sub_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i));
    acc1 = _mm512_fmadd_ps(d, d, acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

__attribute__((target("avx512f"))) float InnerProductAvx512(const float* a, const float* b,
                                                            size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= dim; i += 64) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
  }
  for (; i + 16 <= dim; i += 16) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  }
  if (i < dim) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (dim - i)) - 1);
    acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a + i), _mm512_maskz_loadu_ps(mask, b + i),
                           acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
}

using Kernel = float (*)(const float*, const float*, size_t);

struct Kernels {
  SimdLevel level;
  Kernel l2;
  Kernel ip;
};

Kernels KernelsAt(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return {level, L2SqrAvx512, InnerProductAvx512};
    case SimdLevel::kAvx2:
      return {level, L2SqrAvx2, InnerProductAvx2};
    case SimdLevel::kScalar:
      break;
  }
  return {SimdLevel::kScalar, L2SqrScalar, InnerProductScalar};
}

const Kernels& Active() {
  static const Kernels kernels = [] {
    SimdLevel level = DetectSimdLevel();
    if (const char* forced = std::getenv("SHOAL_SIMD")) {
      SimdLevel want = level;
      if (std::strcmp(forced, "scalar") == 0) want = SimdLevel::kScalar;
      if (std::strcmp(forced, "avx2") == 0) want = SimdLevel::kAvx2;
      if (want < level) level = want;
    }
    return KernelsAt(level);
  }();
  return kernels;
}

}  // namespace

SimdLevel DetectSimdLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel ActiveSimdLevel() { return Active().level; }

std::string_view SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kScalar:
      break;
  }
  return "scalar";
}

float L2Sqr(const float* a, const float* b, size_t dim) { return Active().l2(a, b, dim); }
float InnerProduct(const float* a, const float* b, size_t dim) { return Active().ip(a, b, dim); }

void L2SqrMany(const float* query, const float* base, size_t n, size_t dim, float* out) {
  const Kernel l2 = Active().l2;
  for (size_t i = 0; i < n; ++i) out[i] = l2(query, base + i * dim, dim);
}

void InnerProductMany(const float* query, const float* base, size_t n, size_t dim, float* out) {
  const Kernel ip = Active().ip;
  for (size_t i = 0; i < n; ++i) out[i] = ip(query, base + i * dim, dim);
}

float L2SqrAt(SimdLevel level, const float* a, const float* b, size_t dim) {
  return KernelsAt(level).l2(a, b, dim);
}
float InnerProductAt(SimdLevel level, const float* a, const float* b, size_t dim) {
  return KernelsAt(level).ip(a, b, dim);
}

}  // namespace shoal::core
