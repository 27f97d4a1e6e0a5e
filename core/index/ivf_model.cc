#include "core/index/ivf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/index/distance.h"
#include "core/index/half_distance.h"
#include "faiss/Clustering.h"
#include "faiss/IndexFlat.h"
#include "faiss/impl/ProductQuantizer.h"
#include "faiss/impl/ScalarQuantizer.h"
#include "faiss/utils/distances.h"

namespace shoal::core {

size_t IvfModel::QuantizerCodeSize() const {
  switch (encoding) {
    case VectorEncoding::kFlat:
      return size_t(dim) * sizeof(float);
    case VectorEncoding::kSq8:
      return dim;
    case VectorEncoding::kPq:
      return (size_t(pq_m) * pq_nbits + 7) / 8;
  }
  return 0;
}

CentroidNormCache& CentroidNormCache::operator=(const CentroidNormCache&) noexcept {
  absl::MutexLock lock(&mu_);
  norms_.reset();
  return *this;
}

namespace {

// The half copy of the centroids and each row's error, in double and rounded up to a float:
// the router's shortlist bound needs an error at least the true one.
void ComputeHalves(const float* centroids, size_t nlist, size_t dim, CentroidNorms* out) {
  out->halves.resize(nlist * dim);
  out->half_error.resize(nlist);
  for (size_t p = 0; p < nlist; ++p) {
    double err2 = 0, norm2 = 0;
    for (size_t i = 0; i < dim; ++i) {
      const float x = centroids[p * dim + i];
      const uint16_t h = FloatToHalf(x);
      const float back = HalfToFloat(h);
      if (!std::isfinite(back) || !std::isfinite(x)) {
        out->halves.clear();
        out->half_error.clear();
        out->half_max = 0;
        return;
      }
      out->halves[p * dim + i] = h;
      err2 += (double(x) - back) * (double(x) - back);
      norm2 += double(back) * back;
    }
    out->half_error[p] = std::nextafter(float(std::sqrt(err2)), INFINITY);
    out->half_max = std::max(out->half_max, std::nextafter(float(norm2), INFINITY));
  }
}

}  // namespace

std::shared_ptr<const CentroidNorms> CentroidNormCache::Get(const float* centroids, size_t nlist,
                                                            size_t dim) const {
  {
    absl::MutexLock lock(&mu_);
    if (norms_ && norms_->norms.size() == nlist) return norms_;
  }
  // Computed without the lock, so other arena threads routing this model never wait behind it
  // (I-1); threads that race here compute the same norms and the first to publish wins.
  auto fresh = std::make_shared<CentroidNorms>();
  fresh->norms.resize(nlist);
  for (size_t p = 0; p < nlist; ++p) {
    const float* c = centroids + p * dim;
    fresh->norms[p] = InnerProduct(c, c, dim);
    fresh->max = std::max(fresh->max, fresh->norms[p]);
  }
  ComputeHalves(centroids, nlist, dim, fresh.get());
  absl::MutexLock lock(&mu_);
  if (!norms_ || norms_->norms.size() != nlist) norms_ = std::move(fresh);
  return norms_;
}

namespace {

// Runs `fn` (FAISS or BLAS work) and turns what it throws into a Status naming `step`: FAISS
// signals bad input and internal failures with exceptions, and allocation can fail anywhere.
template <typename Fn>
absl::Status Guarded(const char* step, Fn&& fn) {
  return CatchExceptions(step, [&] {
    fn();
    return absl::OkStatus();
  });
}

// k-means++ seeds (D^2 sampling) drawn from an evenly strided subset of at most
// kSeedRowsPerCentroid * k rows. FAISS's own seeds are k random rows: on data made of tight
// clusters that leaves a quarter of the clusters without a seed when k is near the number of
// clusters (e^-k/clusters), and k-means never moves a centroid across the gap, so those
// clusters share a partition with a neighbour and their residuals are as wide as the gap.
// D^2 sampling seeds an uncovered cluster first with overwhelming odds.
constexpr size_t kSeedRowsPerCentroid = 8;

std::vector<float> KmeansPlusPlusSeeds(const float* vectors, size_t n, size_t dim, size_t k,
                                       uint64_t seed) {
  const size_t stride = std::max<size_t>(1, n / (kSeedRowsPerCentroid * k));
  const size_t m = (n + stride - 1) / stride;
  std::vector<float> strided;  // a copy only when rows are skipped
  if (stride > 1) {
    strided.resize(m * dim);
    for (size_t i = 0; i < m; ++i) {
      std::memcpy(strided.data() + i * dim, vectors + i * stride * dim, dim * sizeof(float));
    }
  }
  const float* rows = stride > 1 ? strided.data() : vectors;
  std::vector<float> seeds(k * dim), nearest(m, std::numeric_limits<float>::infinity()), d(m);
  std::mt19937_64 rng(seed);
  size_t pick = size_t(rng() % m);
  for (size_t c = 0; c < k; ++c) {
    float* centroid = seeds.data() + c * dim;
    std::memcpy(centroid, rows + pick * dim, dim * sizeof(float));
    L2SqrMany(centroid, rows, m, dim, d.data());
    double total = 0;
    for (size_t i = 0; i < m; ++i) total += nearest[i] = std::min(nearest[i], d[i]);
    if (total <= 0) {  // every row is a seed already: repeat rows (k <= n is checked)
      pick = size_t(rng() % m);
      continue;
    }
    double target = std::uniform_real_distribution<double>(0.0, total)(rng);
    pick = m - 1;
    for (size_t i = 0; i < m; ++i) {
      target -= nearest[i];
      if (target < 0) {
        pick = i;
        break;
      }
    }
  }
  return seeds;
}

void TrainCoarse(const float* vectors, size_t n, uint32_t dim, Metric metric,
                 const IvfTrainOptions& options, IvfModel* model) {
  faiss::ClusteringParameters cp;
  cp.niter = options.kmeans_iterations;
  cp.seed = int(options.seed);
  cp.spherical = IsSimilarity(metric);
  cp.max_points_per_centroid = 256;
  cp.min_points_per_centroid = 1;  // no warning spam for small collections
  faiss::Clustering clustering(int(dim), int(options.nlist), cp);
  // FAISS starts from centroids given on input.
  clustering.centroids = KmeansPlusPlusSeeds(vectors, n, dim, options.nlist, options.seed);
  if (IsSimilarity(metric)) {
    faiss::IndexFlatIP index{int(dim)};
    clustering.train(faiss::Index::idx_t(n), vectors, index);
  } else {
    faiss::IndexFlatL2 index{int(dim)};
    clustering.train(faiss::Index::idx_t(n), vectors, index);
  }
  model->centroids = std::move(clustering.centroids);
}

void TrainSq8(const float* vectors, size_t n, uint32_t dim, IvfModel* model) {
  faiss::ScalarQuantizer sq(dim, faiss::ScalarQuantizer::QT_8bit);
  sq.train(n, vectors);
  model->sq_vmin.assign(sq.trained.begin(), sq.trained.begin() + dim);
  model->sq_vdiff.assign(sq.trained.begin() + dim, sq.trained.begin() + 2 * dim);
}

void TrainPq(const float* vectors, size_t n, uint32_t dim, const IvfTrainOptions& options,
             IvfModel* model) {
  faiss::ProductQuantizer pq(dim, options.pq_m, options.pq_nbits);
  pq.cp.seed = int(options.seed);
  pq.cp.max_points_per_centroid = 256;
  pq.cp.min_points_per_centroid = 1;  // small collections train anyway, without warnings
  pq.cp.niter = options.kmeans_iterations;
  pq.verbose = false;
  pq.train(n, vectors);
  model->pq_m = options.pq_m;
  model->pq_nbits = options.pq_nbits;
  model->pq_codebooks = std::move(pq.centroids);
}

// Residual training rows at most: PQ's k-means samples 256 points per codeword (65536 for 8
// bits) anyway, and SQ8's ranges need no more.
constexpr size_t kMaxResidualTrainingRows = 65536;

// out[i] = vectors[i] - centroid(partitions[i]).
void Residuals(const IvfModel& model, const float* vectors, size_t n, const uint32_t* partitions,
               float* out) {
  const size_t dim = model.dim;
  for (size_t i = 0; i < n; ++i) {
    const float* c = model.centroid(partitions[i]);
    for (size_t d = 0; d < dim; ++d) out[i * dim + d] = vectors[i * dim + d] - c[d];
  }
}

// Every `stride`-th training vector minus its centroid: the quantizer's training set. One
// buffer (no larger than the sample): the rows are copied, assigned, then turned into residuals
// in place.
absl::StatusOr<std::vector<float>> ResidualSample(const IvfModel& model, const float* vectors,
                                                  size_t n) {
  const size_t dim = model.dim;
  const size_t stride = (n + kMaxResidualTrainingRows - 1) / kMaxResidualTrainingRows;
  const size_t rows = (n + stride - 1) / stride;
  std::vector<float> residuals;
  std::vector<uint32_t> assign;
  SHOAL_RETURN_IF_ERROR(Guarded("sampling residuals", [&] {
    residuals.resize(rows * dim);
    assign.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      std::memcpy(residuals.data() + i * dim, vectors + i * stride * dim, dim * sizeof(float));
    }
  }));
  SHOAL_RETURN_IF_ERROR(AssignToCentroids(model, residuals.data(), rows, assign.data()));
  for (size_t i = 0; i < rows; ++i) {
    const float* c = model.centroid(assign[i]);
    for (size_t d = 0; d < dim; ++d) residuals[i * dim + d] -= c[d];
  }
  return residuals;
}

// The quantizer's code of each vector (SQ8 / PQ through FAISS) and `decoded`, what it decodes to.
void QuantizeAndDecode(const IvfModel& model, const float* vectors, size_t n, uint8_t* codes,
                       float* decoded) {
  if (model.encoding == VectorEncoding::kSq8) {
    faiss::ScalarQuantizer sq(model.dim, faiss::ScalarQuantizer::QT_8bit);
    sq.trained = model.sq_vmin;
    sq.trained.insert(sq.trained.end(), model.sq_vdiff.begin(), model.sq_vdiff.end());
    sq.compute_codes(vectors, codes, n);
    if (decoded) sq.decode(codes, decoded, n);
  } else {
    faiss::ProductQuantizer pq(model.dim, model.pq_m, model.pq_nbits);
    pq.centroids = model.pq_codebooks;
    pq.compute_codes(vectors, codes, n);
    if (decoded) pq.decode(codes, decoded, n);
  }
}

// Residual codes: quantize r = x - c, then lay out each row as the code and (L2) the term
// |r^|^2 + 2<c, r^> (see ivf_model.h).
void EncodeResiduals(const IvfModel& model, const float* vectors, size_t n,
                     const uint32_t* partitions, uint8_t* out) {
  const size_t dim = model.dim, qsize = model.QuantizerCodeSize(), row = model.CodeSize();
  std::vector<float> residuals(n * dim);
  Residuals(model, vectors, n, partitions, residuals.data());
  if (!model.HasResidualTerm()) {
    QuantizeAndDecode(model, residuals.data(), n, out, nullptr);
    return;
  }
  std::vector<uint8_t> codes(n * qsize);
  std::vector<float> decoded(n * dim);
  QuantizeAndDecode(model, residuals.data(), n, codes.data(), decoded.data());
  for (size_t i = 0; i < n; ++i) {
    const float* r = decoded.data() + i * dim;
    const float* c = model.centroid(partitions[i]);
    double norm = 0, cross = 0;
    for (size_t d = 0; d < dim; ++d) {
      norm += double(r[d]) * r[d];
      cross += double(c[d]) * r[d];
    }
    const float term = float(norm + 2 * cross);
    std::memcpy(out + i * row, codes.data() + i * qsize, qsize);
    std::memcpy(out + i * row + qsize, &term, sizeof term);
  }
}

}  // namespace

IvfModel MakeExactModel(uint32_t dim, Metric metric, uint32_t nlist) {
  IvfModel model;
  model.dim = dim;
  model.metric = metric;
  model.encoding = VectorEncoding::kFlat;
  model.exact = true;
  model.centroids.assign(size_t(std::max<uint32_t>(1, nlist)) * dim, 0.0f);
  return model;
}

void LimitFaissScratch() {
  // FAISS allocates query_bs x database_bs floats per blocked search and fills every row of
  // it that the batch uses: 1024 x 1024 x 4 bytes = 4 MiB at most (FAISS's default is 16 MiB).
  static const bool once = [] {
    faiss::distance_compute_blas_query_bs = 1024;
    return true;
  }();
  (void)once;
}

uint32_t DefaultNlist(uint64_t n) {
  const double by_sqrt = std::round(4.0 * std::sqrt(double(n)));
  const double cap = std::max<double>(1.0, double(n / 4));
  return uint32_t(std::clamp(std::min(by_sqrt, cap), 1.0, 65536.0));
}

absl::StatusOr<IvfModel> TrainIvfModel(const float* vectors, size_t n, uint32_t dim, Metric metric,
                                       const IvfTrainOptions& options) {
  if (options.nlist == 0 || options.nlist > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("nlist must be in [1, ", n, "] (the number of vectors), got ", options.nlist));
  }
  if (options.encoding == VectorEncoding::kPq && (options.pq_m == 0 || dim % options.pq_m != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m must divide dim ", dim, ", got ", options.pq_m));
  }
  if (options.encoding == VectorEncoding::kPq && (options.pq_nbits != 4 && options.pq_nbits != 8)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_nbits must be 4 or 8, got ", options.pq_nbits));
  }
  if (options.encoding == VectorEncoding::kPq && options.pq_nbits == 4 && options.pq_m % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pq_m must be even for 4-bit PQ, got ", options.pq_m));
  }
  if (options.encoding == VectorEncoding::kPq && n < kMinPqTrainingRows) {
    // FAISS would throw: k-means cannot place 256 codewords per sub-quantizer on fewer points.
    return absl::FailedPreconditionError(absl::StrCat(
        "IVF_PQ needs at least ", kMinPqTrainingRows, " rows to train (pq_m ", options.pq_m,
        ", 8 bits: ", kMinPqTrainingRows, " codewords per sub-quantizer); there are ", n,
        ". Add rows or use IVF_FLAT / IVF_SQ8"));
  }
  LimitFaissScratch();
  IvfModel model;
  model.dim = dim;
  model.metric = metric;
  model.encoding = options.encoding;
  SHOAL_RETURN_IF_ERROR(Guarded("IVF k-means training",
                                [&] { TrainCoarse(vectors, n, dim, metric, options, &model); }));
  if (options.encoding == VectorEncoding::kFlat) return model;
  // The quantizer learns what it will encode: residuals to the centroids just trained.
  std::vector<float> residuals;
  const float* train = vectors;
  size_t train_n = n;
  if (options.residual) {
    SHOAL_ASSIGN_OR_RETURN(residuals, ResidualSample(model, vectors, n));
    train = residuals.data();
    train_n = residuals.size() / dim;
    model.residual = true;
  }
  if (options.encoding == VectorEncoding::kSq8) {
    SHOAL_RETURN_IF_ERROR(Guarded("SQ8 training", [&] { TrainSq8(train, train_n, dim, &model); }));
  } else {
    SHOAL_RETURN_IF_ERROR(
        Guarded("PQ training", [&] { TrainPq(train, train_n, dim, options, &model); }));
  }
  return model;
}

absl::Status AssignToCentroids(const IvfModel& model, const float* vectors, size_t n,
                               uint32_t* assign) {
  if (n == 0) return absl::OkStatus();
  return Guarded("assigning vectors to centroids", [&] {
    std::vector<float> distances(n);
    std::vector<faiss::Index::idx_t> labels(n);
    // FAISS's flat search batches through BLAS sgemm, which is what assigning many vectors to
    // many centroids wants.
    std::unique_ptr<faiss::IndexFlat> index;
    if (IsSimilarity(model.metric)) {
      index = std::make_unique<faiss::IndexFlatIP>(int(model.dim));
    } else {
      index = std::make_unique<faiss::IndexFlatL2>(int(model.dim));
    }
    index->add(faiss::Index::idx_t(model.nlist()), model.centroids.data());
    index->search(faiss::Index::idx_t(n), vectors, 1, distances.data(), labels.data());
    for (size_t i = 0; i < n; ++i) {
      assign[i] = uint32_t(std::max<faiss::Index::idx_t>(0, labels[i]));
    }
  });
}

absl::Status EncodeVectors(const IvfModel& model, const float* vectors, size_t n,
                           const uint32_t* partitions, uint8_t* codes) {
  if (model.residual && model.encoding != VectorEncoding::kFlat) {
    if (n > 0 && partitions == nullptr) {
      return absl::InvalidArgumentError("encoding residuals needs each vector's partition");
    }
    for (size_t i = 0; i < n; ++i) {
      if (partitions[i] >= model.nlist()) {
        return absl::InvalidArgumentError(
            absl::StrCat("encoding vectors: partition ", partitions[i], " of ", model.nlist()));
      }
    }
    return Guarded("encoding vectors",
                   [&] { EncodeResiduals(model, vectors, n, partitions, codes); });
  }
  return Guarded("encoding vectors", [&] {
    if (model.encoding == VectorEncoding::kFlat) {
      std::memcpy(codes, vectors, n * model.dim * sizeof(float));
    } else {
      QuantizeAndDecode(model, vectors, n, codes, nullptr);
    }
  });
}

}  // namespace shoal::core
