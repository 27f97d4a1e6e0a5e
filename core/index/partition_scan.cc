#include "core/index/partition_scan.h"

#include <algorithm>
#include <cstring>

#include "core/index/distance.h"
#include "core/index/fastscan_model.h"
#include "core/index/scan_kernels.h"

namespace shoal::core {
namespace {

constexpr size_t kDecodeTileRows = 256;

// keys for `nq` contiguous float queries against n float rows, through sgemm.
void GemmKeys(Metric metric, const float* queries, const float* query_norms, size_t nq,
              const float* rows, size_t n, size_t dim, float* keys, size_t key_stride,
              PartitionScratch* s) {
  s->products.resize(nq * n);
  GemmInnerProducts(queries, nq, rows, n, dim, s->products.data());
  if (IsSimilarity(metric)) {
    for (size_t j = 0; j < nq; ++j) {
      for (size_t i = 0; i < n; ++i) keys[j * key_stride + i] = -s->products[j * n + i];
    }
    return;
  }
  s->norms.resize(n);
  for (size_t i = 0; i < n; ++i) s->norms[i] = InnerProduct(rows + i * dim, rows + i * dim, dim);
  for (size_t j = 0; j < nq; ++j) {
    for (size_t i = 0; i < n; ++i) {
      const float d = query_norms[j] + s->norms[i] - 2 * s->products[j * n + i];
      keys[j * key_stride + i] = std::max(0.0f, d);
    }
  }
}

}  // namespace

size_t PreparedQueries::BytesPerQuery(const IvfModel& model) {
  size_t floats = 1;  // |q|^2
  if (model.encoding == VectorEncoding::kSq8) floats += model.dim + 1;
  if (model.encoding == VectorEncoding::kPq) {
    floats += size_t(model.pq_m) << model.pq_nbits;
    // Fast-scan: the uint8 tables, each 16 entries twice, in groups of 4 (FastScanLut).
    if (IsFastScan(model)) floats += (size_t(model.pq_m) + 3) / 4 * 32 + 4;
  }
  return floats * sizeof(float);
}

PreparedQueries::PreparedQueries(const IvfModel& model, const float* queries, size_t nq)
    : model_(model), queries_(queries), nq_(nq), norms_(nq) {
  for (size_t q = 0; q < nq; ++q) norms_[q] = InnerProduct(query(q), query(q), model.dim);
  if (model.encoding == VectorEncoding::kSq8) PrepareSq8();
  if (model.encoding == VectorEncoding::kPq) PreparePq();
}

float PreparedQueries::CoarseKey(size_t q, uint32_t partition) const {
  const float* c = model_.centroid(partition);
  return IsSimilarity(model_.metric) ? -InnerProduct(query(q), c, model_.dim)
                                     : L2Sqr(query(q), c, model_.dim);
}

void PreparedQueries::PrepareSq8() {
  const size_t dim = model_.dim;
  const bool similarity = IsSimilarity(model_.metric);
  sq_offset_.resize(dim);
  sq_scale_.resize(dim);
  for (size_t d = 0; d < dim; ++d) {
    sq_scale_[d] = model_.sq_vdiff[d] / 255.0f;
    sq_offset_[d] = model_.sq_vmin[d] + 0.5f * sq_scale_[d];
  }
  // Residual: f * <q, r^> = f * q.offset + sum (f * q * scale) * code.
  const float f = model_.residual ? residual_factor() : 1.0f;
  sq_query_.resize(nq_ * dim);
  sq_const_.resize(nq_);
  for (size_t q = 0; q < nq_; ++q) {
    const float* x = query(q);
    float* out = sq_query_.data() + q * dim;
    for (size_t d = 0; d < dim; ++d) {
      out[d] = similarity || model_.residual ? f * x[d] * sq_scale_[d] : x[d] - sq_offset_[d];
    }
    sq_const_[q] = f * InnerProduct(x, sq_offset_.data(), dim);
  }
}

void PreparedQueries::PreparePq() {
  const size_t m = model_.pq_m, dsub = model_.dim / m, ksub = size_t(1) << model_.pq_nbits;
  const bool ip = IsSimilarity(model_.metric) || model_.residual;
  pq_tables_.resize(nq_ * m * ksub);
  for (size_t q = 0; q < nq_; ++q) {
    for (size_t j = 0; j < m; ++j) {
      const float* sub = query(q) + j * dsub;
      const float* book = model_.pq_codebooks.data() + j * ksub * dsub;
      float* table = pq_tables_.data() + (q * m + j) * ksub;
      if (ip) {
        InnerProductMany(sub, book, ksub, dsub, table);
      } else {
        L2SqrMany(sub, book, ksub, dsub, table);
      }
      if (model_.residual) {
        for (size_t k = 0; k < ksub; ++k) table[k] *= residual_factor();
      }
    }
  }
  if (IsFastScan(model_)) {
    fastscan_luts_.resize(nq_);
    for (size_t q = 0; q < nq_; ++q) {
      fastscan_luts_[q].Build(pq_tables_.data() + q * m * ksub, m, 0.0f);
    }
  }
}

namespace {

// Residual keys of one query: out[i] = coarse_key + f * <q, r^_i> (+ term_i for L2).
void ScoreResidualQuery(const PreparedQueries& p, const float* sq_query, float sq_const,
                        const float* pq_table, float coarse_key, const uint8_t* codes, size_t n,
                        float* out) {
  const IvfModel& model = p.model();
  const size_t stride = model.CodeSize();
  float bias = coarse_key;
  if (model.encoding == VectorEncoding::kSq8) {
    Sq8DotManyStrided(sq_query, codes, stride, n, model.dim, out);
    bias += sq_const;
  } else {
    PqScan(pq_table, model.pq_m, codes, stride, n, out);
  }
  if (model.HasResidualTerm()) {
    AddResidualTerms(codes, stride, model.QuantizerCodeSize(), n, bias, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] += bias;
  }
}

// Residual SQ8 for many queries: decode a tile of r^ once, <q, r^> for every query via sgemm.
void GemmResidualSq8(const PreparedQueries& p, const float* offset, const float* scale,
                     const float* queries, const float* coarse_keys, size_t nq,
                     const uint8_t* codes, size_t n, float* keys, PartitionScratch* s) {
  const IvfModel& model = p.model();
  const size_t dim = model.dim, stride = model.CodeSize();
  const float f = p.residual_factor();
  s->decoded.resize(kDecodeTileRows * dim);
  for (size_t r = 0; r < n; r += kDecodeTileRows) {
    const size_t rows = std::min(kDecodeTileRows, n - r);
    const uint8_t* tile = codes + r * stride;
    Sq8Decode(offset, scale, tile, rows, dim, s->decoded.data(), stride);
    s->products.resize(nq * rows);
    GemmInnerProducts(queries, nq, s->decoded.data(), rows, dim, s->products.data());
    for (size_t j = 0; j < nq; ++j) {
      float* out = keys + j * n + r;
      for (size_t i = 0; i < rows; ++i) out[i] = f * s->products[j * rows + i];
      if (model.HasResidualTerm()) {
        AddResidualTerms(tile, stride, model.QuantizerCodeSize(), rows, coarse_keys[j], out);
      } else {
        for (size_t i = 0; i < rows; ++i) out[i] += coarse_keys[j];
      }
    }
  }
}

}  // namespace

// Many queries on one partition (FLAT or SQ8): sgemm over the rows, SQ8 decoded tile by tile.
// The SQ8 ranges are the model's, so this object's serve every query's.
void PreparedQueries::ScoreBlocked(const ScanQuery* queries, size_t nq, const uint8_t* codes,
                                   size_t n, float* keys, PartitionScratch* s) const {
  const size_t dim = model_.dim;
  // Gather the queries (and their norms) contiguously for sgemm.
  s->queries.resize(nq * dim);
  std::vector<float> norms(nq);
  for (size_t j = 0; j < nq; ++j) {
    const PreparedQueries& p = *queries[j].prepared;
    std::memcpy(s->queries.data() + j * dim, p.query(queries[j].index), dim * sizeof(float));
    norms[j] = p.norms_[queries[j].index];
  }
  if (model_.encoding == VectorEncoding::kFlat) {
    GemmKeys(model_.metric, s->queries.data(), norms.data(), nq,
             reinterpret_cast<const float*>(codes), n, dim, keys, n, s);
    return;
  }
  if (model_.residual) {
    // r^ = offset + code * scale, so f <q, r^> = f q.offset + f <q, code * scale>: the first
    // part joins the coarse key, the second is sgemm over codes decoded with a zero offset.
    std::vector<float> biases(nq);
    for (size_t j = 0; j < nq; ++j) {
      biases[j] = queries[j].coarse_key + queries[j].prepared->sq_const_[queries[j].index];
    }
    const std::vector<float> zero(dim, 0.0f);
    GemmResidualSq8(*this, zero.data(), sq_scale_.data(), s->queries.data(), biases.data(), nq,
                    codes, n, keys, s);
    return;
  }
  // Raw SQ8: decode a tile once, score it for every query.
  s->decoded.resize(kDecodeTileRows * dim);
  for (size_t r = 0; r < n; r += kDecodeTileRows) {
    const size_t rows = std::min(kDecodeTileRows, n - r);
    Sq8Decode(sq_offset_.data(), sq_scale_.data(), codes + r * dim, rows, dim, s->decoded.data());
    GemmKeys(model_.metric, s->queries.data(), norms.data(), nq, s->decoded.data(), rows, dim,
             keys + r, n, s);
  }
}

// One query with the fused kernels.
void PreparedQueries::ScoreOne(uint32_t q, float coarse_key, const uint8_t* codes, size_t n,
                               float* out) const {
  const size_t dim = model_.dim;
  const float* sq_query = sq_query_.empty() ? nullptr : sq_query_.data() + size_t(q) * dim;
  const float* table = pq_tables_.empty()
                           ? nullptr
                           : pq_tables_.data() + (size_t(q) * model_.pq_m << model_.pq_nbits);
  if (model_.residual) {
    const float sq_const = sq_const_.empty() ? 0.0f : sq_const_[q];
    ScoreResidualQuery(*this, sq_query, sq_const, table, coarse_key, codes, n, out);
    return;
  }
  const bool similarity = IsSimilarity(model_.metric);
  switch (model_.encoding) {
    case VectorEncoding::kFlat: {
      const float* rows = reinterpret_cast<const float*>(codes);
      if (similarity) {
        InnerProductMany(query(q), rows, n, dim, out);
      } else {
        L2SqrMany(query(q), rows, n, dim, out);
      }
      break;
    }
    case VectorEncoding::kSq8:
      if (similarity) {
        Sq8DotMany(sq_query, codes, n, dim, out);
        for (size_t i = 0; i < n; ++i) out[i] += sq_const_[q];
      } else {
        Sq8L2Many(sq_query, sq_scale_.data(), codes, n, dim, out);
      }
      break;
    case VectorEncoding::kPq:
      PqScan(table, model_.pq_m, codes, n, out);
      break;
  }
  if (similarity) {
    for (size_t i = 0; i < n; ++i) out[i] = -out[i];
  }
}

float PreparedQueries::FlatKey(uint32_t q, const float* row) const {
  // The same kernels as ScoreOne's FLAT case, which score each row on its own.
  float key;
  if (IsSimilarity(model_.metric)) {
    InnerProductMany(query(q), row, 1, model_.dim, &key);
    return -key;
  }
  L2SqrMany(query(q), row, 1, model_.dim, &key);
  return key;
}

void ScorePartition(const ScanQuery* queries, size_t nq, const uint8_t* codes, size_t n,
                    float* keys, PartitionScratch* s) {
  if (nq == 0) return;
  const PreparedQueries& first = *queries[0].prepared;
  const IvfModel& model = first.model();
  if (IsFastScan(model)) {
    std::vector<const FastScanLut*> luts(nq);
    std::vector<float> coarse_keys(model.residual ? nq : 0);
    for (size_t j = 0; j < nq; ++j) {
      luts[j] = &queries[j].prepared->fastscan_luts_[queries[j].index];
      if (model.residual) coarse_keys[j] = queries[j].coarse_key;
    }
    ScoreFastScanPartition(model, luts.data(), model.residual ? coarse_keys.data() : nullptr, nq,
                           codes, n, keys);
    return;
  }
  if (ScoresThroughGemm(model, nq)) {
    first.ScoreBlocked(queries, nq, codes, n, keys, s);
    return;
  }
  for (size_t j = 0; j < nq; ++j) {
    queries[j].prepared->ScoreOne(queries[j].index, queries[j].coarse_key, codes, n, keys + j * n);
  }
}

std::vector<ScanQuery> ScanQueries(const PreparedQueries& prepared, const uint32_t* query_ids,
                                   const float* coarse_keys, size_t nq) {
  std::vector<ScanQuery> out(nq);
  for (size_t j = 0; j < nq; ++j) {
    out[j] = {&prepared, query_ids[j], coarse_keys ? coarse_keys[j] : 0.0f};
  }
  return out;
}

}  // namespace shoal::core
