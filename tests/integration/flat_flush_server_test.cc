// A FLAT collection past collection.flush_rows flushes in the background (issue #11 §2): the
// real shoald writes an exact segment, cuts the WAL, and answers identically after a restart.
#include <filesystem>
#include <random>
#include <thread>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal::flat_flush_server_test {
namespace {

using testing::ShoaldProcess;

uint64_t WalBytes(const std::string& data) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(data + "/collections/f/wal")) {
    total += e.file_size();
  }
  return total;
}

TEST(FlatFlushServer, AFlatCollectionPastFlushRowsHasASegmentAShortWalAndAnswersAfterRestart) {
  testing::TempDir dir;
  const std::string data = dir.Sub("data");
  const std::vector<std::string> flags = {"--flush-rows", "1000"};
  auto server = ShoaldProcess::Start(data, flags);
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  ASSERT_TRUE(client.CreateCollection({.name = "f", .dim = 16}).ok());  // INDEX_FLAT
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> queries(20, std::vector<float>(16));
  for (auto& q : queries)
    for (float& x : q) x = u(rng);
  // Unary upserts: each one past flush_rows queues a background flush.
  for (uint64_t first = 0; first < 5000; first += 500) {
    std::vector<Point> batch;
    for (uint64_t id = first; id < first + 500; ++id) {
      Point p{id, std::vector<float>(16)};
      for (float& x : p.vector) x = u(rng);
      batch.push_back(std::move(p));
    }
    ASSERT_TRUE(client.Upsert("f", batch).ok());
  }
  {
    testing::Watchdog watchdog(std::chrono::seconds(60), "background flush of a FLAT collection");
    while (client.DescribeCollection("f")->num_indexed < 4000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  auto info = client.DescribeCollection("f");
  ASSERT_TRUE(info.ok());
  EXPECT_GE(info->num_segments, 1u);
  EXPECT_EQ(info->num_vectors, 5000u);
  // 5000 rows of 16 floats are ~400 KB in the WAL; flushed, at most the last 1000 remain.
  EXPECT_LT(WalBytes(data), 120000u);
  auto before = client.SearchBatch("f", queries, {.k = 10});
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(server->Terminate(), 0);
  server = ShoaldProcess::Start(data, flags);
  ASSERT_NE(server, nullptr);
  Client again(server->addr());
  auto after = again.SearchBatch("f", queries, {.k = 10});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), before->size());
  for (size_t q = 0; q < after->size(); ++q) {
    ASSERT_EQ((*after)[q].hits.size(), 10u);
    for (size_t i = 0; i < 10; ++i) {
      EXPECT_EQ((*after)[q].hits[i].id, (*before)[q].hits[i].id);
      EXPECT_EQ((*after)[q].hits[i].distance, (*before)[q].hits[i].distance);
    }
  }
}

}  // namespace
}  // namespace shoal::flat_flush_server_test
