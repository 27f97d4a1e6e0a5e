#include "core/index/flat_search.h"

#include <future>
#include <random>

#include "core/exec/manual_executor.h"
#include "core/exec/tbb_executor.h"
#include "core/index/distance.h"
#include "gtest/gtest.h"
#include "tests/fakes/watchdog.h"

namespace shoal::core {
namespace {

// A data set split into several blocks, with optional tombstones.
struct Data {
  size_t dim;
  std::vector<std::vector<float>> vectors;  // one per block
  std::vector<std::vector<uint64_t>> ids;
  std::vector<std::unique_ptr<std::atomic<uint8_t>[]>> dead;

  Data(size_t dim, std::vector<size_t> block_rows, uint32_t seed) : dim(dim) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    uint64_t next = 100;
    for (size_t rows : block_rows) {
      vectors.emplace_back(rows * dim);
      for (float& x : vectors.back()) x = dist(rng);
      ids.emplace_back();
      for (size_t i = 0; i < rows; ++i) ids.back().push_back(next++);
      dead.emplace_back(new std::atomic<uint8_t>[rows]);
      for (size_t i = 0; i < rows; ++i) dead.back()[i] = 0;
    }
  }

  FlatView View() const {
    FlatView view;
    view.dim = dim;
    for (size_t b = 0; b < vectors.size(); ++b) {
      view.blocks.push_back({vectors[b].data(), ids[b].data(), dead[b].get(), ids[b].size()});
    }
    return view;
  }

  // Brute force in double precision, tie-broken by id.
  std::vector<uint64_t> Exact(const float* q, size_t k, Metric metric) const {
    std::vector<std::pair<double, uint64_t>> all;
    for (size_t b = 0; b < vectors.size(); ++b) {
      for (size_t i = 0; i < ids[b].size(); ++i) {
        if (dead[b][i]) continue;
        double d = 0;
        for (size_t j = 0; j < dim; ++j) {
          const double x = vectors[b][i * dim + j];
          d += metric == Metric::kL2 ? (q[j] - x) * (q[j] - x) : -q[j] * x;
        }
        all.push_back({d, ids[b][i]});
      }
    }
    std::sort(all.begin(), all.end());
    std::vector<uint64_t> out;
    for (size_t i = 0; i < std::min(k, all.size()); ++i) out.push_back(all[i].second);
    return out;
  }
};

std::vector<float> Queries(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> q(n * dim);
  for (float& x : q) x = dist(rng);
  return q;
}

absl::StatusOr<std::vector<QueryResult>> RunOn(Executor& executor, FlatSearchRequest req) {
  std::promise<absl::StatusOr<std::vector<QueryResult>>> promise;
  auto future = promise.get_future();
  FlatSearch(executor, std::move(req),
             [&promise](absl::StatusOr<std::vector<QueryResult>> r) { promise.set_value(r); });
  if (auto* manual = dynamic_cast<ManualExecutor*>(&executor)) manual->RunAll();
  return future.get();
}

TEST(FlatSearch, MatchesBruteForceAcrossBlocksAndMetrics) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "FlatSearch");
  Data data(37, {1000, 20000, 1, 15000}, 1);
  TbbExecutor executor(2);
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    FlatSearchRequest req;
    req.view = data.View();
    req.num_queries = 40;  // more than one query group
    req.queries = Queries(req.num_queries, data.dim, 2);
    req.k = 10;
    req.metric = metric;
    auto results = RunOn(executor, std::move(req));
    ASSERT_TRUE(results.ok()) << results.status();
    ASSERT_EQ(results->size(), 40u);
    auto queries = Queries(40, data.dim, 2);
    for (size_t q = 0; q < 40; ++q) {
      std::vector<uint64_t> got;
      for (const Neighbor& n : (*results)[q].neighbors) got.push_back(n.id);
      EXPECT_EQ(got, data.Exact(queries.data() + q * data.dim, 10, metric)) << "query " << q;
      EXPECT_EQ((*results)[q].stats.vectors_scanned, 36001u);
    }
  }
}

TEST(FlatSearch, ReportsDistancesInTheMetricsConvention) {
  Data data(8, {100}, 3);
  ManualExecutor executor;
  FlatSearchRequest req;
  req.view = data.View();
  req.num_queries = 1;
  req.queries.assign(data.vectors[0].begin(), data.vectors[0].begin() + 8);  // row 0 itself
  req.k = 3;
  auto results = RunOn(executor, req);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].neighbors[0].id, 100u);
  EXPECT_FLOAT_EQ((*results)[0].neighbors[0].distance, 0.0f);
  EXPECT_LE((*results)[0].neighbors[0].distance, (*results)[0].neighbors[1].distance);

  req.metric = Metric::kInnerProduct;
  results = RunOn(executor, req);
  ASSERT_TRUE(results.ok());
  EXPECT_GE((*results)[0].neighbors[0].distance, (*results)[0].neighbors[1].distance);
}

TEST(FlatSearch, SkipsDeadRows) {
  Data data(4, {50}, 4);
  ManualExecutor executor;
  FlatSearchRequest req;
  req.view = data.View();
  req.num_queries = 1;
  req.queries.assign(data.vectors[0].begin(), data.vectors[0].begin() + 4);
  req.k = 50;
  data.dead[0][0] = 1;
  data.dead[0][7] = 1;
  auto results = RunOn(executor, req);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ((*results)[0].neighbors.size(), 48u);
  for (const Neighbor& n : (*results)[0].neighbors) {
    EXPECT_NE(n.id, 100u);
    EXPECT_NE(n.id, 107u);
  }
}

TEST(FlatSearch, EmptyViewAndKLargerThanRowsAnswer) {
  ManualExecutor executor;
  FlatSearchRequest req;
  req.view.dim = 3;
  req.num_queries = 2;
  req.queries.assign(6, 1.0f);
  req.k = 5;
  auto results = RunOn(executor, req);
  ASSERT_TRUE(results.ok());
  ASSERT_EQ(results->size(), 2u);
  EXPECT_TRUE((*results)[0].neighbors.empty());
}

TEST(FlatSearch, CancelledTokenStopsTheSearch) {
  Data data(16, {40000}, 5);
  ManualExecutor executor;
  FlatSearchRequest req;
  req.view = data.View();
  req.num_queries = 1;
  req.queries = Queries(1, 16, 6);
  auto token = std::make_shared<CancelToken>();
  token->Cancel();
  req.cancel = token;
  auto results = RunOn(executor, req);
  EXPECT_EQ(results.status().code(), absl::StatusCode::kCancelled);

  req.cancel = std::make_shared<CancelToken>(CancelToken::Clock::now());
  results = RunOn(executor, req);
  EXPECT_EQ(results.status().code(), absl::StatusCode::kDeadlineExceeded);
}

// Many concurrent searches on a one-thread arena all complete: tasks never wait on each
// other, so a single thread is always enough to make progress (I-1, I-3).
TEST(FlatSearch, ManyConcurrentSearchesCompleteOnOneThread) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "concurrent FlatSearch");
  Data data(32, {5000, 5000}, 8);
  TbbExecutor executor(1);
  std::atomic<int> done{0};
  std::vector<std::vector<uint64_t>> first(200);
  auto queries = Queries(200, 32, 9);
  for (int i = 0; i < 200; ++i) {
    FlatSearchRequest req;
    req.view = data.View();
    req.num_queries = 1;
    req.queries.assign(queries.begin() + i * 32, queries.begin() + (i + 1) * 32);
    req.k = 5;
    FlatSearch(executor, std::move(req), [&, i](absl::StatusOr<std::vector<QueryResult>> r) {
      ASSERT_TRUE(r.ok());
      for (const Neighbor& n : (*r)[0].neighbors) first[i].push_back(n.id);
      done.fetch_add(1);
    });
  }
  executor.WaitIdle();
  EXPECT_EQ(done.load(), 200);
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ(first[i], data.Exact(queries.data() + i * 32, 5, Metric::kL2));
}

}  // namespace
}  // namespace shoal::core
