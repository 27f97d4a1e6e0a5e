// Helpers shared by the IVF engine's tests: clustered data, exact answers, requests, and a
// collector for the answers of many concurrent searches.
#pragma once

#include <algorithm>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/index/distance.h"
#include "core/index/ivf_model.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"

namespace shoal::core::test_util {

// Gaussian clusters, so that probing a few partitions finds most neighbours.
struct Data {
  size_t n, dim;
  std::vector<float> vectors;
  std::vector<uint64_t> ids;

  Data(size_t n, size_t dim, uint32_t seed) : n(n), dim(dim), vectors(n * dim) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0, 0.3f), center(0, 2);
    std::vector<float> centers(20 * dim);
    for (float& c : centers) c = center(rng);
    for (size_t i = 0; i < n; ++i) {
      const size_t c = i % 20;
      for (size_t d = 0; d < dim; ++d) vectors[i * dim + d] = centers[c * dim + d] + noise(rng);
      ids.push_back(1000 + i);
    }
  }
  std::vector<float> Queries(size_t nq, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0, 0.3f);
    std::vector<float> q(nq * dim);
    for (size_t i = 0; i < nq; ++i) {
      const size_t base = (i * 7919) % n;
      for (size_t d = 0; d < dim; ++d) q[i * dim + d] = vectors[base * dim + d] + noise(rng);
    }
    return q;
  }
};

inline std::vector<uint64_t> Exact(const Data& data, const float* q, size_t k, Metric metric,
                                   const absl::flat_hash_set<uint64_t>& dead = {}) {
  std::vector<std::pair<float, uint64_t>> all;
  for (size_t i = 0; i < data.n; ++i) {
    if (dead.contains(data.ids[i])) continue;
    const float* v = data.vectors.data() + i * data.dim;
    const float key = metric == Metric::kL2 ? L2Sqr(q, v, data.dim) : -InnerProduct(q, v, data.dim);
    all.push_back({key, data.ids[i]});
  }
  std::partial_sort(all.begin(), all.begin() + long(k), all.end());
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < k; ++i) ids.push_back(all[i].second);
  return ids;
}

inline std::vector<uint64_t> Ids(const QueryResult& r) {
  std::vector<uint64_t> ids;
  for (const Neighbor& n : r.neighbors) ids.push_back(n.id);
  return ids;
}

inline double Recall(const std::vector<uint64_t>& got, const std::vector<uint64_t>& truth) {
  const std::set<uint64_t> t(truth.begin(), truth.end());
  size_t hit = 0;
  for (uint64_t id : got) hit += t.count(id);
  return double(hit) / double(truth.size());
}

inline std::shared_ptr<IvfModel> Train(const Data& data, uint32_t nlist, VectorEncoding encoding,
                                       Metric metric = Metric::kL2) {
  IvfTrainOptions o;
  o.nlist = nlist;
  o.encoding = encoding;
  o.pq_m = uint32_t(data.dim / 4);
  auto model = TrainIvfModel(data.vectors.data(), data.n, uint32_t(data.dim), metric, o);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::make_shared<IvfModel>(*std::move(model));
}

inline IvfSearchRequest Request(const Data& data, std::vector<float> queries, size_t nq,
                                std::vector<IvfSegmentRef> segments, uint32_t nprobe,
                                Metric metric = Metric::kL2) {
  IvfSearchRequest r;
  r.segments = std::move(segments);
  r.queries = std::move(queries);
  r.num_queries = nq;
  r.dim = uint32_t(data.dim);
  r.k = 10;
  r.metric = metric;
  r.nprobe = nprobe;
  return r;
}

inline absl::StatusOr<std::vector<QueryResult>> RunSync(Executor& executor,
                                                        IvfSearchRequest request) {
  std::promise<absl::StatusOr<std::vector<QueryResult>>> promise;
  auto future = promise.get_future();
  IvfSearch(executor, std::move(request),
            [&promise](absl::StatusOr<std::vector<QueryResult>> r) { promise.set_value(r); });
  return future.get();
}

// Counts answers of many concurrent searches.
struct Answers {
  absl::Mutex mu;
  std::vector<absl::StatusOr<std::vector<QueryResult>>> results ABSL_GUARDED_BY(mu);
  size_t answered ABSL_GUARDED_BY(mu) = 0;

  explicit Answers(size_t n) : results(n, absl::UnknownError("no answer")) {}
  SearchDone Callback(size_t i) {
    return [this, i](absl::StatusOr<std::vector<QueryResult>> r) {
      absl::MutexLock lock(&mu);
      results[i] = std::move(r);
      ++answered;
    };
  }
  bool AllAnswered() {
    absl::MutexLock lock(&mu);
    return answered == results.size();
  }
  absl::StatusOr<std::vector<QueryResult>> Result(size_t i) {
    absl::MutexLock lock(&mu);
    return results[i];
  }
  void WaitFor(size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return answered >= n; };
    mu.Await(absl::Condition(&enough));
  }
};

class DeadSet : public IdFilter {
 public:
  explicit DeadSet(absl::flat_hash_set<uint64_t> ids) : ids_(std::move(ids)) {}
  bool IsDead(uint64_t id) const override { return ids_.contains(id); }

 private:
  absl::flat_hash_set<uint64_t> ids_;
};

}  // namespace shoal::core::test_util
