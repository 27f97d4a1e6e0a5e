// Partitions read past a full cache (I-4): through the real query engine, Segment, cache and
// IoScheduler, the bytes that queries hold uncached stay within the process-wide
// UncachedBudget (cache.uncached_bytes) however many queries run, every query still answers
// exactly, and a partition cut from a coalesced read holds only its own bytes. Completions are
// held by the test (HeldIoBackend) and CPU tasks run on a ManualExecutor, so every figure is
// read at a quiet point.
#include <algorithm>
#include <chrono>
#include <random>

#include "core/exec/manual_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/segment.h"
#include "storage/io/aligned_buffer.h"
#include "storage/sched/io_scheduler.h"
#include "tests/fakes/held_io_backend.h"
#include "tests/fakes/io_backend_skip.h"
#include "tests/fakes/random_segment.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::uncached_reads_test {
namespace {

constexpr uint32_t kDim = 32, kNlist = 16;
constexpr size_t kRows = 4000;
constexpr uint64_t kTinyCache = 4096;  // smaller than any partition: every fetch is refused

// Bytes of I/O buffers alive and not idle in a pool: what partitions pinned by queries hold.
uint64_t Held() { return AlignedBuffer::live_bytes() - BufferPool::idle_bytes_all(); }

class UncachedReadsTest : public ::testing::TestWithParam<IoBackendKind> {
 protected:
  void SetUp() override {
    std::mt19937 rng(5);
    ASSERT_TRUE(
        testing::WriteRandomSegment(dir_.Sub("seg"), rng, kRows, kDim, kNlist, &rows_).ok());
  }

  // Opens the segment over a cache of kTinyCache bytes with `uncached_bytes` of UncachedBudget.
  void Open(uint64_t uncached_bytes, IoLimits limits) {
    cache_ = std::make_unique<PartitionCache>(kTinyCache, uncached_bytes);
    IoSchedulerOptions options;
    options.limits = limits;
    options.make_backend = [&](IoCallback cb) -> absl::StatusOr<std::unique_ptr<IoBackend>> {
      auto backend = testing::HeldIoBackend::Make(GetParam(), std::move(cb), held_state_);
      if (backend.ok()) held_ = static_cast<testing::HeldIoBackend*>(backend->get());
      return backend;
    };
    auto scheduler = IoScheduler::Create(options);
    SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), scheduler.status());
    scheduler_ = *std::move(scheduler);
    auto segment =
        Segment::Open(DefaultFileSystem(), dir_.Sub("seg"), 1, scheduler_.get(), cache_.get());
    ASSERT_TRUE(segment.ok()) << segment.status();
    segment_ = *std::move(segment);
    for (const PartitionExtent& e : segment_->meta().partitions) {
      if (e.count == 0) continue;
      largest_ = std::max(largest_, CachedBytes(e.length));
      all_partitions_ += CachedBytes(e.length);
      ++non_empty_;
    }
  }

  void TearDown() override {
    segment_.reset();
    scheduler_.reset();
    cache_.reset();
  }

  struct Query {
    bool answered = false;
    absl::StatusOr<std::vector<core::QueryResult>> result = absl::UnknownError("not answered");
  };

  static std::vector<float> QueryVector(uint32_t seed) { return testing::RandomQuery(seed, kDim); }

  // Starts one single-query search probing every partition (so its answer is exact).
  void Start(Query* q, uint32_t seed, size_t batch_partitions = 16) {
    core::IvfSearchRequest r;
    r.segments.push_back(segment_->Ref(nullptr));
    r.queries = QueryVector(seed);
    r.num_queries = 1;
    r.dim = kDim;
    r.k = 5;
    r.nprobe = kNlist;
    r.options.batch_partitions = batch_partitions;
    core::IvfSearch(cpu_, std::move(r), [q](auto result) {
      q->result = std::move(result);
      q->answered = true;
    });
  }

  std::vector<uint64_t> Exact(uint32_t seed) const {
    return testing::ExactTopIds(rows_, kDim, QueryVector(seed), 5);
  }

  // Delivers completions on this thread until no read is queued or in flight. CPU tasks are
  // not run, so no partition is scanned (or unpinned) meanwhile.
  void Quiesce() {
    while (scheduler_->pending() > 0) {
      held_->WaitHeld(1);
      held_->ReleaseAll();
    }
  }

  // Runs CPU tasks and releases completions until every query has answered.
  void Drain(std::vector<Query>& queries) {
    auto all_answered = [&] {
      return std::all_of(queries.begin(), queries.end(), [](const Query& q) { return q.answered; });
    };
    while (true) {
      cpu_.RunAll();
      if (all_answered()) break;
      if (held_->ReleaseAll() == 0) held_->WaitHeld(1);
    }
  }

  void ExpectExact(const std::vector<Query>& queries, uint32_t first_seed) {
    for (size_t i = 0; i < queries.size(); ++i) {
      ASSERT_TRUE(queries[i].result.ok()) << queries[i].result.status();
      std::vector<uint64_t> ids;
      for (const auto& n : (*queries[i].result)[0].neighbors) ids.push_back(n.id);
      EXPECT_EQ(ids, Exact(first_seed + uint32_t(i))) << "query " << i;
    }
  }

  testing::TempDir dir_;
  SegmentRows rows_;
  std::unique_ptr<PartitionCache> cache_;
  std::shared_ptr<testing::HeldIoBackend::State> held_state_ =
      std::make_shared<testing::HeldIoBackend::State>();
  testing::HeldIoBackend* held_ = nullptr;
  std::unique_ptr<IoScheduler> scheduler_;
  std::shared_ptr<Segment> segment_;
  core::ManualExecutor cpu_;
  uint64_t largest_ = 0, all_partitions_ = 0;
  size_t non_empty_ = 0;
};

// No coalescing: each read lands in its own exact buffer, so live buffer bytes are the bytes
// that queries hold.
constexpr IoLimits kOneReadPerPartition = {.max_request_bytes = 1, .max_coalesce_gap = 0};

TEST_P(UncachedReadsTest, ManyQueriesPastAFullCacheHoldNoMoreThanTheProcessBudget) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "uncached budget");
  Open(/*uncached_bytes=*/160 << 10, kOneReadPerPartition);
  if (!scheduler_) return;
  const uint64_t before = Held();
  std::vector<Query> queries(8);
  for (size_t i = 0; i < queries.size(); ++i) Start(&queries[i], 100 + uint32_t(i));
  cpu_.RunAll();  // the route tasks: every query asks for every partition
  Quiesce();      // every read that may start has landed; nothing is scanned yet

  // Without the budget each query would hold all of its partitions (8 x all of them). With it:
  // the budget, plus the oldest query's one read past it.
  const uint64_t held = Held() - before;
  EXPECT_LE(held, (160u << 10) + largest_);
  EXPECT_LT(held, queries.size() * all_partitions_ / 2);
  EXPECT_GT(cache_->uncached().stats().waiting, 0u);
  EXPECT_LE(cache_->uncached().stats().held_bytes, (160u << 10) + largest_);

  Drain(queries);
  ExpectExact(queries, 100);
  EXPECT_EQ(cache_->uncached().stats().held_bytes, 0u);
  EXPECT_EQ(cache_->uncached().stats().waiting, 0u);
  EXPECT_EQ(Held(), before);
}

TEST_P(UncachedReadsTest, ABudgetSmallerThanOnePartitionStillAnswersEveryQuery) {
  // I-3 with the budget: one CPU slot, a cache and a budget smaller than one partition.
  testing::Watchdog watchdog(std::chrono::seconds(60), "tiny uncached budget");
  Open(/*uncached_bytes=*/4096, kOneReadPerPartition);
  if (!scheduler_) return;
  std::vector<Query> queries(12);
  for (size_t i = 0; i < queries.size(); ++i) Start(&queries[i], 200 + uint32_t(i));
  Drain(queries);
  ExpectExact(queries, 200);
  const UncachedBudgetStats stats = cache_->uncached().stats();
  EXPECT_EQ(stats.granted, stats.forced);  // every read went past the budget, one at a time
  EXPECT_EQ(stats.granted, queries.size() * non_empty_);
  EXPECT_EQ(stats.held_bytes, 0u);
}

TEST_P(UncachedReadsTest, APartitionCutFromACoalescedReadHoldsOnlyItsOwnBytes) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "coalesced uncached read");
  Open(/*uncached_bytes=*/1ull << 30, IoLimits{});  // adjacent partitions coalesced
  if (!scheduler_) return;
  const uint64_t before = Held();
  std::vector<Query> queries(1);
  Start(&queries[0], 300, /*batch_partitions=*/1);  // one partition per scan task
  cpu_.RunAll();
  Quiesce();
  ASSERT_LT(scheduler_->stats().submissions, non_empty_);  // the reads were coalesced
  // Each partition holds exactly CachedBytes(length), not a share of a pooled buffer.
  EXPECT_EQ(Held() - before, all_partitions_);
  // Scan all but one: the last one keeps only its own bytes alive, not its neighbours'.
  for (size_t i = 0; i + 1 < non_empty_; ++i) ASSERT_TRUE(cpu_.RunOne());
  EXPECT_LE(Held() - before, largest_);
  Drain(queries);
  ExpectExact(queries, 300);
}

TEST_P(UncachedReadsTest, AReadThatWaitedForItsBytesIsAnsweredFromTheCacheIfItWasLoadedMeanwhile) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "waited read meets the cache");
  // Partitions by size: z the largest (the cache holds exactly it), x and y two others.
  std::vector<uint32_t> order;
  Open(/*uncached_bytes=*/1, kOneReadPerPartition);  // every uncached read is the forced one
  if (!scheduler_) return;
  const IvfMeta meta = segment_->meta();
  for (uint32_t p = 0; p < kNlist; ++p) {
    if (meta.partitions[p].count > 0) order.push_back(p);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return meta.partitions[a].length > meta.partitions[b].length;
  });
  ASSERT_GE(order.size(), 3u);
  const uint32_t z = order[0], y = order[1], x = order[2];
  const uint64_t cache_bytes = CachedBytes(meta.partitions[z].length);
  segment_.reset();
  cache_ = std::make_unique<PartitionCache>(cache_bytes, 1);
  auto reopened =
      Segment::Open(DefaultFileSystem(), dir_.Sub("seg"), 2, scheduler_.get(), cache_.get());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  segment_ = *std::move(reopened);

  struct Answer {
    bool answered = false;
    absl::StatusOr<core::PartitionData> data = absl::UnknownError("not answered");
  };
  auto fetch = [&](uint32_t partition, uint64_t query, Answer* a) {
    core::PartitionFetch f;
    f.partition = partition;
    f.query_seq = query;
    segment_->Fetch(f, [a](absl::StatusOr<core::PartitionData> d) {
      a->data = std::move(d);
      a->answered = true;
    });
  };
  Answer az, ay, ax, ax3;
  fetch(z, 10, &az);  // cached and kept pinned: the cache is full
  Quiesce();
  ASSERT_TRUE(az.answered && az.data.ok());
  fetch(y, 11, &ay);  // refused: read past the cache as the one forced read, kept pinned
  Quiesce();
  ASSERT_TRUE(ay.answered && ay.data.ok());
  EXPECT_FALSE(ay.data->cached);
  fetch(x, 12, &ax);  // refused, and the forced read is taken: waits for bytes
  EXPECT_FALSE(ax.answered);
  az.data->pin.reset();  // the cache has room again: another query loads x into it
  fetch(x, 13, &ax3);
  Quiesce();
  ASSERT_TRUE(ax3.answered && ax3.data.ok());
  ax3.data->pin.reset();
  const uint64_t submissions = scheduler_->stats().submissions;
  ay.data->pin.reset();      // returns the forced read's bytes: the waiting read is granted
  ASSERT_TRUE(ax.answered);  // at once, from the cache, with no read of its own
  ASSERT_TRUE(ax.data.ok()) << ax.data.status();
  EXPECT_TRUE(ax.data->cached);
  EXPECT_EQ(ax.data->bytes_read, 0u);
  EXPECT_EQ(scheduler_->stats().submissions, submissions);
  EXPECT_EQ(cache_->uncached().stats().held_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, UncachedReadsTest,
                         ::testing::Values(IoBackendKind::kPread, IoBackendKind::kUring),
                         [](const auto& info) {
                           return info.param == IoBackendKind::kPread ? "Pread" : "Uring";
                         });

}  // namespace
}  // namespace shoal::storage::uncached_reads_test
