#include "core/index/scan_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

extern "C" int sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                      const int* k, const float* alpha, const float* a, const int* lda,
                      const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace shoal::core {
namespace {

float Sq8L2Scalar(const float* a, const float* s, const uint8_t* c, size_t dim) {
  float sum = 0;
  for (size_t d = 0; d < dim; ++d) {
    const float diff = a[d] - float(c[d]) * s[d];
    sum += diff * diff;
  }
  return sum;
}

float Sq8DotScalar(const float* w, const uint8_t* c, size_t dim) {
  float sum = 0;
  for (size_t d = 0; d < dim; ++d) sum += w[d] * float(c[d]);
  return sum;
}

__attribute__((target("avx2,fma"))) float Sum256(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

__attribute__((target("avx2,fma"))) __m256 Load8Codes(const uint8_t* c) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c))));
}

__attribute__((target("avx2,fma"))) float Sq8L2Avx2(const float* a, const float* s,
                                                    const uint8_t* c, size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t d = 0;
  for (; d + 16 <= dim; d += 16) {
    __m256 x0 = _mm256_fnmadd_ps(Load8Codes(c + d), _mm256_loadu_ps(s + d), _mm256_loadu_ps(a + d));
    __m256 x1 = _mm256_fnmadd_ps(Load8Codes(c + d + 8), _mm256_loadu_ps(s + d + 8),
                                 _mm256_loadu_ps(a + d + 8));
    acc0 = _mm256_fmadd_ps(x0, x0, acc0);
    acc1 = _mm256_fmadd_ps(x1, x1, acc1);
  }
  for (; d + 8 <= dim; d += 8) {
    __m256 x = _mm256_fnmadd_ps(Load8Codes(c + d), _mm256_loadu_ps(s + d), _mm256_loadu_ps(a + d));
    acc0 = _mm256_fmadd_ps(x, x, acc0);
  }
  return Sum256(_mm256_add_ps(acc0, acc1)) + Sq8L2Scalar(a + d, s + d, c + d, dim - d);
}

__attribute__((target("avx2,fma"))) float Sq8DotAvx2(const float* w, const uint8_t* c, size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  size_t d = 0;
  for (; d + 16 <= dim; d += 16) {
    acc0 = _mm256_fmadd_ps(Load8Codes(c + d), _mm256_loadu_ps(w + d), acc0);
    acc1 = _mm256_fmadd_ps(Load8Codes(c + d + 8), _mm256_loadu_ps(w + d + 8), acc1);
  }
  for (; d + 8 <= dim; d += 8)
    acc0 = _mm256_fmadd_ps(Load8Codes(c + d), _mm256_loadu_ps(w + d), acc0);
  return Sum256(_mm256_add_ps(acc0, acc1)) + Sq8DotScalar(w + d, c + d, dim - d);
}

__attribute__((target("avx512f"))) __m512 Load16Codes(const uint8_t* c) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c))));
}

__attribute__((target("avx512f"))) float Sq8L2Avx512(const float* a, const float* s,
                                                     const uint8_t* c, size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    __m512 x0 =
        _mm512_fnmadd_ps(Load16Codes(c + d), _mm512_loadu_ps(s + d), _mm512_loadu_ps(a + d));
    __m512 x1 = _mm512_fnmadd_ps(Load16Codes(c + d + 16), _mm512_loadu_ps(s + d + 16),
                                 _mm512_loadu_ps(a + d + 16));
    acc0 = _mm512_fmadd_ps(x0, x0, acc0);
    acc1 = _mm512_fmadd_ps(x1, x1, acc1);
  }
  for (; d + 16 <= dim; d += 16) {
    __m512 x = _mm512_fnmadd_ps(Load16Codes(c + d), _mm512_loadu_ps(s + d), _mm512_loadu_ps(a + d));
    acc0 = _mm512_fmadd_ps(x, x, acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) +
         Sq8L2Scalar(a + d, s + d, c + d, dim - d);
}

__attribute__((target("avx512f"))) float Sq8DotAvx512(const float* w, const uint8_t* c,
                                                      size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    acc0 = _mm512_fmadd_ps(Load16Codes(c + d), _mm512_loadu_ps(w + d), acc0);
    acc1 = _mm512_fmadd_ps(Load16Codes(c + d + 16), _mm512_loadu_ps(w + d + 16), acc1);
  }
  for (; d + 16 <= dim; d += 16) {
    acc0 = _mm512_fmadd_ps(Load16Codes(c + d), _mm512_loadu_ps(w + d), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + Sq8DotScalar(w + d, c + d, dim - d);
}

using Sq8L2Fn = float (*)(const float*, const float*, const uint8_t*, size_t);
using Sq8DotFn = float (*)(const float*, const uint8_t*, size_t);

Sq8L2Fn Sq8L2For(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return Sq8L2Avx512;
    case SimdLevel::kAvx2:
      return Sq8L2Avx2;
    case SimdLevel::kScalar:
      break;
  }
  return Sq8L2Scalar;
}

Sq8DotFn Sq8DotFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return Sq8DotAvx512;
    case SimdLevel::kAvx2:
      return Sq8DotAvx2;
    case SimdLevel::kScalar:
      break;
  }
  return Sq8DotScalar;
}

}  // namespace

void Sq8L2ManyAt(SimdLevel level, const float* a, const float* scale, const uint8_t* codes,
                 size_t n, size_t dim, float* out) {
  const Sq8L2Fn fn = Sq8L2For(level);
  for (size_t i = 0; i < n; ++i) out[i] = fn(a, scale, codes + i * dim, dim);
}

void Sq8DotManyAt(SimdLevel level, const float* w, const uint8_t* codes, size_t n, size_t dim,
                  float* out) {
  Sq8DotManyStridedAt(level, w, codes, dim, n, dim, out);
}

void Sq8DotManyStridedAt(SimdLevel level, const float* w, const uint8_t* codes, size_t stride,
                         size_t n, size_t dim, float* out) {
  const Sq8DotFn fn = Sq8DotFor(level);
  for (size_t i = 0; i < n; ++i) out[i] = fn(w, codes + i * stride, dim);
}

void Sq8DotManyStrided(const float* w, const uint8_t* codes, size_t stride, size_t n, size_t dim,
                       float* out) {
  Sq8DotManyStridedAt(ActiveSimdLevel(), w, codes, stride, n, dim, out);
}

void Sq8L2Many(const float* a, const float* scale, const uint8_t* codes, size_t n, size_t dim,
               float* out) {
  Sq8L2ManyAt(ActiveSimdLevel(), a, scale, codes, n, dim, out);
}

void Sq8DotMany(const float* w, const uint8_t* codes, size_t n, size_t dim, float* out) {
  Sq8DotManyAt(ActiveSimdLevel(), w, codes, n, dim, out);
}

void Sq8Decode(const float* offset, const float* scale, const uint8_t* codes, size_t n, size_t dim,
               float* out, size_t stride) {
  // The compiler vectorises this loop well enough: decoding is amortised over every query of
  // a batch, unlike the fused kernels above.
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* c = codes + i * stride;
    float* x = out + i * dim;
    for (size_t d = 0; d < dim; ++d) x[d] = offset[d] + float(c[d]) * scale[d];
  }
}

void PqScan(const float* tables, size_t m, const uint8_t* codes, size_t stride, size_t n,
            float* out) {
  size_t i = 0;
  // Four rows at a time: independent sums keep several table loads in flight.
  for (; i + 4 <= n; i += 4) {
    const uint8_t* c0 = codes + i * stride;
    const uint8_t* c1 = c0 + stride;
    const uint8_t* c2 = c1 + stride;
    const uint8_t* c3 = c2 + stride;
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t j = 0; j < m; ++j) {
      const float* t = tables + j * 256;
      s0 += t[c0[j]];
      s1 += t[c1[j]];
      s2 += t[c2[j]];
      s3 += t[c3[j]];
    }
    out[i] = s0;
    out[i + 1] = s1;
    out[i + 2] = s2;
    out[i + 3] = s3;
  }
  for (; i < n; ++i) {
    const uint8_t* c = codes + i * stride;
    float s = 0;
    for (size_t j = 0; j < m; ++j) s += tables[j * 256 + c[j]];
    out[i] = s;
  }
}

void AddResidualTerms(const uint8_t* codes, size_t stride, size_t term_offset, size_t n, float bias,
                      float* out) {
  for (size_t i = 0; i < n; ++i) {
    float term;
    std::memcpy(&term, codes + i * stride + term_offset, sizeof term);
    out[i] = std::max(0.0f, out[i] + bias + term);
  }
}

void GemmInnerProducts(const float* queries, size_t nq, const float* base, size_t n, size_t dim,
                       float* out) {
  if (nq == 0 || n == 0) return;
  // Column-major view: out^T (n x nq) = base (n x dim) * queries^T (dim x nq).
  const int rows = int(n), cols = int(nq), depth = int(dim);
  const float one = 1.0f, zero = 0.0f;
  sgemm_("T", "N", &rows, &cols, &depth, &one, base, &depth, queries, &depth, &zero, out, &rows);
}

}  // namespace shoal::core
