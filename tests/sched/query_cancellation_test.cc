// Cancellation reaches the I/O queue: a query cancelled while its partition reads wait in the
// IoScheduler takes them out of the queue at once (answered CANCELLED), through the real
// Segment (PartitionSource) and the real query engine. Completions are held (HeldIoBackend) and
// CPU tasks run on a ManualExecutor, so every step happens when the test says.
#include <random>

#include "core/base/cancel.h"
#include "core/exec/manual_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/segment.h"
#include "storage/collection/segment_writer.h"
#include "storage/sched/io_scheduler.h"
#include "tests/fakes/held_io_backend.h"
#include "tests/fakes/io_backend_skip.h"
#include "tests/fakes/random_segment.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::query_cancellation_test {
namespace {

constexpr uint32_t kDim = 8, kNlist = 16;
constexpr size_t kRows = 2000;

class QueryCancellationTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    std::mt19937 rng(7);
    ASSERT_TRUE(
        testing::WriteRandomSegment(dir_.Sub("seg"), rng, kRows, kDim, kNlist, &rows_).ok());

    IoSchedulerOptions options;
    // Two reads in flight, partitions never merged: most of a burst's reads wait in the queue.
    options.limits = {
        .max_requests_in_flight = 2, .max_bytes_in_flight = 1 << 30, .max_coalesce_gap = 0};
    options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
      auto backend = testing::HeldIoBackend::Make(GetParam(), std::move(cb), held_state_);
      if (backend.ok()) held_ = static_cast<testing::HeldIoBackend*>(backend->get());
      return backend;
    };
    auto scheduler = IoScheduler::Create(options);
    SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), scheduler.status());
    scheduler_ = *std::move(scheduler);
    auto segment =
        Segment::Open(DefaultFileSystem(), dir_.Sub("seg"), 1, scheduler_.get(), &cache_);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
  }

  struct Query {
    std::shared_ptr<core::CancelToken> token = std::make_shared<core::CancelToken>();
    bool answered = false;
    absl::StatusOr<std::vector<core::QueryResult>> result = absl::UnknownError("not answered");
  };

  // Starts one single-query search that probes every partition (so its answer is exact).
  void Start(Query* q, uint32_t seed) {
    core::IvfSearchRequest r;
    r.segments.push_back(segment_->Ref(nullptr));
    r.queries = testing::RandomQuery(seed, kDim);
    r.num_queries = 1;
    r.dim = kDim;
    r.k = 5;
    r.nprobe = kNlist;
    r.cancel = q->token;
    core::IvfSearch(cpu_, std::move(r), [q](auto result) {
      q->result = std::move(result);
      q->answered = true;
    });
  }

  // The exact top-5 ids for the query Start() built from `seed`.
  std::vector<uint64_t> Exact(uint32_t seed) {
    return testing::ExactTopIds(rows_, kDim, testing::RandomQuery(seed, kDim), 5);
  }

  // Runs CPU tasks and releases held completions until every query has answered.
  void Drain(std::vector<Query>& queries) {
    auto all_answered = [&] {
      for (const Query& q : queries) {
        if (!q.answered) return false;
      }
      return true;
    };
    while (true) {
      cpu_.RunAll();
      if (all_answered()) break;
      if (held_->ReleaseAll() == 0) held_->WaitHeld(1);
    }
  }

  // Releases held reads until none is pending (reads that answered queries have left).
  void DrainReads() {
    while (scheduler_->pending() > 0) {
      if (held_->ReleaseAll() == 0) held_->WaitHeld(1);
      cpu_.RunAll();
    }
  }

  testing::TempDir dir_;
  SegmentRows rows_;
  PartitionCache cache_{64 << 20};
  std::shared_ptr<testing::HeldIoBackend::State> held_state_ =
      std::make_shared<testing::HeldIoBackend::State>();
  testing::HeldIoBackend* held_ = nullptr;
  std::unique_ptr<IoScheduler> scheduler_;
  std::shared_ptr<Segment> segment_;
  core::ManualExecutor cpu_;
};

TEST_P(QueryCancellationTest, ACancelledBurstLeavesNoReadQueuedAndEveryQueryAnswersCancelled) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "cancelled burst");
  std::vector<Query> queries(20);
  for (size_t i = 0; i < queries.size(); ++i) Start(&queries[i], uint32_t(i));
  cpu_.RunAll();  // route every query: their fetches are issued, most wait in the queue
  ASSERT_GT(scheduler_->queued(), 0u);
  for (Query& q : queries) q.token->Cancel();
  // Nothing ran on the CPU and no completion arrived: the cancellations alone emptied the queue.
  EXPECT_EQ(scheduler_->queued(), 0u);
  EXPECT_GT(scheduler_->stats().cancelled, 0u);
  Drain(queries);
  for (const Query& q : queries) {
    EXPECT_EQ(q.result.status().code(), absl::StatusCode::kCancelled) << q.result.status();
  }
  // A cancelled query answers without waiting for a read already at the disk: that read belongs
  // to its shared-scan entry (core/index/scan_share.h), which drops the data when it answers.
  DrainReads();
  EXPECT_EQ(cache_.stats().pinned_bytes, 0u);
}

// Queries share a partition's load through the cache; the load carries the id of the query that
// started it. Cancelling that query must not fail the others: they read it again themselves.
TEST_P(QueryCancellationTest, CancellingSomeQueriesLeavesTheOthersExact) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "half cancelled");
  std::vector<Query> queries(20);
  for (size_t i = 0; i < queries.size(); ++i) Start(&queries[i], uint32_t(i));
  cpu_.RunAll();
  ASSERT_GT(scheduler_->queued(), 0u);
  for (size_t i = 0; i < queries.size(); i += 2) queries[i].token->Cancel();
  Drain(queries);
  for (size_t i = 0; i < queries.size(); ++i) {
    const Query& q = queries[i];
    if (i % 2 == 0) {
      EXPECT_EQ(q.result.status().code(), absl::StatusCode::kCancelled) << q.result.status();
      continue;
    }
    ASSERT_TRUE(q.result.ok()) << i << ": " << q.result.status();
    std::vector<uint64_t> ids;
    for (const core::Neighbor& n : (*q.result)[0].neighbors) ids.push_back(n.id);
    EXPECT_EQ(ids, Exact(uint32_t(i))) << i;
  }
  EXPECT_EQ(scheduler_->pending(), 0u);
  EXPECT_EQ(cache_.stats().pinned_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, QueryCancellationTest,
                         ::testing::Values(IoBackendKind::kPread, IoBackendKind::kUring),
                         [](const auto& info) {
                           return info.param == IoBackendKind::kUring ? "Uring" : "Pread";
                         });

}  // namespace
}  // namespace shoal::storage::query_cancellation_test
