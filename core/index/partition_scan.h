// Partition scanning: the per-query state prepared once per request (SQ8 query transforms, PQ
// distance tables) and the scoring of one partition's codes for several queries at once.
//
// Several queries on one partition are scored together ("partition-major"): FLAT rows, and
// SQ8 rows decoded tile by tile, go through one BLAS sgemm for all of the queries instead of
// one pass per query; PQ shares the codes' cache lines. A single query uses the fused SIMD
// kernels (core/index/scan_kernels.h).
//
// Thread-safety: PreparedQueries is immutable after construction; ScorePartition is
// thread-safe given a PartitionScratch per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/index/ivf_model.h"

namespace shoal::core {

class PreparedQueries {
 public:
  // REQUIRES: queries holds num_queries * model.dim floats and outlives this object.
  PreparedQueries(const IvfModel& model, const float* queries, size_t num_queries);

  // Bytes the prepared state of one query holds for `model` (request cost estimates, I-9).
  static size_t BytesPerQuery(const IvfModel& model);

  const IvfModel& model() const { return model_; }
  const float* query(size_t q) const { return queries_ + q * model_.dim; }
  float query_norm_sq(size_t q) const { return norms_[q]; }

 private:
  friend void ScorePartition(const PreparedQueries&, const uint32_t*, size_t, const uint8_t*,
                             size_t, float*, struct PartitionScratch*);
  const IvfModel& model_;
  const float* queries_;
  std::vector<float> norms_;  // |q|^2
  std::vector<float> sq_offset_, sq_scale_;
  std::vector<float> sq_query_;   // per query: L2 -> q - offset; IP -> q * scale
  std::vector<float> sq_const_;   // IP: q . offset
  std::vector<float> pq_tables_;  // per query: m * 256
};

// Buffers reused across the partitions one task scans.
struct PartitionScratch {
  std::vector<float> queries, decoded, products, norms;
};

// keys[j * n + i] = the key (core/base/metric.h: smaller is nearer) of row i for query
// query_ids[j]. `codes` holds n codes of model.CodeSize() bytes.
void ScorePartition(const PreparedQueries& prepared, const uint32_t* query_ids, size_t nq,
                    const uint8_t* codes, size_t n, float* keys, PartitionScratch* scratch);

// Queries on one partition from which the blocked (sgemm) path pays off.
inline constexpr size_t kMinQueriesForGemm = 8;

}  // namespace shoal::core
