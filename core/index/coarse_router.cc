#include "core/index/coarse_router.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/index/distance.h"
#include "core/index/half_distance.h"
#include "core/index/rounding_bound.h"
#include "core/index/scan_kernels.h"

namespace shoal::core {
namespace {

// NaN (an overflowing inner product) orders last, so selection keeps a strict weak order.
float Ordered(float key) { return std::isnan(key) ? std::numeric_limits<float>::infinity() : key; }

bool ProbeBefore(const Probe& a, const Probe& b) {
  const float ka = Ordered(a.key), kb = Ordered(b.key);
  return ka < kb || (ka == kb && a.partition < b.partition);
}

// Above this nprobe, selection is nth_element on a copy; at or below it, a sorted buffer.
constexpr size_t kMaxBufferedK = 64;

constexpr size_t kChunk = 16;

bool AnyBelow(const float* v, float cut) {
  uint32_t any = 0;
  for (size_t c = 0; c < kChunk; ++c) any |= uint32_t(v[c] < cut);
  return any != 0;
}

bool AnyAtMost(const float* v, float cut) {
  uint32_t any = 0;
  for (size_t c = 0; c < kChunk; ++c) any |= uint32_t(v[c] <= cut);
  return any != 0;
}

// Inserts x into the sorted k best b[0, k) if it is below the worst of them.
inline void Insert(float* b, size_t k, float x, float* worst) {
  if (!(x < *worst)) return;
  size_t j = k - 1;
  for (; j > 0 && b[j - 1] > x; --j) b[j] = b[j - 1];
  b[j] = x;
  *worst = b[k - 1];
}

// The k-th smallest of v[0, n). REQUIRES: 1 <= k <= n; no NaN in v.
// The sorted buffer of the k best so far costs one well-predicted compare for most values:
// several times cheaper than nth_element (or Plan's old partial_sort) at nlist 1024-2048 and
// nprobe 4-16 (route-bench).
float KthSmallest(const float* v, size_t n, size_t k, std::vector<float>* buf) {
  if (k > kMaxBufferedK) {
    buf->assign(v, v + n);
    std::nth_element(buf->begin(), buf->begin() + (k - 1), buf->end());
    return (*buf)[k - 1];
  }
  buf->assign(v, v + k);
  std::sort(buf->begin(), buf->end());
  float* b = buf->data();
  float worst = b[k - 1];
  size_t i = k;
  // Whole chunks that hold nothing below the k-th best so far are skipped with one branch (the
  // compares vectorize); inserts are rare once the buffer is good.
  for (; i + kChunk <= n; i += kChunk) {
    if (!AnyBelow(v + i, worst)) continue;
    for (size_t c = i; c < i + kChunk; ++c) Insert(b, k, v[c], &worst);
  }
  for (; i < n; ++i) Insert(b, k, v[i], &worst);
  return worst;
}

// Every centroid whose `ordered` key (of n) is within `slack` of the nprobe-th smallest, in id
// order. REQUIRES: 1 <= nprobe <= ordered.size(); no NaN in ordered.
void Shortlist(const float* ordered, size_t n, size_t nprobe, float slack, std::vector<float>* tmp,
               std::vector<uint32_t>* ids) {
  const float cut = KthSmallest(ordered, n, nprobe, tmp) + slack;
  ids->clear();
  uint32_t p = 0;
  for (; p + kChunk <= n; p += kChunk) {
    if (!AnyAtMost(ordered + p, cut)) continue;
    for (uint32_t c = p; c < p + kChunk; ++c) {
      if (ordered[c] <= cut) ids->push_back(c);
    }
  }
  for (; p < n; ++p) {
    if (ordered[p] <= cut) ids->push_back(p);
  }
}

// Sorts `probes` by (key, partition) and appends the first nprobe to `out`.
void EmitBest(std::vector<Probe>* probes, size_t nprobe, Probe* out) {
  std::sort(probes->begin(), probes->end(), ProbeBefore);
  std::copy(probes->begin(), probes->begin() + nprobe, out);
}

float ExactKey(const IvfModel& model, const float* query, uint32_t p) {
  return IsSimilarity(model.metric) ? -InnerProduct(query, model.centroid(p), model.dim)
                                    : L2Sqr(query, model.centroid(p), model.dim);
}

bool AllFinite(const float* v, size_t n);

// x moved outward by a few ulps (the bounds below are computed in double and stored as floats:
// an upper bound must not round down, a lower one not up).
float Up(double x) {
  const float f = float(x);
  return f + std::abs(f) * 0x1p-20f + std::numeric_limits<float>::min();
}
float Down(double x) {
  const float f = float(x);
  return f - std::abs(f) * 0x1p-20f - std::numeric_limits<float>::min();
}

// The per-query path. With a half copy of the centroids (CentroidNorms::halves), every
// centroid is first scored against its half row — half the bytes of the float table — and
// bounded: with e = |c - half(c)| and b the kernels' rounding bound, the float kernel's key of c
// lies in [(max(0, sqrt(h - b) - e))^2 - b, (sqrt(h + b) + e)^2 + b] for L2 (h the half key), or
// -h +- (2b + |q| e) for inner products. Every centroid whose lower bound is at most the
// nprobe-th smallest upper bound is re-scored with the float kernel, which keeps every centroid
// whose float key is at most the nprobe-th smallest float key: the answer, ties included, is
// the float path's. Without halves (or with keys that are not finite), every centroid goes
// through the float kernel, then the ties at the cut (slack 0) are sorted by (key, id).
class PerQueryRouter {
 public:
  PerQueryRouter(const IvfModel& model, size_t nprobe, const CentroidNorms* norms,
                 CoarseRouterStats* stats)
      : model_(model),
        nprobe_(nprobe),
        norms_(norms),
        stats_(stats),
        keys_(model.nlist()),
        ordered_(model.nlist()) {}

  void Route(const float* query, Probe* out) {
    if (norms_ != nullptr && !norms_->halves.empty() && nprobe_ < model_.nlist() &&
        RouteByHalves(query, out)) {
      return;
    }
    const size_t nlist = model_.nlist();
    if (IsSimilarity(model_.metric)) {
      InnerProductMany(query, model_.centroids.data(), nlist, model_.dim, keys_.data());
      for (float& k : keys_) k = -k;
    } else {
      L2SqrMany(query, model_.centroids.data(), nlist, model_.dim, keys_.data());
    }
    for (size_t p = 0; p < nlist; ++p) ordered_[p] = Ordered(keys_[p]);
    Shortlist(ordered_.data(), nlist, nprobe_, 0.0f, &tmp_, &ids_);
    probes_.clear();
    for (uint32_t p : ids_) probes_.push_back({p, keys_[p]});
    EmitBest(&probes_, nprobe_, out);
  }

 private:
  bool RouteByHalves(const float* query, Probe* out) {
    const size_t nlist = model_.nlist(), dim = model_.dim;
    const bool similarity = IsSimilarity(model_.metric);
    if (similarity) {
      InnerProductHalfMany(query, norms_->halves.data(), nlist, dim, keys_.data());
    } else {
      L2SqrHalfMany(query, norms_->halves.data(), nlist, dim, keys_.data());
    }
    const float qn = InnerProduct(query, query, dim);
    const double b = DistanceRoundingBound(dim, qn, std::max(norms_->max, norms_->half_max));
    if (!std::isfinite(qn) || !std::isfinite(b) || !AllFinite(keys_.data(), nlist)) return false;
    upper_.resize(nlist);
    const float* error = norms_->half_error.data();
    if (similarity) {
      const double qlen = std::sqrt(double(qn));
      for (size_t p = 0; p < nlist; ++p) {
        const double slack = 2 * b + qlen * error[p];
        upper_[p] = Up(-double(keys_[p]) + slack);
        ordered_[p] = Down(-double(keys_[p]) - slack);  // the lower bound
      }
    } else {
      for (size_t p = 0; p < nlist; ++p) {
        const double h = keys_[p];
        const double hi = std::sqrt(h + b) + error[p];
        const double lo = std::max(0.0, std::sqrt(std::max(0.0, h - b)) - error[p]);
        upper_[p] = Up(hi * hi + b);
        ordered_[p] = Down(lo * lo - b);
      }
    }
    if (!AllFinite(upper_.data(), nlist)) return false;
    const float cut = KthSmallest(upper_.data(), nlist, nprobe_, &tmp_);
    probes_.clear();
    for (uint32_t p = 0; p < nlist; ++p) {
      if (ordered_[p] <= cut) probes_.push_back({p, ExactKey(model_, query, p)});
    }
    if (stats_) {
      ++stats_->half_queries;
      stats_->half_rescored += probes_.size();
    }
    EmitBest(&probes_, nprobe_, out);
    return true;
  }

  const IvfModel& model_;
  const size_t nprobe_;
  const CentroidNorms* const norms_;  // may be null: no half path
  CoarseRouterStats* const stats_;    // may be null
  std::vector<float> keys_, ordered_, upper_, tmp_;
  std::vector<uint32_t> ids_;
  std::vector<Probe> probes_;
};

// Branch-free (an OR over exponent bits vectorizes; a NaN test per key would not).
bool AllFinite(const float* v, size_t n) {
  uint32_t nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    nonfinite |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  return nonfinite == 0;
}

// Routes queries [first, first + count) through one sgemm (see the header for the bound).
void RouteBlock(const IvfModel& model, const CentroidNorms& norms, const float* queries,
                size_t first, size_t count, size_t nprobe, PerQueryRouter* fallback,
                std::vector<float>* products, Probe* out, CoarseRouterStats* stats) {
  const size_t nlist = model.nlist(), dim = model.dim;
  const bool similarity = IsSimilarity(model.metric);
  const float* block = queries + first * dim;
  products->resize(count * nlist);
  GemmInnerProducts(block, count, model.centroids.data(), nlist, dim, products->data());
  std::vector<float> tmp;
  std::vector<uint32_t> ids;
  std::vector<Probe> probes;
  for (size_t j = 0; j < count; ++j) {
    const float* query = block + j * dim;
    float* approx = products->data() + j * nlist;  // <q, c> turned into the key in place
    const float qn = InnerProduct(query, query, dim);
    if (similarity) {
      for (size_t p = 0; p < nlist; ++p) approx[p] = -approx[p];
    } else {
      for (size_t p = 0; p < nlist; ++p) approx[p] = qn + norms.norms[p] - 2 * approx[p];
    }
    const bool finite = std::isfinite(qn) && AllFinite(approx, nlist);
    Probe* dest = out + (first + j) * nprobe;
    const float bound = DistanceRoundingBound(dim, qn, norms.max);  // core/index/rounding_bound.h
    if (!finite || !std::isfinite(2 * bound)) {
      fallback->Route(query, dest);
      if (stats) ++stats->fallback_queries;
      continue;
    }
    Shortlist(approx, nlist, nprobe, 2 * bound, &tmp, &ids);
    probes.clear();
    for (uint32_t p : ids) probes.push_back({p, ExactKey(model, query, p)});
    EmitBest(&probes, nprobe, dest);
    if (stats) {
      ++stats->gemm_queries;
      stats->rescored += ids.size();
    }
  }
}

}  // namespace

size_t MinQueriesForRouterGemm(size_t dim) {
  return std::max<size_t>(4, (2048 + dim - 1) / std::max<size_t>(1, dim));
}

size_t RouteQueries(const IvfModel& model, const float* queries, size_t nq, size_t nprobe,
                    std::vector<Probe>* out, const CoarseRouterOptions& options,
                    CoarseRouterStats* stats) {
  const size_t nlist = model.nlist();
  nprobe = std::min(std::max<size_t>(1, nprobe), nlist);
  out->resize(nq * nprobe);
  if (nq == 0 || nprobe == 0) return nprobe;
  const std::shared_ptr<const CentroidNorms> norms = model.CentroidNormsSq();
  PerQueryRouter per_query(model, nprobe, norms.get(), stats);
  const size_t block = std::max<size_t>(1, options.max_scratch_floats / nlist);
  const size_t min_gemm = options.min_queries_for_gemm > 0 ? options.min_queries_for_gemm
                                                           : MinQueriesForRouterGemm(model.dim);
  // Every centroid is in the answer anyway when nprobe == nlist: sgemm would only shortlist all.
  if (nq < min_gemm || nprobe == nlist || block < min_gemm) {
    for (size_t q = 0; q < nq; ++q)
      per_query.Route(queries + q * model.dim, out->data() + q * nprobe);
    return nprobe;
  }
  std::vector<float> products;
  for (size_t first = 0; first < nq; first += block) {
    RouteBlock(model, *norms, queries, first, std::min(block, nq - first), nprobe, &per_query,
               &products, out->data(), stats);
  }
  return nprobe;
}

}  // namespace shoal::core
