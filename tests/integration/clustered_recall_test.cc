// Recall on tightly clustered data through the real server (issue #15 part 1): the bench
// generator's Gaussian clusters (100,000 x 128, 1000 clusters, sigma 0.1, fixed seed), 1000
// queries from the same mixture, ground truth from FAISS's exact flat index.
//
// Inside a tight cluster every neighbour is at nearly the same distance, so codes of the raw
// vectors (whose quantization error is set by the spread of the whole data set) cannot rank
// them; codes of the residual to the partition's centroid can. The test finds the smallest
// nprobe of a ladder at which IVF_FLAT reaches recall@10 0.95 and requires IVF_PQ (m 32,
// refine 4) and IVF_SQ8 (refine 2) to reach 0.95 at the same nprobe.
//
// Label release_only: one pass (three index builds of 100,000 rows side by side, under a
// minute on two idle cores).
#include <algorithm>
#include <cstdio>
#include <thread>

#include "bench/harness/dataset.h"
#include "bench/harness/ground_truth.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/recall_support.h"
#include "tests/integration/shoald_process.h"

namespace shoal::clustered_recall_test {
namespace {

constexpr size_t kQueries = 1000, kK = 10;
constexpr double kTarget = 0.95;
constexpr uint32_t kNprobeLadder[] = {1, 2, 4, 8, 16, 32, 64};

using testing::LoadDataset;

double Recall(const bench::Dataset& d, const bench::GroundTruth& gt,
              const std::vector<SearchResult>& results) {
  return testing::TieAwareRecall(d, gt, results, kK);
}

double RecallAt(Client& client, const std::string& name, const bench::Dataset& d,
                const bench::GroundTruth& gt, uint32_t nprobe, uint32_t refine) {
  std::vector<std::vector<float>> batch;
  for (size_t q = 0; q < d.nq; ++q) batch.emplace_back(d.query(q), d.query(q) + d.dim);
  auto results =
      client.SearchBatch(name, batch, {.k = kK, .nprobe = nprobe, .refine_factor = refine});
  EXPECT_TRUE(results.ok()) << results.status();
  if (!results.ok()) return 0;
  const double recall = Recall(d, gt, *results);
  std::printf("%s nprobe %u refine %u: recall@10 %.4f\n", name.c_str(), nprobe, refine, recall);
  return recall;
}

TEST(ClusteredRecall, ResidualPqAndSq8MatchFlatsNprobeOnTightClusters) {
  const bench::Dataset d =
      bench::MakeSynthetic({.n = 100000, .dim = 128, .clusters = 1000, .seed = 15}, kQueries);
  const bench::GroundTruth gt = bench::ComputeGroundTruth(d, kK, 2);
  testing::TempDir dir;
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"), {"--cpu-threads", "2"});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  struct Case {
    const char* name;
    IndexType type;
    uint32_t pq_m, refine;
  };
  const Case cases[] = {{"flat", IndexType::kIvfFlat, 0, 0},
                        {"pq", IndexType::kIvfPq, 32, 4},
                        {"sq8", IndexType::kIvfSq8, 0, 2}};
  // Loaded and built side by side: each build trains on one arena thread.
  std::vector<std::thread> builders;
  for (const Case& c : cases) {
    builders.emplace_back([&server, &d, c] {
      Client own(server->addr());
      ASSERT_TRUE(own.CreateCollection({c.name, d.dim, Metric::kL2, {c.type, 0, c.pq_m}}).ok());
      LoadDataset(own, c.name, d);
      auto built = own.BuildIndex(c.name);
      ASSERT_TRUE(built.ok()) << built.status();
      std::printf("%s: %s\n", c.name, built->c_str());
    });
  }
  for (std::thread& t : builders) t.join();
  if (HasFatalFailure() || HasFailure()) return;
  uint32_t nprobe = 0;
  for (uint32_t n : kNprobeLadder) {
    if (RecallAt(client, "flat", d, gt, n, 0) >= kTarget) {
      nprobe = n;
      break;
    }
  }
  ASSERT_GT(nprobe, 0u) << "IVF_FLAT never reached recall@10 " << kTarget;
  for (const Case& c : cases) {
    if (c.type == IndexType::kIvfFlat) continue;
    EXPECT_GE(RecallAt(client, c.name, d, gt, nprobe, c.refine), kTarget)
        << c.name << " at IVF_FLAT's nprobe " << nprobe << ", refine " << c.refine;
  }
  EXPECT_EQ(server->Terminate(), 0);
}

}  // namespace
}  // namespace shoal::clustered_recall_test
