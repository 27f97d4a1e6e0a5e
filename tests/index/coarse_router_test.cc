#include "core/index/coarse_router.h"

#include <algorithm>
#include <random>
#include <thread>
#include <type_traits>

#include "core/index/distance.h"
#include "gtest/gtest.h"

namespace shoal::core {
namespace {

std::vector<float> Gaussian(size_t n, size_t dim, uint32_t seed, float offset = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n * dim);
  for (float& x : v) x = offset + dist(rng);
  return v;
}

void NormalizeRows(std::vector<float>* v, size_t dim) {
  for (size_t i = 0; i * dim < v->size(); ++i) NormalizeInPlace(v->data() + i * dim, dim);
}

IvfModel Model(Metric metric, size_t nlist, size_t dim, uint32_t seed, float offset = 0) {
  IvfModel m;
  m.dim = uint32_t(dim);
  m.metric = metric;
  m.centroids = Gaussian(nlist, dim, seed, offset);
  if (metric == Metric::kCosine) NormalizeRows(&m.centroids, dim);
  return m;
}

// The brute-force per-query answer: every key from the SIMD kernel, sorted by (key, id).
std::vector<Probe> Reference(const IvfModel& m, const float* queries, size_t nq, size_t nprobe) {
  nprobe = std::min(nprobe, m.nlist());
  std::vector<Probe> out;
  for (size_t q = 0; q < nq; ++q) {
    const float* query = queries + q * m.dim;
    std::vector<Probe> all;
    for (uint32_t p = 0; p < m.nlist(); ++p) {
      const float k = IsSimilarity(m.metric) ? -InnerProduct(query, m.centroid(p), m.dim)
                                             : L2Sqr(query, m.centroid(p), m.dim);
      all.push_back({p, k});
    }
    std::sort(all.begin(), all.end(), [](const Probe& a, const Probe& b) {
      return a.key < b.key || (a.key == b.key && a.partition < b.partition);
    });
    out.insert(out.end(), all.begin(), all.begin() + nprobe);
  }
  return out;
}

void ExpectSameRoutes(const std::vector<Probe>& got, const std::vector<Probe>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].partition, want[i].partition) << "probe " << i;
    EXPECT_EQ(got[i].key, want[i].key) << "probe " << i;  // the same kernel: bit-identical
  }
}

TEST(CoarseRouter, MatchesThePerQueryPathForEveryMetricAndBatchSize) {
  constexpr size_t kDim = 40, kNlist = 150, kNprobe = 7;
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct, Metric::kCosine}) {
    const IvfModel model = Model(metric, kNlist, kDim, 1);
    for (size_t nq : {1, 2, 3, 4, 5, 8, 13, 64, 100, 300}) {
      SCOPED_TRACE(std::string(MetricName(metric)) + " nq " + std::to_string(nq));
      std::vector<float> queries = Gaussian(nq, kDim, uint32_t(nq));
      if (metric == Metric::kCosine) NormalizeRows(&queries, kDim);
      const std::vector<Probe> want = Reference(model, queries.data(), nq, kNprobe);
      // The defaults, and blocks of 3 queries (several sgemm blocks and a short last one).
      for (size_t scratch : {kRouterScratchFloats, 3 * kNlist}) {
        CoarseRouterOptions options;
        options.min_queries_for_gemm = 1;
        options.max_scratch_floats = scratch;
        CoarseRouterStats stats;
        std::vector<Probe> got;
        ASSERT_EQ(RouteQueries(model, queries.data(), nq, kNprobe, &got, options, &stats), kNprobe);
        ExpectSameRoutes(got, want);
        EXPECT_EQ(stats.gemm_queries, nq);
        EXPECT_GE(stats.rescored, nq * kNprobe);
      }
      std::vector<Probe> by_default;
      RouteQueries(model, queries.data(), nq, kNprobe, &by_default);
      ExpectSameRoutes(by_default, want);
    }
  }
}

TEST(CoarseRouter, BreaksTiesByPartitionIdAtTheCutAndInside) {
  // Centroids in groups of 4 identical rows: every query ties within each group, and nprobe 6
  // cuts the second group in half.
  constexpr size_t kDim = 16, kGroups = 20;
  IvfModel model = Model(Metric::kL2, kGroups, kDim, 2);
  std::vector<float> repeated;
  for (size_t g = 0; g < kGroups; ++g) {
    for (int copy = 0; copy < 4; ++copy) {
      repeated.insert(repeated.end(), model.centroid(g), model.centroid(g) + kDim);
    }
  }
  model.centroids = repeated;
  const std::vector<float> queries = Gaussian(20, kDim, 3);
  CoarseRouterOptions gemm;
  gemm.min_queries_for_gemm = 1;
  for (size_t nq : {1, 20}) {
    std::vector<Probe> got;
    RouteQueries(model, queries.data(), nq, 6, &got, gemm);
    const std::vector<Probe> want = Reference(model, queries.data(), nq, 6);
    ExpectSameRoutes(got, want);
    for (size_t q = 0; q < nq; ++q) {  // ranks 0-3: one group in id order; 4-5 the next two
      const Probe* r = got.data() + q * 6;
      EXPECT_EQ(r[1].partition, r[0].partition + 1);
      EXPECT_EQ(r[3].partition, r[0].partition + 3);
      EXPECT_EQ(r[0].partition % 4, 0u);
      EXPECT_EQ(r[4].partition % 4, 0u);
      EXPECT_EQ(r[5].partition, r[4].partition + 1);
    }
  }
}

TEST(CoarseRouter, NearTiesThatSgemmRoundingWouldReorderAreRescoredExactly) {
  // A common offset of 1000 per coordinate makes |q|^2 + |c|^2 ~ 6e7, where a float's spacing
  // is 4, while the distances differ by about 1: ranking by the sgemm keys alone would scramble
  // the order. The shortlist widens and the exact kernel decides.
  constexpr size_t kDim = 32, kNlist = 64, kNq = 16, kNprobe = 5;
  const IvfModel model = Model(Metric::kL2, kNlist, kDim, 4, 1000.0f);
  const std::vector<float> queries = Gaussian(kNq, kDim, 5, 1000.0f);
  CoarseRouterOptions gemm;
  gemm.min_queries_for_gemm = 1;
  CoarseRouterStats stats;
  std::vector<Probe> got;
  RouteQueries(model, queries.data(), kNq, kNprobe, &got, gemm, &stats);
  ExpectSameRoutes(got, Reference(model, queries.data(), kNq, kNprobe));
  EXPECT_EQ(stats.gemm_queries, kNq);
  EXPECT_GT(stats.rescored, kNq * kNprobe);
}

TEST(CoarseRouter, NprobeOfNlistOrMoreReturnsEveryPartitionInOrder) {
  const IvfModel model = Model(Metric::kInnerProduct, 30, 8, 6);
  const std::vector<float> queries = Gaussian(10, 8, 7);
  for (size_t nprobe : {30, 31, 1000}) {
    std::vector<Probe> got;
    EXPECT_EQ(RouteQueries(model, queries.data(), 10, nprobe, &got), 30u);
    ExpectSameRoutes(got, Reference(model, queries.data(), 10, 30));
  }
}

TEST(CoarseRouter, AnEmptyBatchOrAZeroNprobeIsHandled) {
  const IvfModel model = Model(Metric::kL2, 30, 8, 6);
  const std::vector<float> queries = Gaussian(1, 8, 7);
  std::vector<Probe> got(5);
  EXPECT_EQ(RouteQueries(model, queries.data(), 0, 4, &got), 4u);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(RouteQueries(model, queries.data(), 1, 0, &got), 1u);  // nprobe 0 is 1
  ExpectSameRoutes(got, Reference(model, queries.data(), 1, 1));
}

TEST(CoarseRouter, QueriesWhoseSgemmKeysOverflowAreRoutedPerQuery) {
  constexpr size_t kDim = 8;
  const IvfModel model = Model(Metric::kL2, 40, kDim, 8);
  std::vector<float> queries = Gaussian(6, kDim, 9);
  for (size_t d = 0; d < kDim; ++d) queries[2 * kDim + d] = 3e19f;  // |q|^2 overflows
  CoarseRouterOptions gemm;
  gemm.min_queries_for_gemm = 1;
  CoarseRouterStats stats;
  std::vector<Probe> got;
  RouteQueries(model, queries.data(), 6, 3, &got, gemm, &stats);
  ExpectSameRoutes(got, Reference(model, queries.data(), 6, 3));
  EXPECT_EQ(stats.fallback_queries, 1u);
  EXPECT_EQ(stats.gemm_queries, 5u);
}

TEST(CoarseRouter, SmallBatchesOfLowDimQueriesStayOnThePerQueryPath) {
  EXPECT_EQ(MinQueriesForRouterGemm(784), 4u);
  EXPECT_EQ(MinQueriesForRouterGemm(128), 16u);
  const IvfModel model = Model(Metric::kL2, 64, 128, 12);
  const std::vector<float> queries = Gaussian(16, 128, 13);
  for (size_t nq : {15, 16}) {
    CoarseRouterStats stats;
    std::vector<Probe> got;
    RouteQueries(model, queries.data(), nq, 4, &got, {}, &stats);
    EXPECT_EQ(stats.gemm_queries, nq == 16 ? 16u : 0u);
    ExpectSameRoutes(got, Reference(model, queries.data(), nq, 4));
  }
}

// The cache's copy constructor is noexcept, so vectors of models still move them on growth.
static_assert(std::is_nothrow_move_constructible_v<IvfModel>);

TEST(CentroidNormCache, AModelKeepsItsNormsAndACopyRecomputesAfterItsCentroidsChange) {
  IvfModel a = Model(Metric::kL2, 12, 4, 10);
  const auto norms = a.CentroidNormsSq();
  ASSERT_EQ(norms->norms.size(), 12u);
  EXPECT_EQ(a.CentroidNormsSq(), norms);  // computed once
  EXPECT_EQ(norms->norms[3], InnerProduct(a.centroid(3), a.centroid(3), 4));
  EXPECT_EQ(norms->max, *std::max_element(norms->norms.begin(), norms->norms.end()));

  IvfModel b = a;
  for (float& x : b.centroids) x *= 2;
  EXPECT_EQ(b.CentroidNormsSq()->norms[3], 4 * norms->norms[3]);
  b.centroids.resize(8);  // two centroids left
  EXPECT_EQ(b.CentroidNormsSq()->norms.size(), 2u);
  a = b;
  EXPECT_EQ(a.CentroidNormsSq()->norms.size(), 2u);
}

TEST(CentroidNormCache, ConcurrentFirstUsesAgreeOnOneComputation) {
  const IvfModel model = Model(Metric::kL2, 500, 16, 11);
  std::vector<std::shared_ptr<const CentroidNorms>> seen(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t) {
    threads.emplace_back([&, t] { seen[t] = model.CentroidNormsSq(); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& s : seen) EXPECT_EQ(s, seen[0]);
}

}  // namespace
}  // namespace shoal::core
