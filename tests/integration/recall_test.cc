// Exact search through the server on real data: a 2000-vector sample of Fashion-MNIST
// (dataset-fashion-mnist, which `make test` installs) against brute force computed here.
#include <algorithm>
#include <cmath>

#include "client/client.h"
#include "dataset/vector_reader.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::recall_test {
namespace {

constexpr char kTrain[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr char kTest[] = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

TEST(Recall, ExactSearchOnFashionMnistEqualsBruteForce) {
  uint32_t dim = 0;
  auto base = dataset::ReadAllVectors(kTrain, 2000, &dim);
  ASSERT_TRUE(base.ok()) << base.status() << " (install dataset-fashion-mnist: make test does)";
  auto queries = dataset::ReadAllVectors(kTest, 200, &dim);
  ASSERT_TRUE(queries.ok()) << queries.status();
  ASSERT_EQ(dim, 784u);
  const size_t n = base->size() / dim, nq = queries->size() / dim, k = 10;

  testing::TempDir dir;
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"), {"--cpu-threads", "2"});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  ASSERT_TRUE(client.CreateCollection({"fm", dim, Metric::kL2}).ok());
  auto writer = client.OpenUpsertStream("fm");
  ASSERT_TRUE(writer.ok());
  for (size_t first = 0; first < n; first += 500) {
    std::vector<Point> points;
    for (size_t i = first; i < std::min(n, first + 500); ++i) {
      points.push_back({i, {base->begin() + i * dim, base->begin() + (i + 1) * dim}, {}});
    }
    ASSERT_TRUE((*writer)->Write(points).ok());
  }
  ASSERT_EQ(*(*writer)->Finish(), n);

  std::vector<std::vector<float>> batch;
  for (size_t q = 0; q < nq; ++q) {
    batch.emplace_back(queries->begin() + q * dim, queries->begin() + (q + 1) * dim);
  }
  auto results = client.SearchBatch("fm", batch, {.k = uint32_t(k)});
  ASSERT_TRUE(results.ok()) << results.status();

  size_t found = 0;
  for (size_t q = 0; q < nq; ++q) {
    std::vector<double> dist(n);
    for (size_t i = 0; i < n; ++i) {
      double d = 0;
      for (size_t j = 0; j < dim; ++j) {
        const double diff = double(batch[q][j]) - (*base)[i * dim + j];
        d += diff * diff;
      }
      dist[i] = d;
    }
    std::vector<double> sorted = dist;
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end());
    const double kth = sorted[k - 1];
    ASSERT_EQ((*results)[q].hits.size(), k);
    // Tie-aware: a hit counts when its true distance is within the true k-th distance.
    for (const Hit& hit : (*results)[q].hits) {
      if (dist[hit.id] <= kth) ++found;
      EXPECT_NEAR(hit.distance, dist[hit.id], 1e-3 * dist[hit.id] + 1e-3);
    }
  }
  const double recall = double(found) / double(nq * k);
  EXPECT_EQ(recall, 1.0);
  std::printf("recall@10 on %zu Fashion-MNIST queries over %zu vectors: %.4f\n", nq, n, recall);
}

}  // namespace
}  // namespace shoal::recall_test
