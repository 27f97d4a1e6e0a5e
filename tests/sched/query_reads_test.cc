// A cold query's partition reads reach the disk together (issue #16 part 3): through the real
// query engine, Segment and IoScheduler, a query's fetches arrive at the backend in one
// submission — nearest first up to the depth limit, adjacent ranges coalesced — instead of one
// submission per read as they trickle in. CPU tasks run on a ManualExecutor; a recording
// backend sees every Submit().
#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "core/exec/manual_executor.h"
#include "core/index/distance.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/segment.h"
#include "storage/collection/segment_writer.h"
#include "storage/sched/io_scheduler.h"
#include "tests/fakes/io_backend_skip.h"
#include "tests/fakes/random_segment.h"
#include "tests/fakes/recording_io_backend.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::query_reads_test {
namespace {

constexpr uint32_t kDim = 8, kNlist = 16;
constexpr size_t kRows = 2000;

class QueryReadsTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    std::mt19937 rng(11);
    ASSERT_TRUE(
        testing::WriteRandomSegment(dir_.Sub("seg"), rng, kRows, kDim, kNlist, &rows_).ok());
    std::normal_distribution<float> normal;
    query_.resize(kDim);
    for (float& x : query_) x = normal(rng);
  }

  // Opens the segment over a scheduler with `limits` whose backend records its submissions.
  void Open(IoLimits limits) {
    IoSchedulerOptions options;
    options.limits = limits;
    options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
      auto real = NewIoBackend(GetParam(), std::move(cb), 64);
      if (!real.ok()) return real.status();
      auto recording = std::make_unique<testing::RecordingIoBackend>(*std::move(real));
      recorder_ = recording.get();
      return std::unique_ptr<IoBackend>(std::move(recording));
    };
    auto scheduler = IoScheduler::Create(options);
    SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), scheduler.status());
    scheduler_ = *std::move(scheduler);
    auto segment =
        Segment::Open(DefaultFileSystem(), dir_.Sub("seg"), 1, scheduler_.get(), &cache_);
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
  }

  // Starts a search probing every partition and runs its route task (which issues the fetches).
  void StartAndRoute() {
    core::IvfSearchRequest r;
    r.segments.push_back(segment_->Ref(nullptr));
    r.queries = query_;
    r.num_queries = 1;
    r.dim = kDim;
    r.k = 5;
    r.nprobe = kNlist;
    core::IvfSearch(cpu_, std::move(r), [this](auto result) {
      result_ = std::move(result);
      answered_ = true;
    });
    ASSERT_TRUE(cpu_.RunOne());  // the route task
  }

  // Runs CPU tasks as completions arrive until the search has answered.
  void Finish() {
    testing::Watchdog watchdog(std::chrono::seconds(60), "QueryReadsTest::Finish");
    while (!answered_) {
      if (cpu_.RunAll() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(result_.ok()) << result_.status();
    EXPECT_EQ((*result_)[0].neighbors.size(), 5u);
    EXPECT_EQ((*result_)[0].stats.partitions_probed, NonEmpty().size());
  }

  // Offsets of the non-empty partitions, nearest to the query first.
  std::vector<uint64_t> NonEmpty() const {
    const IvfMeta& meta = segment_->meta();
    std::vector<float> dist(kNlist);
    core::L2SqrMany(query_.data(), meta.model.centroids.data(), kNlist, kDim, dist.data());
    std::vector<uint32_t> order(kNlist);
    for (uint32_t i = 0; i < kNlist; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return dist[a] < dist[b]; });
    std::vector<uint64_t> offsets;
    for (uint32_t p : order) {
      if (meta.partitions[p].count > 0) offsets.push_back(meta.partitions[p].offset);
    }
    return offsets;
  }

  testing::TempDir dir_;
  SegmentRows rows_;
  std::vector<float> query_;
  PartitionCache cache_{64 << 20};
  testing::RecordingIoBackend* recorder_ = nullptr;
  std::unique_ptr<IoScheduler> scheduler_;
  std::shared_ptr<Segment> segment_;
  core::ManualExecutor cpu_;
  bool answered_ = false;
  absl::StatusOr<std::vector<core::QueryResult>> result_ = absl::UnknownError("not answered");
};

TEST_P(QueryReadsTest, AQuerysReadsReachTheBackendInOneSubmissionNearestFirst) {
  // No coalescing (max_request_bytes 1): one read per partition.
  Open({.max_requests_in_flight = 64, .max_bytes_in_flight = 1 << 30, .max_request_bytes = 1});
  if (!scheduler_) return;
  StartAndRoute();
  const auto submissions = recorder_->submissions();
  ASSERT_FALSE(submissions.empty());
  EXPECT_EQ(submissions[0], NonEmpty());  // every read, in one submission, nearest first
  Finish();
  EXPECT_EQ(recorder_->submissions().size(), 1u);
}

TEST_P(QueryReadsTest, TheDepthLimitCapsTheFirstSubmissionAtTheNearestReads) {
  Open({.max_requests_in_flight = 4, .max_bytes_in_flight = 1 << 30, .max_request_bytes = 1});
  if (!scheduler_) return;
  StartAndRoute();
  const auto submissions = recorder_->submissions();
  ASSERT_FALSE(submissions.empty());
  const std::vector<uint64_t> nearest = NonEmpty();
  EXPECT_EQ(submissions[0], std::vector<uint64_t>(nearest.begin(), nearest.begin() + 4));
  Finish();
  size_t reads = 0;
  for (const auto& s : recorder_->submissions()) reads += s.size();
  EXPECT_EQ(reads, nearest.size());
}

TEST_P(QueryReadsTest, AQuerysAdjacentPartitionsAreCoalescedIntoFewerReads) {
  // Every partition is probed, and partitions lie back to back in lists.dat: queued together,
  // neighbours merge (one by one as they trickled in, they never could).
  Open({.max_requests_in_flight = 64,
        .max_bytes_in_flight = 1 << 30,
        .max_request_bytes = 16 << 20});
  if (!scheduler_) return;
  StartAndRoute();
  Finish();
  size_t reads = 0;
  for (const auto& s : recorder_->submissions()) reads += s.size();
  EXPECT_LT(reads, NonEmpty().size());
}

INSTANTIATE_TEST_SUITE_P(Backends, QueryReadsTest,
                         ::testing::Values(IoBackendKind::kUring, IoBackendKind::kPread),
                         [](const auto& info) {
                           return info.param == IoBackendKind::kUring ? "Uring" : "Pread";
                         });

}  // namespace
}  // namespace shoal::storage::query_reads_test
