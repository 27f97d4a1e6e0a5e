// IvfModel: what an IVF segment needs to route a query and to encode and score vectors — the
// coarse centroids and the vector encoding's parameters (SQ8 ranges or PQ codebooks).
//
// Training and encoding use FAISS (k-means, ScalarQuantizer QT_8bit, ProductQuantizer); the
// scan kernels that read the codes are ours (core/index/scan_kernels.h). Both SQ8 and PQ encode
// the vector itself, not its residual to the centroid: one distance table per query then
// serves every partition, which is what lets a task scan one partition for many queries.
//
// The FAISS calls run on the calling thread; callers keep OpenMP at one thread (I-2, the
// TbbExecutor does) and get parallelism by running chunks as separate tasks. Nothing FAISS or
// an allocation throws leaves this file: every function answers a Status instead (FAILED_-
// PRECONDITION for too little training data, RESOURCE_EXHAUSTED for memory, INTERNAL for any
// other FAISS error, naming the step).
//
// Thread-safety: an IvfModel is immutable once trained; every function here is thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/metric.h"

namespace shoal::core {

enum class VectorEncoding : uint8_t { kFlat = 1, kSq8 = 2, kPq = 3 };

struct IvfModel {
  uint32_t dim = 0;
  Metric metric = Metric::kL2;
  VectorEncoding encoding = VectorEncoding::kFlat;
  std::vector<float> centroids;          // nlist * dim
  std::vector<float> sq_vmin, sq_vdiff;  // SQ8: dim each; x = vmin + (code + 0.5) / 255 * vdiff
  uint32_t pq_m = 0, pq_nbits = 0;
  std::vector<float> pq_codebooks;  // PQ: m * 2^nbits * (dim / m), FAISS's layout
  // An exact (FLAT) segment: partitions are slices of the rows, not clusters, and every search
  // scans all of them (nprobe does not apply). Centroids are zero placeholders.
  bool exact = false;

  size_t nlist() const { return dim ? centroids.size() / dim : 0; }
  // Bytes of one encoded vector.
  size_t CodeSize() const;
};

// 8-bit PQ trains 256 centroids per sub-quantizer, so it needs at least this many vectors.
inline constexpr size_t kMinPqTrainingRows = 256;

struct IvfTrainOptions {
  // >= 1 and at most the number of training vectors, else INVALID_ARGUMENT (k-means cannot
  // place more centroids than points; BuildIndex clamps nlist to the row count before training).
  uint32_t nlist = 0;
  VectorEncoding encoding = VectorEncoding::kFlat;
  uint32_t pq_m = 0;  // PQ only; must divide dim
  int kmeans_iterations = 10;
  uint64_t seed = 1234;
};

// The nlist that BuildIndex picks when none is given: about 4 * sqrt(n), in [1, 65536], and
// never more than n / 4 so that partitions are not nearly empty.
uint32_t DefaultNlist(uint64_t n);

// Trains centroids (and the SQ8 ranges or PQ codebooks) on `n` row-major vectors. The caller
// samples (at most 256 vectors per centroid is plenty). Inner-product metrics train spherical
// k-means. PQ with fewer than kMinPqTrainingRows vectors is FAILED_PRECONDITION naming the
// minimum.
absl::StatusOr<IvfModel> TrainIvfModel(const float* vectors, size_t n, uint32_t dim, Metric metric,
                                       const IvfTrainOptions& options);

// An exact model over `nlist` slices (IvfModel::exact): kFlat codes, zero centroids.
IvfModel MakeExactModel(uint32_t dim, Metric metric, uint32_t nlist);

// Caps FAISS's BLAS distance block (queries x centroids scored at once) so that a k-means or
// an assignment touches at most ~4 MiB of scratch per thread instead of 16 MiB. Idempotent.
void LimitFaissScratch();

// assign[i] = the nearest centroid of vector i (by the model's metric).
absl::Status AssignToCentroids(const IvfModel& model, const float* vectors, size_t n,
                               uint32_t* assign);

// Writes n * CodeSize() bytes of codes.
absl::Status EncodeVectors(const IvfModel& model, const float* vectors, size_t n, uint8_t* codes);

}  // namespace shoal::core
