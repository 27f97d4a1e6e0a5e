#include "core/index/fastscan_model.h"

#include <faiss/impl/ProductQuantizer.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/index/distance.h"
#include "core/index/ivf_scan.h"
#include "core/index/partition_scan.h"
#include "gtest/gtest.h"

namespace shoal::core::fastscan_model_test {
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

class DeadIds : public IdFilter {
 public:
  bool IsDead(uint64_t id) const override { return id % 7 == 3; }
};

// ScoreIntoSinks runs 4-bit partitions with the thresholds inside the kernel: each sink ends
// with exactly the top-k (ids and keys) that pushing every key ScorePartition gives would keep
// — from empty top-ks, from top-ks already holding other partitions' rows (the threshold is
// shifted by each query's coarse key), with dead rows filtered, for 1..9 queries at once.
TEST(FastScanModel, ThresholdsInTheKernelKeepExactlyWhatTheKeysKeep) {
  const size_t n = 4000, dim = 32, k = 10;
  const auto x = Clustered(n, dim, 8, 5);
  const auto queries = Clustered(9, dim, 8, 6);
  IvfTrainOptions o{.nlist = 4, .encoding = VectorEncoding::kPq, .pq_m = 16, .pq_nbits = 4};
  auto trained = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(trained.ok()) << trained.status();
  const IvfModel& model = *trained;
  std::vector<uint32_t> assign(n);
  ASSERT_TRUE(AssignToCentroids(model, x.data(), n, assign.data()).ok());
  std::vector<float> rows;
  std::vector<uint64_t> row_ids;
  for (size_t i = 0; i < n; ++i) {
    if (assign[i] != 1) continue;
    rows.insert(rows.end(), &x[i * dim], &x[(i + 1) * dim]);
    row_ids.push_back(1000 + i);
  }
  const size_t count = row_ids.size();
  ASSERT_GT(count, 64u);
  std::vector<uint32_t> part(count, 1);
  std::vector<uint8_t> codes(count * model.CodeSize());
  ASSERT_TRUE(EncodeVectors(model, rows.data(), count, part.data(), codes.data()).ok());
  LayoutPartitionCodes(model, codes.data(), count);
  DeadIds dead;
  for (size_t nq : {1, 4, 9}) {
    PreparedQueries prepared(model, queries.data(), nq);
    std::vector<uint32_t> ids(nq);
    std::vector<float> coarse(nq);
    for (uint32_t q = 0; q < nq; ++q) {
      ids[q] = q;
      coarse[q] = prepared.CoarseKey(q, 1);
    }
    const auto scan = ScanQueries(prepared, ids.data(), coarse.data(), nq);
    std::vector<float> keys(nq * count);
    PartitionScratch scratch;
    ScorePartition(scan.data(), nq, codes.data(), count, keys.data(), &scratch);
    for (bool prefilled : {false, true}) {
      SCOPED_TRACE(testing::Message() << nq << " queries, prefilled " << prefilled);
      std::vector<CandidateTopK> expected(nq, CandidateTopK(k)), got(nq, CandidateTopK(k));
      std::vector<Sink> sinks;
      for (size_t q = 0; q < nq; ++q) {
        if (prefilled) {
          // Rows of "another partition" with keys around this one's 3rd-smallest.
          std::vector<float> sorted(keys.begin() + q * count, keys.begin() + (q + 1) * count);
          std::sort(sorted.begin(), sorted.end());
          for (uint64_t i = 0; i < k; ++i) {
            const Candidate c{sorted[2] + float(i) * 1e-3f, 1u + i, 0, 0, 0};
            expected[q].Push(c);
            got[q].Push(c);
          }
        }
        for (size_t i = 0; i < count; ++i) {
          const float key = keys[q * count + i];
          if (!dead.IsDead(row_ids[i]) && key <= expected[q].threshold()) {
            expected[q].Push(Candidate{key, row_ids[i], 0, 1, uint32_t(i)});
          }
        }
        sinks.push_back({&got[q], &dead, 0});
      }
      ScoreIntoSinks(scan.data(), sinks.data(), nq, codes.data(), row_ids.data(), nullptr, count,
                     /*exact=*/false, 1);
      for (size_t q = 0; q < nq; ++q) {
        const auto want = expected[q].Take(), have = got[q].Take();
        ASSERT_EQ(have.size(), want.size()) << q;
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(have[i].id, want[i].id) << q << " " << i;
          EXPECT_EQ(have[i].key, want[i].key) << q << " " << i;
          EXPECT_EQ(have[i].row, want[i].row) << q << " " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace shoal::core::fastscan_model_test
