#include "core/index/coarse_router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/index/distance.h"
#include "core/index/scan_kernels.h"

namespace shoal::core {
namespace {

// NaN (an overflowing inner product) orders last, so selection keeps a strict weak order.
float Ordered(float key) { return std::isnan(key) ? std::numeric_limits<float>::infinity() : key; }

bool ProbeBefore(const Probe& a, const Probe& b) {
  const float ka = Ordered(a.key), kb = Ordered(b.key);
  return ka < kb || (ka == kb && a.partition < b.partition);
}

// The nprobe smallest of `ordered` (one per centroid), then every centroid within `slack` of
// the nprobe-th, in id order. REQUIRES: 1 <= nprobe <= ordered.size().
void Shortlist(const std::vector<float>& ordered, size_t nprobe, float slack,
               std::vector<float>* tmp, std::vector<uint32_t>* ids) {
  tmp->assign(ordered.begin(), ordered.end());
  std::nth_element(tmp->begin(), tmp->begin() + (nprobe - 1), tmp->end());
  const float cut = (*tmp)[nprobe - 1] + slack;
  ids->clear();
  for (uint32_t p = 0; p < ordered.size(); ++p) {
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

// The per-query path: every centroid through the SIMD kernel, then the shortlist of ties at the
// cut (exact keys, slack 0) sorted by (key, id).
class PerQueryRouter {
 public:
  PerQueryRouter(const IvfModel& model, size_t nprobe)
      : model_(model), nprobe_(nprobe), keys_(model.nlist()), ordered_(model.nlist()) {}

  void Route(const float* query, Probe* out) {
    const size_t nlist = model_.nlist();
    if (IsSimilarity(model_.metric)) {
      InnerProductMany(query, model_.centroids.data(), nlist, model_.dim, keys_.data());
      for (float& k : keys_) k = -k;
    } else {
      L2SqrMany(query, model_.centroids.data(), nlist, model_.dim, keys_.data());
    }
    for (size_t p = 0; p < nlist; ++p) ordered_[p] = Ordered(keys_[p]);
    Shortlist(ordered_, nprobe_, 0.0f, &tmp_, &ids_);
    probes_.clear();
    for (uint32_t p : ids_) probes_.push_back({p, keys_[p]});
    EmitBest(&probes_, nprobe_, out);
  }

 private:
  const IvfModel& model_;
  const size_t nprobe_;
  std::vector<float> keys_, ordered_, tmp_;
  std::vector<uint32_t> ids_;
  std::vector<Probe> probes_;
};

// gamma(n) = n u / (1 - n u): the relative rounding bound of an n-term dot product.
float Gamma(size_t n) {
  const double u = std::ldexp(1.0, -24);
  return float(double(n) * u / (1.0 - double(n) * u));
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
  const float gamma = 8 * Gamma(dim + 8);
  std::vector<float> approx(nlist), tmp;
  std::vector<uint32_t> ids;
  std::vector<Probe> probes;
  for (size_t j = 0; j < count; ++j) {
    const float* query = block + j * dim;
    const float* dots = products->data() + j * nlist;
    const float qn = InnerProduct(query, query, dim);
    bool finite = std::isfinite(qn);
    for (size_t p = 0; p < nlist; ++p) {
      approx[p] = similarity ? -dots[p] : qn + norms.norms[p] - 2 * dots[p];
      finite = finite && std::isfinite(approx[p]);
    }
    Probe* dest = out + (first + j) * nprobe;
    // The bound, plus an absolute term for products that underflow.
    const float bound = gamma * (qn + norms.max) + float(dim) * std::numeric_limits<float>::min();
    if (!finite || !std::isfinite(2 * bound)) {
      fallback->Route(query, dest);
      if (stats) ++stats->fallback_queries;
      continue;
    }
    Shortlist(approx, nprobe, 2 * bound, &tmp, &ids);
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

size_t RouteQueries(const IvfModel& model, const float* queries, size_t nq, size_t nprobe,
                    std::vector<Probe>* out, const CoarseRouterOptions& options,
                    CoarseRouterStats* stats) {
  const size_t nlist = model.nlist();
  nprobe = std::min(std::max<size_t>(1, nprobe), nlist);
  out->resize(nq * nprobe);
  if (nq == 0 || nprobe == 0) return nprobe;
  PerQueryRouter per_query(model, nprobe);
  const size_t block = std::max<size_t>(1, options.max_scratch_floats / nlist);
  // Every centroid is in the answer anyway when nprobe == nlist: sgemm would only shortlist all.
  if (nq < options.min_queries_for_gemm || nprobe == nlist ||
      block < options.min_queries_for_gemm) {
    for (size_t q = 0; q < nq; ++q)
      per_query.Route(queries + q * model.dim, out->data() + q * nprobe);
    return nprobe;
  }
  const std::shared_ptr<const CentroidNorms> norms = model.CentroidNormsSq();
  std::vector<float> products;
  for (size_t first = 0; first < nq; first += block) {
    RouteBlock(model, *norms, queries, first, std::min(block, nq - first), nprobe, &per_query,
               &products, out->data(), stats);
  }
  return nprobe;
}

}  // namespace shoal::core
