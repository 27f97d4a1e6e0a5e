// Partition scanning: the per-query state prepared once per request (SQ8 query transforms, PQ
// distance tables) and the scoring of one partition's codes for several queries at once.
//
// Residual models (core/index/ivf_model.h) keep one table per query for every partition: a
// row's key is coarse_key + term + f * <q, r^>, where coarse_key is the query's routing key of
// the partition (|q - c|^2 for L2, -<q, c> for IP: exactly what the coarse search sorts by), term
// the float stored after the row's code (L2; none for IP), and f = -2 (L2) or -1 (IP) folded
// into the prepared tables. The caller passes the coarse keys per (query, partition); the plan
// has them from routing, anyone else asks PreparedQueries::CoarseKey.
//
// Several queries on one partition are scored together ("partition-major"): FLAT rows, and
// SQ8 rows decoded tile by tile, go through one BLAS sgemm for all of the queries instead of
// one pass per query; 4-bit PQ (fast-scan) scores its LUTs in groups; 8-bit PQ shares the codes'
// cache lines. A single query uses the fused SIMD kernels (core/index/scan_kernels.h). The
// queries may come from several PreparedQueries (several requests sharing one scan,
// core/index/scan_share.h) as long as every one was prepared for the same model.
//
// Thread-safety: PreparedQueries is immutable after construction; ScorePartition is
// thread-safe given a PartitionScratch per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/index/fastscan.h"
#include "core/index/ivf_model.h"

namespace shoal::core {

struct PartitionScratch;
struct ScanQuery;

class PreparedQueries {
 public:
  // REQUIRES: queries holds num_queries * model.dim floats and outlives this object.
  PreparedQueries(const IvfModel& model, const float* queries, size_t num_queries);

  // Bytes the prepared state of one query holds for `model` (request cost estimates, I-9).
  static size_t BytesPerQuery(const IvfModel& model);

  const IvfModel& model() const { return model_; }
  const float* query(size_t q) const { return queries_ + q * model_.dim; }
  float query_norm_sq(size_t q) const { return norms_[q]; }
  // Query q's routing key of `partition`: |q - c|^2 (L2) or -<q, c> (IP, cosine).
  float CoarseKey(size_t q, uint32_t partition) const;
  // Residual models: the factor f applied to <q, r^> (-2 for L2, -1 for IP).
  float residual_factor() const { return IsSimilarity(model_.metric) ? -1.0f : -2.0f; }
  // 4-bit PQ (fast-scan) models: query q's quantized tables.
  const FastScanLut& fastscan_lut(size_t q) const { return fastscan_luts_[q]; }
  // FLAT models: query q's key of one row, bit-identical to what ScorePartition gives that row
  // for a single query (the per-row SIMD kernel), whatever the partition around it.
  float FlatKey(uint32_t q, const float* row) const;

 private:
  friend void ScorePartition(const ScanQuery*, size_t, const uint8_t*, size_t, float*,
                             PartitionScratch*);
  void PrepareSq8();
  void PreparePq();
  // REQUIRES: every queries[j].prepared has this object's model.
  void ScoreBlocked(const ScanQuery* queries, size_t nq, const uint8_t* codes, size_t n,
                    float* keys, PartitionScratch* s) const;
  void ScoreOne(uint32_t q, float coarse_key, const uint8_t* codes, size_t n, float* out) const;

  const IvfModel& model_;
  const float* queries_;
  const size_t nq_;
  std::vector<float> norms_;  // |q|^2
  std::vector<float> sq_offset_, sq_scale_;
  // per query: raw L2 -> q - offset; raw IP -> q * scale; residual -> f * q * scale
  std::vector<float> sq_query_;
  std::vector<float> sq_const_;   // raw IP: q . offset; residual: f * q . offset
  std::vector<float> pq_tables_;  // per query: m * 2^nbits (raw: L2 or IP; residual: f * IP)
  std::vector<FastScanLut> fastscan_luts_;  // 4-bit PQ: per query, pq_tables_ quantized
};

// Buffers reused across the partitions one task scans.
struct PartitionScratch {
  std::vector<float> queries, decoded, products, norms;
};

// One query to score on a partition: query `index` of `prepared`, and its CoarseKey of the
// partition (residual models need it; others ignore it).
struct ScanQuery {
  const PreparedQueries* prepared = nullptr;
  uint32_t index = 0;
  float coarse_key = 0;
};

// keys[j * n + i] = the key (core/base/metric.h: smaller is nearer) of row i for queries[j].
// `codes` holds n rows of model.CodeSize() bytes. REQUIRES: nq >= 1 and every
// queries[j].prepared was prepared for the same model (one segment's), whatever request it
// belongs to.
void ScorePartition(const ScanQuery* queries, size_t nq, const uint8_t* codes, size_t n,
                    float* keys, PartitionScratch* scratch);

// Queries query_ids[j] of `prepared` with coarse_keys[j] (null: 0), as ScanQuery.
std::vector<ScanQuery> ScanQueries(const PreparedQueries& prepared, const uint32_t* query_ids,
                                   const float* coarse_keys, size_t nq);

// Queries on one partition from which the blocked (sgemm) path pays off.
inline constexpr size_t kMinQueriesForGemm = 8;

// Whether ScorePartition scores nq queries of `model` together through sgemm. Such keys are
// within DistanceRoundingBound (core/index/rounding_bound.h) of the single-query kernels' keys
// but not bit-identical to them: a caller that needs exact keys (FLAT) re-scores with FlatKey.
inline bool ScoresThroughGemm(const IvfModel& model, size_t nq) {
  return nq >= kMinQueriesForGemm && model.encoding != VectorEncoding::kPq;
}

}  // namespace shoal::core
