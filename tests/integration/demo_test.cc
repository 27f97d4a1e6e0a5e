// The `make run` demo: shoald --demo loads its file into `fmnist` and builds the IVF index, so
// the first searches run on the IVF engine. A small file stands in for Fashion-MNIST.
#include <fstream>
#include <thread>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal {
namespace {

constexpr int kRows = 2000;
constexpr int32_t kDim = 8;

void WriteFvecs(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < kRows; ++i) {
    out.write(reinterpret_cast<const char*>(&kDim), 4);
    for (int j = 0; j < kDim; ++j) {
      const float v = float((i * 7 + j * 13) % 101);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

// The demo reports SERVING on the health service once it is loaded and indexed.
bool WaitUntilServing(Client& client) {
  for (int i = 0; i < 1200; ++i) {
    auto health = client.Health("fmnist");
    if (health.ok() && *health == HealthStatus::kServing) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(Demo, LoadsThenBuildsTheIvfIndexSoSearchesProbePartitions) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "demo");
  testing::TempDir dir;
  WriteFvecs(dir.Sub("demo.fvecs"));
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"),
                                              {"--demo", "--demo-file", dir.Sub("demo.fvecs")});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  ASSERT_TRUE(WaitUntilServing(client)) << server->log();

  auto info = client.DescribeCollection("fmnist");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_vectors, uint64_t(kRows));
  EXPECT_EQ(info->num_indexed, uint64_t(kRows));
  EXPECT_EQ(info->index_state, "ready");
  auto result = client.Search("fmnist", std::vector<float>(kDim, 50.0f), {.k = 5});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->hits.size(), 5u);
  EXPECT_GT(result->stats.partitions_probed, 0u);  // the IVF engine, not an exact scan
  EXPECT_LT(result->stats.vectors_scanned, uint64_t(kRows));
  EXPECT_NE(server->log().find("demo collection 'fmnist' ready"), std::string::npos);

  // A restart finds it loaded and indexed: serving at once, nothing rebuilt.
  ASSERT_EQ(server->Terminate(), 0);
  server = testing::ShoaldProcess::Start(dir.Sub("data"),
                                         {"--demo", "--demo-file", dir.Sub("demo.fvecs")});
  ASSERT_NE(server, nullptr);
  Client again(server->addr());
  ASSERT_TRUE(WaitUntilServing(again));
  info = again.DescribeCollection("fmnist");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_indexed, uint64_t(kRows));
}

}  // namespace
}  // namespace shoal
