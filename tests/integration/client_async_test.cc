// The asynchronous C++ SDK against the real shoald: SearchAsync in its callback and future
// forms, SearchMany's ordering and errors, and many callers sharing one Client.
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal::client_async_test {
namespace {

using testing::ShoaldProcess;

constexpr int kPoints = 500;
constexpr uint32_t kDim = 8;

// Point i is (i, i, ..., i): its own nearest neighbour under L2.
std::vector<float> Vec(int i) { return std::vector<float>(kDim, float(i)); }

class ClientAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = ShoaldProcess::Start(dir_.Sub("data"), {"--cpu-threads", "2"});
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr());
    ASSERT_TRUE(client_->CreateCollection({"pts", kDim, Metric::kL2, {IndexType::kFlat}}).ok());
    std::vector<Point> points;
    for (int i = 0; i < kPoints; ++i) points.push_back({uint64_t(i), Vec(i), {}});
    auto n = client_->Upsert("pts", points);
    ASSERT_TRUE(n.ok()) << n.status();
  }
  testing::TempDir dir_;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientAsyncTest, SearchAsyncCallbackRunsOnceWithTheNeighbours) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "SearchAsync callback");
  absl::Notification done;
  std::atomic<int> calls{0};
  absl::StatusOr<SearchResult> got;
  client_->SearchAsync("pts", Vec(42), {.k = 3}, [&](absl::StatusOr<SearchResult> r) {
    got = std::move(r);
    calls++;
    done.Notify();
  });
  done.WaitForNotification();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->hits.size(), 3u);
  EXPECT_EQ(got->hits[0].id, 42u);
  EXPECT_EQ(got->hits[0].distance, 0.0f);
  EXPECT_EQ(got->stats.vectors_scanned, uint64_t(kPoints));
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(ClientAsyncTest, SearchAsyncFutureCarriesTheServersError) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "SearchAsync future");
  auto ok = client_->SearchAsync("pts", Vec(7), {.k = 1});
  auto missing = client_->SearchAsync("nope", Vec(7), {.k = 1});
  auto wrong_dim = client_->SearchAsync("pts", {1, 2}, {.k = 1});
  absl::StatusOr<SearchResult> r = ok.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits[0].id, 7u);
  EXPECT_TRUE(absl::IsNotFound(missing.get().status()));
  absl::Status bad = wrong_dim.get().status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_THAT(bad.message(), ::testing::HasSubstr("queries[0].values"));
}

TEST_F(ClientAsyncTest, SearchManyAnswersEveryQueryInOrder) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "SearchMany order");
  std::vector<std::vector<float>> queries;
  for (int i = kPoints - 1; i >= 0; --i) queries.push_back(Vec(i));  // reversed ids
  auto results = client_->SearchMany("pts", queries, {.k = 2}, {.batch = 7, .in_flight = 3});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), queries.size());
  for (size_t q = 0; q < queries.size(); ++q) {
    ASSERT_EQ((*results)[q].hits.size(), 2u);
    EXPECT_EQ((*results)[q].hits[0].id, uint64_t(kPoints - 1 - int(q))) << "query " << q;
  }
}

TEST_F(ClientAsyncTest, SearchManyFailsWithTheFirstBadRequestsError) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "SearchMany error");
  std::vector<std::vector<float>> queries;
  for (int i = 0; i < 100; ++i) queries.push_back(Vec(i));
  queries[57] = {1, 2, 3};  // wrong dimension: its batch is refused
  auto results = client_->SearchMany("pts", queries, {.k = 1}, {.batch = 10, .in_flight = 2});
  ASSERT_FALSE(results.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(results.status())) << results.status();
  auto missing = client_->SearchMany("nope", queries, {.k = 1}, {.batch = 10, .in_flight = 4});
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
}

TEST_F(ClientAsyncTest, OneClientIsSharedByManyThreads) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "shared client");
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 100; i += 4) {
        auto sync = client_->Search("pts", Vec(i), {.k = 1});
        auto async = client_->SearchAsync("pts", Vec(i + 1), {.k = 1}).get();
        if (!sync.ok() || sync->hits[0].id != uint64_t(i)) wrong++;
        if (!async.ok() || async->hits[0].id != uint64_t(i + 1)) wrong++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(ClientAsyncTest, DestroyingTheClientWaitsForItsCallbacks) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "~Client waits");
  auto client = std::make_unique<Client>(server_->addr());
  std::atomic<int> finished{0};
  for (int i = 0; i < 20; ++i) {
    client->SearchAsync("pts", Vec(i), {.k = 1},
                        [&finished](absl::StatusOr<SearchResult>) { finished++; });
  }
  client.reset();
  EXPECT_EQ(finished.load(), 20);
}

}  // namespace
}  // namespace shoal::client_async_test
