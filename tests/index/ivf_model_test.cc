#include "core/index/ivf_model.h"

#include <random>

#include "core/index/distance.h"
#include "core/index/partition_scan.h"
#include "core/index/scan_kernels.h"
#include "faiss/impl/ProductQuantizer.h"
#include "faiss/impl/ScalarQuantizer.h"
#include "gtest/gtest.h"

namespace shoal::core::ivf_model_test {
namespace {

std::vector<float> Gaussian(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n * dim);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels{SimdLevel::kScalar};
  if (DetectSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

TEST(IvfModel, DefaultNlistFollowsFourRootN) {
  EXPECT_EQ(DefaultNlist(1), 1u);
  EXPECT_EQ(DefaultNlist(60000), 980u);
  EXPECT_EQ(DefaultNlist(100), 25u);  // capped at n / 4
  EXPECT_EQ(DefaultNlist(uint64_t(1) << 40), 65536u);
}

TEST(IvfModel, RejectsBadParameters) {
  const auto x = Gaussian(100, 8, 1);
  IvfTrainOptions o;
  o.nlist = 200;
  EXPECT_FALSE(TrainIvfModel(x.data(), 100, 8, Metric::kL2, o).ok());
  o.nlist = 4;
  o.encoding = VectorEncoding::kPq;
  o.pq_m = 3;
  EXPECT_FALSE(TrainIvfModel(x.data(), 100, 8, Metric::kL2, o).ok());
}

TEST(IvfModel, PqWithFewerThan256RowsIsFailedPreconditionNamingTheMinimum) {
  const auto x = Gaussian(100, 8, 1);
  IvfTrainOptions o;
  o.nlist = 4;
  o.encoding = VectorEncoding::kPq;
  o.pq_m = 4;
  // FAISS throws here (k-means for 256 codewords on 100 points); the adapter answers a Status.
  const auto model = TrainIvfModel(x.data(), 100, 8, Metric::kL2, o);
  ASSERT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition) << model.status();
  EXPECT_NE(model.status().message().find("at least 256 rows"), std::string::npos)
      << model.status();
  EXPECT_NE(model.status().message().find("there are 100"), std::string::npos) << model.status();
  EXPECT_TRUE(TrainIvfModel(Gaussian(256, 8, 1).data(), 256, 8, Metric::kL2, o).ok());
}

// FAISS's k-means throws when asked for more centroids than points; TrainIvfModel refuses
// first (BuildIndex clamps nlist to the row count, so a small collection still builds), and
// nlist == n works (FAISS takes the points as centroids).
TEST(IvfModel, FlatWithMoreCentroidsThanRowsIsInvalidArgumentNotAnException) {
  const auto x = Gaussian(10, 8, 1);
  IvfTrainOptions o;
  o.nlist = 50;
  const auto too_many = TrainIvfModel(x.data(), 10, 8, Metric::kL2, o);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument) << too_many.status();
  EXPECT_NE(too_many.status().message().find("nlist"), std::string::npos);
  o.nlist = 10;
  const auto exact = TrainIvfModel(x.data(), 10, 8, Metric::kL2, o);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->nlist(), 10u);
  std::vector<uint32_t> assign(10);
  ASSERT_TRUE(AssignToCentroids(*exact, x.data(), 10, assign.data()).ok());
}

// A model that FAISS refuses (here PQ with pq_m not dividing dim, as a corrupt ivf.meta could
// carry) makes encoding fail with a Status; no exception leaves the adapter.
TEST(IvfModel, EncodingWithAModelFaissRefusesAnswersInternal) {
  const auto x = Gaussian(4, 8, 1);
  IvfModel bad;
  bad.dim = 8;
  bad.encoding = VectorEncoding::kPq;
  bad.pq_m = 3;
  bad.pq_nbits = 8;
  std::vector<uint8_t> codes(64);
  const absl::Status s = EncodeVectors(bad, x.data(), 4, nullptr, codes.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("encoding vectors"), std::string::npos) << s;
}

TEST(IvfModel, AssignsEveryVectorToItsNearestCentroid) {
  const size_t n = 2000, dim = 16;
  const auto x = Gaussian(n, dim, 2);
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    IvfTrainOptions o;
    o.nlist = 20;
    auto model = TrainIvfModel(x.data(), n, dim, metric, o);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ(model->nlist(), 20u);
    std::vector<uint32_t> assign(n);
    ASSERT_TRUE(AssignToCentroids(*model, x.data(), n, assign.data()).ok());
    for (size_t i = 0; i < n; i += 97) {
      uint32_t best = 0;
      float best_d = 0;
      for (uint32_t c = 0; c < 20; ++c) {
        const float* cv = model->centroids.data() + c * dim;
        const float d = metric == Metric::kL2 ? L2Sqr(x.data() + i * dim, cv, dim)
                                              : -InnerProduct(x.data() + i * dim, cv, dim);
        if (c == 0 || d < best_d) best = c, best_d = d;
      }
      EXPECT_EQ(assign[i], best) << i;
    }
  }
}

TEST(ScanKernels, Sq8MatchesFaissDecodeAtEveryLevel) {
  const size_t n = 50, dim = 37;  // odd dim exercises the tails
  const auto x = Gaussian(n, dim, 3);
  IvfTrainOptions o;
  o.nlist = 2;
  o.encoding = VectorEncoding::kSq8;
  o.residual = false;  // the kernels on raw codes (pre-v3 segments)
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(model.ok());
  std::vector<uint8_t> codes(n * dim);
  ASSERT_TRUE(EncodeVectors(*model, x.data(), n, nullptr, codes.data()).ok());
  faiss::ScalarQuantizer sq(dim, faiss::ScalarQuantizer::QT_8bit);
  sq.trained = model->sq_vmin;
  sq.trained.insert(sq.trained.end(), model->sq_vdiff.begin(), model->sq_vdiff.end());
  std::vector<float> decoded(n * dim);
  sq.decode(codes.data(), decoded.data(), n);

  const auto q = Gaussian(1, dim, 4);
  std::vector<float> scale(dim), offset(dim), a(dim), w(dim);
  float ip_const = 0;
  for (size_t d = 0; d < dim; ++d) {
    scale[d] = model->sq_vdiff[d] / 255.0f;
    offset[d] = model->sq_vmin[d] + 0.5f * scale[d];
    a[d] = q[d] - offset[d];
    w[d] = q[d] * scale[d];
    ip_const += q[d] * offset[d];
  }
  std::vector<float> ours(n * dim);
  Sq8Decode(offset.data(), scale.data(), codes.data(), n, dim, ours.data());
  for (size_t i = 0; i < n * dim; ++i) ASSERT_NEAR(ours[i], decoded[i], 1e-5);
  for (SimdLevel level : Levels()) {
    std::vector<float> l2(n), dot(n);
    Sq8L2ManyAt(level, a.data(), scale.data(), codes.data(), n, dim, l2.data());
    Sq8DotManyAt(level, w.data(), codes.data(), n, dim, dot.data());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(l2[i], L2SqrAt(SimdLevel::kScalar, q.data(), &decoded[i * dim], dim), 1e-3);
      EXPECT_NEAR(dot[i] + ip_const,
                  InnerProductAt(SimdLevel::kScalar, q.data(), &decoded[i * dim], dim), 1e-3);
    }
  }
}

TEST(ScanKernels, PqScanMatchesFaissDistanceTables) {
  const size_t n = 3000, dim = 32, m = 8;
  const auto x = Gaussian(n, dim, 5);
  IvfTrainOptions o;
  o.nlist = 4;
  o.encoding = VectorEncoding::kPq;
  o.pq_m = m;
  o.residual = false;  // the kernel on raw codes (pre-v3 segments)
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(model.ok());
  ASSERT_EQ(model->CodeSize(), m);
  std::vector<uint8_t> codes(n * m);
  ASSERT_TRUE(EncodeVectors(*model, x.data(), n, nullptr, codes.data()).ok());
  faiss::ProductQuantizer pq(dim, m, 8);
  pq.centroids = model->pq_codebooks;
  const auto q = Gaussian(1, dim, 6);
  std::vector<float> tables(m * 256);
  pq.compute_distance_table(q.data(), tables.data());
  std::vector<float> ours(n);
  PqScan(tables.data(), m, codes.data(), n, ours.data());
  std::vector<float> decoded(dim);
  for (size_t i = 0; i < n; i += 13) {
    pq.decode(codes.data() + i * m, decoded.data());
    EXPECT_NEAR(ours[i], L2Sqr(q.data(), decoded.data(), dim), 1e-3);
  }
}

// The blocked (sgemm) path and the per-query kernels give the same keys, for raw and residual
// codes (all rows scored as if in partition 0, which only shifts the residual keys).
TEST(PartitionScan, GemmPathMatchesPerQueryKernels) {
  const size_t n = 300, dim = 24, nq = 12;
  const auto x = Gaussian(n, dim, 7);
  const auto queries = Gaussian(nq, dim, 8);
  for (VectorEncoding encoding : {VectorEncoding::kFlat, VectorEncoding::kSq8}) {
    for (bool residual : {false, true}) {
      for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
        IvfTrainOptions o;
        o.nlist = 2;
        o.encoding = encoding;
        o.residual = residual;
        auto model = TrainIvfModel(x.data(), n, dim, metric, o);
        ASSERT_TRUE(model.ok());
        std::vector<uint8_t> codes(n * model->CodeSize());
        const std::vector<uint32_t> partitions(n, 0);
        ASSERT_TRUE(EncodeVectors(*model, x.data(), n, partitions.data(), codes.data()).ok());
        PreparedQueries prepared(*model, queries.data(), nq);
        std::vector<uint32_t> ids(nq);
        std::vector<float> coarse(nq);
        for (uint32_t i = 0; i < nq; ++i) ids[i] = i, coarse[i] = prepared.CoarseKey(i, 0);
        PartitionScratch scratch;
        std::vector<float> blocked(nq * n), single(n);
        ScorePartition(ScanQueries(prepared, ids.data(), coarse.data(), nq).data(), nq,
                       codes.data(), n, blocked.data(), &scratch);
        for (uint32_t q = 0; q < nq; ++q) {
          ScorePartition(ScanQueries(prepared, &q, &coarse[q], 1).data(), 1, codes.data(), n,
                         single.data(), &scratch);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_NEAR(blocked[q * n + i], single[i], 1e-3 * (1 + std::abs(single[i])))
                << int(encoding) << " " << residual << " " << int(metric);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shoal::core::ivf_model_test
