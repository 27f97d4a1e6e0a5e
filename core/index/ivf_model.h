// IvfModel: what an IVF segment needs to route a query and to encode and score vectors — the
// coarse centroids and the vector encoding's parameters (SQ8 ranges or PQ codebooks).
//
// Training and encoding use FAISS (k-means, ScalarQuantizer QT_8bit, ProductQuantizer); the
// scan kernels that read the codes are ours (core/index/scan_kernels.h).
//
// Residual codes (IvfModel::residual, every model trained now): SQ8 and PQ encode r = x - c,
// c the centroid of x's partition, and are trained on residuals, so their precision is spent
// inside a partition rather than across the whole data set (on tight clusters raw codes cannot
// tell a cluster's members apart). Scoring still needs ONE table / prepared vector per query
// for every partition (partition-major batching): with r^ the decoded residual and
// x^ = c + r^ the reconstruction,
//   L2:  |q - x^|^2 = |q - c|^2 + (|r^|^2 + 2<c, r^>) - 2<q, r^>
//   IP:  <q, x^>    = <q, c> + <q, r^>        (cosine: the same, on normalised vectors)
// |q - c|^2 (or -<q, c>) is the query's coarse key of the partition, known from routing; <q, r^>
// comes from the per-query table; the per-vector term t = |r^|^2 + 2<c, r^> (L2 only) is stored
// as a float right after the quantizer code, so a row of lists.dat is CodeSize() =
// QuantizerCodeSize() + 4 bytes. The key is thus exactly the distance to the reconstruction,
// as FAISS's IVFPQ computes it. (Keeping the exact |r|^2 in the term instead was measured
// worse on clustered data: docs/NOTES.md.)
//
// Non-residual models (segments written before format v3) encode x itself and are scored the
// old way; flushes and merges that reuse such a model keep encoding raw vectors.
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
#include <cstring>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/base/metric.h"

namespace shoal::core {

enum class VectorEncoding : uint8_t { kFlat = 1, kSq8 = 2, kPq = 3 };

struct CentroidNorms {
  std::vector<float> norms;  // |c|^2 of every centroid
  float max = 0;             // the largest of them
  // A half-precision copy of the centroids (nlist x dim, core/index/half_distance.h) for the
  // router's single-query shortlist, with each row's error |c - half(c)| (rounded up) and the
  // largest |half(c)|^2. Empty when a coordinate is outside the half range.
  std::vector<uint16_t> halves;
  std::vector<float> half_error;
  float half_max = 0;
};

// The centroid norms and half copy of a model, computed on first use (routing needs them for
// every request: core/index/coarse_router.h) and kept. A copied, moved or assigned-to cache starts
// empty, since its model may be given other centroids; a cache whose size no longer matches
// nlist is recomputed. REQUIRES: a model's centroids do not change once Get has seen them (an
// IvfModel is immutable once trained).
//
// Thread-safe: Get may be called concurrently; the first caller computes.
class CentroidNormCache {
 public:
  CentroidNormCache() = default;
  CentroidNormCache(const CentroidNormCache&) noexcept {}
  CentroidNormCache& operator=(const CentroidNormCache&) noexcept;

  std::shared_ptr<const CentroidNorms> Get(const float* centroids, size_t nlist, size_t dim) const;

 private:
  mutable absl::Mutex mu_;
  mutable std::shared_ptr<const CentroidNorms> norms_ ABSL_GUARDED_BY(mu_);
};

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
  // SQ8/PQ only: codes encode x - centroid (see above). False for kFlat.
  bool residual = false;
  // Derived from centroids on first use; never stored on disk.
  CentroidNormCache centroid_norms;

  size_t nlist() const { return dim ? centroids.size() / dim : 0; }
  const float* centroid(size_t p) const { return centroids.data() + p * dim; }
  std::shared_ptr<const CentroidNorms> CentroidNormsSq() const {
    return centroid_norms.Get(centroids.data(), nlist(), dim);
  }
  // Bytes of the quantizer's code of one vector (dim floats, dim bytes, or pq_m bytes).
  size_t QuantizerCodeSize() const;
  // A residual L2 model stores the float term |r^|^2 + 2<c, r^> after each quantizer code.
  bool HasResidualTerm() const { return residual && metric == Metric::kL2; }
  // Bytes of one encoded row in a partition: the quantizer code, then the term if any.
  size_t CodeSize() const { return QuantizerCodeSize() + (HasResidualTerm() ? sizeof(float) : 0); }
};

// 8-bit PQ trains 256 centroids per sub-quantizer, so it needs at least this many vectors.
inline constexpr size_t kMinPqTrainingRows = 256;

struct IvfTrainOptions {
  // >= 1 and at most the number of training vectors, else INVALID_ARGUMENT (k-means cannot
  // place more centroids than points; BuildIndex clamps nlist to the row count before training).
  uint32_t nlist = 0;
  VectorEncoding encoding = VectorEncoding::kFlat;
  uint32_t pq_m = 0;  // PQ only; must divide dim
  // PQ only: 8, or 4 for fast-scan codes (core/index/fastscan_model.h; pq_m even).
  uint32_t pq_nbits = 8;
  // SQ8/PQ: train and encode residuals to the centroids. False only reproduces the old
  // (pre-v3) raw codes, for tests and before/after measurements.
  bool residual = true;
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

// Writes n * CodeSize() bytes of codes (with the residual term after each code, if any).
// partitions[i] is vector i's partition (from AssignToCentroids); a residual model needs it
// (INVALID_ARGUMENT if null), others ignore it.
absl::Status EncodeVectors(const IvfModel& model, const float* vectors, size_t n,
                           const uint32_t* partitions, uint8_t* codes);

// The per-vector term of row i of a residual L2 partition's codes.
// REQUIRES: model.HasResidualTerm().
inline float ResidualTerm(const IvfModel& model, const uint8_t* codes, size_t i) {
  float t;
  std::memcpy(&t, codes + i * model.CodeSize() + model.QuantizerCodeSize(), sizeof t);
  return t;
}

}  // namespace shoal::core
