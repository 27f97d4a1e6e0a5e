// Scan kernels for IVF partitions: SQ8 decode-and-distance, PQ table lookups and blocked
// (GEMM) inner products for many queries at once. Runtime dispatch to AVX-512 / AVX2 / a
// portable loop, like core/index/distance.h (SHOAL_SIMD forces a lower level).
//
// SQ8 follows FAISS's QT_8bit: x[d] = vmin[d] + (code[d] + 0.5) / 255 * vdiff[d], rewritten as
// x = offset + code * scale. For L2 the query is prepared once as a = q - offset, then
// |q - x|^2 = sum (a - code * scale)^2; for inner product q.x = q.offset + sum (q * scale) * code.
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/index/distance.h"

namespace shoal::core {

// out[i] = sum_d (a[d] - codes[i * dim + d] * scale[d])^2
void Sq8L2Many(const float* a, const float* scale, const uint8_t* codes, size_t n, size_t dim,
               float* out);
// out[i] = sum_d w[d] * codes[i * dim + d]
void Sq8DotMany(const float* w, const uint8_t* codes, size_t n, size_t dim, float* out);
// The same with rows `stride` >= dim bytes apart (residual rows: code, then the float term).
void Sq8DotManyStrided(const float* w, const uint8_t* codes, size_t stride, size_t n, size_t dim,
                       float* out);
// out[i * dim + d] = offset[d] + codes[i * stride + d] * scale[d]
void Sq8Decode(const float* offset, const float* scale, const uint8_t* codes, size_t n, size_t dim,
               float* out, size_t stride);
inline void Sq8Decode(const float* offset, const float* scale, const uint8_t* codes, size_t n,
                      size_t dim, float* out) {
  Sq8Decode(offset, scale, codes, n, dim, out, dim);
}

// out[i] = sum_j tables[j * 256 + codes[i * stride + j]]   (8-bit PQ, 256 entries per table;
// stride >= m bytes between rows)
void PqScan(const float* tables, size_t m, const uint8_t* codes, size_t stride, size_t n,
            float* out);
inline void PqScan(const float* tables, size_t m, const uint8_t* codes, size_t n, float* out) {
  PqScan(tables, m, codes, m, n, out);
}

// Residual rows (core/index/ivf_model.h): out[i] = max(0, out[i] + bias + term_i) where term_i
// is the float at codes + i * stride + term_offset (unaligned). For L2 keys.
void AddResidualTerms(const uint8_t* codes, size_t stride, size_t term_offset, size_t n, float bias,
                      float* out);

// out[q * n + i] = queries[q] . base[i], through BLAS sgemm (single-threaded inside tasks).
void GemmInnerProducts(const float* queries, size_t nq, const float* base, size_t n, size_t dim,
                       float* out);

// The same kernels at a fixed level, for tests. REQUIRES: the CPU supports `level`.
void Sq8L2ManyAt(SimdLevel level, const float* a, const float* scale, const uint8_t* codes,
                 size_t n, size_t dim, float* out);
void Sq8DotManyAt(SimdLevel level, const float* w, const uint8_t* codes, size_t n, size_t dim,
                  float* out);
void Sq8DotManyStridedAt(SimdLevel level, const float* w, const uint8_t* codes, size_t stride,
                         size_t n, size_t dim, float* out);

}  // namespace shoal::core
