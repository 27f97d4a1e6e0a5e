#include "core/index/coarse_router.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>
#include <type_traits>

#include "core/index/distance.h"
#include "core/index/half_distance.h"
#include "core/index/rounding_bound.h"
#include "gtest/gtest.h"

namespace shoal::core::coarse_router_test {
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

TEST(CoarseRouter, SingleQueriesGoThroughTheHalfCentroidsWithTheFloatAnswer) {
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct, Metric::kCosine}) {
    for (size_t dim : {7, 16, 40, 784}) {
      SCOPED_TRACE(std::string(MetricName(metric)) + " dim " + std::to_string(dim));
      const IvfModel model = Model(metric, 300, dim, uint32_t(dim));
      std::vector<float> queries = Gaussian(3, dim, uint32_t(dim) + 1);
      if (metric == Metric::kCosine) NormalizeRows(&queries, dim);
      for (size_t nprobe : {1, 8, 64}) {
        CoarseRouterStats stats;
        std::vector<Probe> got;
        RouteQueries(model, queries.data(), 3, nprobe, &got, {}, &stats);
        ExpectSameRoutes(got, Reference(model, queries.data(), 3, nprobe));
        EXPECT_EQ(stats.half_queries, 3u);
        EXPECT_GE(stats.half_rescored, 3 * nprobe);
        EXPECT_LT(stats.half_rescored, 3 * 300u) << "the shortlist should be short";
      }
    }
  }
}

TEST(CoarseRouter, DifferencesBelowHalfPrecisionAreRescoredExactly) {
  // Centroid p sits at distance 1 + p * 1e-6 from the query, in a random direction: the float
  // keys order the centroids by id, while rounding them to halves (spacing 2^-11 near 0.5)
  // moves each key by far more than 1e-6, so the half keys alone would pick others. The bound
  // widens the shortlist by each row's rounding error and the float kernel decides. The query is
  // near the origin, so the kernels' own rounding bound (~|q|^2 + |c|^2) stays far below the half
  // rounding.
  constexpr size_t kDim = 16, kNlist = 200, kNprobe = 8;
  std::vector<float> query = Gaussian(1, kDim, 22);
  for (float& x : query) x *= 0.01f;
  const std::vector<float> directions = Gaussian(kNlist, kDim, 23);
  IvfModel model;
  model.dim = kDim;
  model.metric = Metric::kL2;
  for (size_t p = 0; p < kNlist; ++p) {
    std::vector<float> u(directions.begin() + ptrdiff_t(p * kDim),
                         directions.begin() + ptrdiff_t((p + 1) * kDim));
    NormalizeInPlace(u.data(), kDim);
    for (size_t d = 0; d < kDim; ++d) {
      model.centroids.push_back(query[d] + (1.0f + float(p) * 1e-6f) * u[d]);
    }
  }
  CoarseRouterStats stats;
  std::vector<Probe> got;
  RouteQueries(model, query.data(), 1, kNprobe, &got, {}, &stats);
  const std::vector<Probe> want = Reference(model, query.data(), 1, kNprobe);
  ExpectSameRoutes(got, want);
  EXPECT_EQ(stats.half_queries, 1u);
  EXPECT_GT(stats.half_rescored, kNprobe);
}

TEST(CoarseRouter, CentroidsOutsideTheHalfRangeAreRoutedWithTheFloatTable) {
  IvfModel model = Model(Metric::kL2, 50, 8, 23);
  model.centroids[17] = 1e6f;  // past the largest half, 65504
  const std::vector<float> queries = Gaussian(2, 8, 24);
  CoarseRouterStats stats;
  std::vector<Probe> got;
  RouteQueries(model, queries.data(), 2, 4, &got, {}, &stats);
  ExpectSameRoutes(got, Reference(model, queries.data(), 2, 4));
  EXPECT_EQ(stats.half_queries, 0u);
  EXPECT_TRUE(model.CentroidNormsSq()->halves.empty());
}

TEST(HalfDistance, KernelsMatchTheFloatKernelsOnTheDecodedRows) {
  for (size_t dim : {1, 15, 16, 33, 784}) {
    const std::vector<float> q = Gaussian(1, dim, 30), rows = Gaussian(4, dim, 31);
    std::vector<uint16_t> halves(rows.size());
    std::vector<float> decoded(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      halves[i] = FloatToHalf(rows[i]);
      decoded[i] = HalfToFloat(halves[i]);
      EXPECT_LE(std::abs(decoded[i] - rows[i]), std::abs(rows[i]) * 0x1p-11f + 0x1p-24f);
    }
    float l2[4], ip[4];
    L2SqrHalfMany(q.data(), halves.data(), 4, dim, l2);
    InnerProductHalfMany(q.data(), halves.data(), 4, dim, ip);
    for (size_t r = 0; r < 4; ++r) {
      const float* row = decoded.data() + r * dim;
      const float qn = InnerProduct(q.data(), q.data(), dim);
      const float bound = DistanceRoundingBound(dim, qn, InnerProduct(row, row, dim));
      EXPECT_NEAR(l2[r], L2Sqr(q.data(), row, dim), 2 * bound) << "dim " << dim;
      EXPECT_NEAR(ip[r], InnerProduct(q.data(), row, dim), 2 * bound) << "dim " << dim;
    }
  }
  EXPECT_EQ(HalfToFloat(FloatToHalf(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
}

TEST(HalfDistance, ConversionsRoundToNearestEvenAndDecodeEveryHalfExactly) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);             // the tie rounds to even: inf
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);      // tie, to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, to even
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);             // tie, to even
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  // Every half that is not a NaN decodes to a float that encodes back to it; the kernels in use
  // (hardware vcvtph2ps where available) decode it to the same float.
  std::vector<float> one(16, 0.0f);
  one[0] = 1.0f;
  std::vector<uint16_t> row(16, 0);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
    if (std::isinf(f)) continue;
    row[0] = uint16_t(h);
    float ip = 0;
    InnerProductHalfMany(one.data(), row.data(), 1, 16, &ip);
    ASSERT_EQ(ip, f) << std::hex << h;
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
}  // namespace shoal::core::coarse_router_test
