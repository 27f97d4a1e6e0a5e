#include "core/index/partition_scan.h"

#include <algorithm>
#include <cstring>

#include "core/index/distance.h"
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
  if (model.encoding == VectorEncoding::kPq) floats += size_t(model.pq_m) * 256;
  return floats * sizeof(float);
}

PreparedQueries::PreparedQueries(const IvfModel& model, const float* queries, size_t nq)
    : model_(model), queries_(queries), norms_(nq) {
  const size_t dim = model.dim;
  for (size_t q = 0; q < nq; ++q) norms_[q] = InnerProduct(query(q), query(q), dim);
  if (model.encoding == VectorEncoding::kSq8) {
    sq_offset_.resize(dim);
    sq_scale_.resize(dim);
    for (size_t d = 0; d < dim; ++d) {
      sq_scale_[d] = model.sq_vdiff[d] / 255.0f;
      sq_offset_[d] = model.sq_vmin[d] + 0.5f * sq_scale_[d];
    }
    sq_query_.resize(nq * dim);
    sq_const_.resize(nq);
    for (size_t q = 0; q < nq; ++q) {
      const float* x = query(q);
      float* out = sq_query_.data() + q * dim;
      for (size_t d = 0; d < dim; ++d) {
        out[d] = IsSimilarity(model.metric) ? x[d] * sq_scale_[d] : x[d] - sq_offset_[d];
      }
      sq_const_[q] = InnerProduct(x, sq_offset_.data(), dim);
    }
  } else if (model.encoding == VectorEncoding::kPq) {
    const size_t m = model.pq_m, dsub = dim / m;
    pq_tables_.resize(nq * m * 256);
    for (size_t q = 0; q < nq; ++q) {
      for (size_t j = 0; j < m; ++j) {
        const float* sub = query(q) + j * dsub;
        const float* book = model.pq_codebooks.data() + j * 256 * dsub;
        float* table = pq_tables_.data() + (q * m + j) * 256;
        if (IsSimilarity(model.metric)) {
          InnerProductMany(sub, book, 256, dsub, table);
        } else {
          L2SqrMany(sub, book, 256, dsub, table);
        }
      }
    }
  }
}

void ScorePartition(const PreparedQueries& p, const uint32_t* query_ids, size_t nq,
                    const uint8_t* codes, size_t n, float* keys, PartitionScratch* s) {
  const IvfModel& model = p.model_;
  const size_t dim = model.dim;
  const bool similarity = IsSimilarity(model.metric);
  const bool gemm = nq >= kMinQueriesForGemm;
  if (gemm && model.encoding != VectorEncoding::kPq) {
    // Gather the queries (and their norms) contiguously for sgemm.
    s->queries.resize(nq * dim);
    std::vector<float> norms(nq);
    for (size_t j = 0; j < nq; ++j) {
      std::memcpy(s->queries.data() + j * dim, p.query(query_ids[j]), dim * sizeof(float));
      norms[j] = p.norms_[query_ids[j]];
    }
    if (model.encoding == VectorEncoding::kFlat) {
      GemmKeys(model.metric, s->queries.data(), norms.data(), nq,
               reinterpret_cast<const float*>(codes), n, dim, keys, n, s);
      return;
    }
    // SQ8: decode a tile once, score it for every query.
    s->decoded.resize(kDecodeTileRows * dim);
    for (size_t r = 0; r < n; r += kDecodeTileRows) {
      const size_t rows = std::min(kDecodeTileRows, n - r);
      Sq8Decode(p.sq_offset_.data(), p.sq_scale_.data(), codes + r * dim, rows, dim,
                s->decoded.data());
      GemmKeys(model.metric, s->queries.data(), norms.data(), nq, s->decoded.data(), rows, dim,
               keys + r, n, s);
    }
    return;
  }
  for (size_t j = 0; j < nq; ++j) {
    const uint32_t q = query_ids[j];
    float* out = keys + j * n;
    switch (model.encoding) {
      case VectorEncoding::kFlat: {
        const float* rows = reinterpret_cast<const float*>(codes);
        if (similarity) {
          InnerProductMany(p.query(q), rows, n, dim, out);
        } else {
          L2SqrMany(p.query(q), rows, n, dim, out);
        }
        break;
      }
      case VectorEncoding::kSq8:
        if (similarity) {
          Sq8DotMany(p.sq_query_.data() + q * dim, codes, n, dim, out);
          for (size_t i = 0; i < n; ++i) out[i] += p.sq_const_[q];
        } else {
          Sq8L2Many(p.sq_query_.data() + q * dim, p.sq_scale_.data(), codes, n, dim, out);
        }
        break;
      case VectorEncoding::kPq:
        PqScan(p.pq_tables_.data() + size_t(q) * model.pq_m * 256, model.pq_m, codes, n, out);
        break;
    }
    if (similarity) {
      for (size_t i = 0; i < n; ++i) out[i] = -out[i];
    }
  }
}

}  // namespace shoal::core
