#include "core/index/fastscan_model.h"

#include <faiss/impl/ProductQuantizer.h>

#include <random>
#include <vector>

#include "core/index/distance.h"
#include "core/index/partition_scan.h"
#include "gtest/gtest.h"

namespace shoal::core {
namespace {

std::vector<float> Clustered(size_t n, size_t dim, size_t clusters, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> wide(0.0f, 10.0f), tight(0.0f, 0.3f);
  std::vector<float> centers(clusters * dim), x(n * dim);
  for (float& c : centers) c = wide(rng);
  for (size_t i = 0; i < n; ++i) {
    const float* c = &centers[(i % clusters) * dim];
    for (size_t d = 0; d < dim; ++d) x[i * dim + d] = c[d] + tight(rng);
  }
  return x;
}

TEST(FastScanModel, TrainingRefusesOddPqMAndOtherBitCounts) {
  const size_t n = 600, dim = 12;
  const auto x = Clustered(n, dim, 4, 1);
  IvfTrainOptions o{.nlist = 4, .encoding = VectorEncoding::kPq, .pq_m = 3, .pq_nbits = 4};
  EXPECT_EQ(TrainIvfModel(x.data(), n, dim, Metric::kL2, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.pq_m = 4;
  o.pq_nbits = 6;
  EXPECT_EQ(TrainIvfModel(x.data(), n, dim, Metric::kL2, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.pq_nbits = 4;
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(IsFastScan(*model));
  EXPECT_EQ(model->QuantizerCodeSize(), 2u);
}

// A 4-bit residual partition laid out as fast-scan blocks scores every row within the table
// quantization bound of its exact distance to the reconstruction c + r^, for several queries.
TEST(FastScanModel, PartitionKeysMatchTheDistanceToTheReconstruction) {
  const size_t n = 3000, dim = 32, nq = 6;
  const auto x = Clustered(n, dim, 8, 2);
  const auto queries = Clustered(nq, dim, 8, 3);
  IvfTrainOptions o{.nlist = 8, .encoding = VectorEncoding::kPq, .pq_m = 8, .pq_nbits = 4};
  auto trained = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(trained.ok()) << trained.status();
  const IvfModel& model = *trained;
  ASSERT_TRUE(model.residual && model.HasResidualTerm());
  std::vector<uint32_t> assign(n);
  ASSERT_TRUE(AssignToCentroids(model, x.data(), n, assign.data()).ok());
  // Partition 0's rows (an uneven count exercises the row-major tail).
  std::vector<float> rows;
  for (size_t i = 0; i < n; ++i) {
    if (assign[i] == 0) rows.insert(rows.end(), &x[i * dim], &x[(i + 1) * dim]);
  }
  const size_t count = rows.size() / dim;
  ASSERT_GT(count, 32u);
  std::vector<uint32_t> part(count, 0);
  std::vector<uint8_t> codes(count * model.CodeSize());
  ASSERT_TRUE(EncodeVectors(model, rows.data(), count, part.data(), codes.data()).ok());
  const std::vector<uint8_t> row_major = codes;
  LayoutPartitionCodes(model, codes.data(), count);

  PreparedQueries prepared(model, queries.data(), nq);
  std::vector<uint32_t> ids(nq);
  std::vector<float> coarse(nq);
  for (uint32_t q = 0; q < nq; ++q) {
    ids[q] = q;
    coarse[q] = prepared.CoarseKey(q, 0);
  }
  std::vector<float> keys(nq * count);
  PartitionScratch scratch;
  ScorePartition(ScanQueries(prepared, ids.data(), coarse.data(), nq).data(), nq, codes.data(),
                 count, keys.data(), &scratch);

  faiss::ProductQuantizer pq(dim, model.pq_m, 4);
  pq.centroids = model.pq_codebooks;
  std::vector<float> r(dim), tables(model.pq_m * 16);
  for (size_t q = 0; q < nq; ++q) {
    pq.compute_inner_prod_table(&queries[q * dim], tables.data());
    for (float& t : tables) t *= -2.0f;
    FastScanLut lut;
    lut.Build(tables.data(), model.pq_m, 0.0f);
    for (size_t i = 0; i < count; ++i) {
      pq.decode(&row_major[i * model.CodeSize()], r.data());
      for (size_t d = 0; d < dim; ++d) r[d] += model.centroid(0)[d];
      const float exact = L2Sqr(&queries[q * dim], r.data(), dim);
      ASSERT_NEAR(keys[q * count + i], exact, lut.error_bound() + 1e-3f * (1 + exact))
          << "query " << q << " row " << i;
    }
  }
}

}  // namespace
}  // namespace shoal::core
