#include "core/index/ivf_search.h"

#include <future>
#include <random>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "core/exec/tbb_executor.h"
#include "core/index/distance.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_partition_source.h"
#include "tests/fakes/watchdog.h"
#include "tests/index/ivf_search_helpers.h"

namespace shoal::core::ivf_search_test {
namespace {

using testing::FakePartitionSource;
using testing::InMemorySegment;
using Mode = FakePartitionSource::Mode;
using namespace test_util;  // NOLINT(build/namespaces)

TEST(IvfSearch, FlatSegmentProbingEveryPartitionIsExact) {
  const Data data(3000, 24, 1);
  TbbExecutor executor(2);
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    auto segment = std::make_shared<InMemorySegment>(Train(data, 16, VectorEncoding::kFlat, metric),
                                                     data.vectors.data(), data.ids.data(), data.n);
    auto source = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
    for (size_t nq : {1, 16}) {  // 16 queries share partitions: the sgemm path
      const auto queries = data.Queries(nq, 2);
      auto results =
          RunSync(executor, Request(data, queries, nq, {source->Ref(source)}, 16, metric));
      ASSERT_TRUE(results.ok()) << results.status();
      ASSERT_EQ(results->size(), nq);
      for (size_t q = 0; q < nq; ++q) {
        EXPECT_EQ(Ids((*results)[q]), Exact(data, &queries[q * data.dim], 10, metric))
            << "query " << q << " nq " << nq;
        EXPECT_EQ((*results)[q].stats.vectors_scanned, data.n);
      }
    }
  }
}

TEST(IvfSearch, AnExactSegmentIsScannedWholeWhateverNprobe) {
  const Data data(3000, 24, 1);
  TbbExecutor executor(2);
  // Clustered partitions, but marked exact: nprobe 1 must still scan all 16.
  auto model = std::make_shared<IvfModel>(*Train(data, 16, VectorEncoding::kFlat));
  auto segment =
      std::make_shared<InMemorySegment>(model, data.vectors.data(), data.ids.data(), data.n);
  model->exact = true;
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
  const auto queries = data.Queries(8, 2);
  auto results = RunSync(executor, Request(data, queries, 8, {source->Ref(source)}, 1));
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t q = 0; q < 8; ++q) {
    EXPECT_EQ(Ids((*results)[q]), Exact(data, &queries[q * data.dim], 10, Metric::kL2));
    EXPECT_EQ((*results)[q].stats.vectors_scanned, data.n);
  }
}

TEST(IvfModel, AnExactModelHasFlatCodesAndZeroCentroids) {
  const IvfModel m = MakeExactModel(8, Metric::kInnerProduct, 5);
  EXPECT_TRUE(m.exact);
  EXPECT_EQ(m.nlist(), 5u);
  EXPECT_EQ(m.encoding, VectorEncoding::kFlat);
  EXPECT_EQ(m.CodeSize(), 32u);
  EXPECT_EQ(MakeExactModel(8, Metric::kL2, 0).nlist(), 1u);
}

TEST(IvfSearch, QuantizedSegmentsWithRefineFindTheTrueNeighbours) {
  const Data data(4000, 32, 3);
  TbbExecutor executor(2);
  const size_t nq = 40;
  const auto queries = data.Queries(nq, 4);
  for (VectorEncoding encoding : {VectorEncoding::kSq8, VectorEncoding::kPq}) {
    auto segment = std::make_shared<InMemorySegment>(Train(data, 32, encoding), data.vectors.data(),
                                                     data.ids.data(), data.n);
    auto source = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
    IvfSearchRequest r = Request(data, queries, nq, {source->Ref(source)}, 8);
    r.refine_factor = 10;
    auto results = RunSync(executor, std::move(r));
    ASSERT_TRUE(results.ok()) << results.status();
    double recall = 0;
    for (size_t q = 0; q < nq; ++q) {
      const auto truth = Exact(data, &queries[q * data.dim], 10, Metric::kL2);
      recall += Recall(Ids((*results)[q]), truth);
      // Refined distances are exact.
      const Neighbor& first = (*results)[q].neighbors[0];
      const size_t row = first.id - 1000;
      EXPECT_NEAR(first.distance,
                  L2Sqr(&queries[q * data.dim], &data.vectors[row * data.dim], data.dim), 1e-3);
    }
    EXPECT_GE(recall / nq, 0.9) << int(encoding);
  }
}

TEST(IvfSearch, MergesMemtableAndSegmentsAndSkipsDeadRows) {
  const Data data(3000, 16, 5);
  const size_t in_segment = 2000;
  auto model = Train(data, 8, VectorEncoding::kFlat);
  auto segment =
      std::make_shared<InMemorySegment>(model, data.vectors.data(), data.ids.data(), in_segment);
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
  absl::flat_hash_set<uint64_t> dead;
  for (uint64_t id = 1000; id < 1000 + data.n; id += 3) dead.insert(id);
  // Memtable: the last 1000 rows, with its own dead flags.
  constexpr size_t mem_rows = 1000;  // data.n - in_segment
  std::unique_ptr<std::atomic<uint8_t>[]> flags(new std::atomic<uint8_t>[mem_rows]);
  for (size_t i = 0; i < mem_rows; ++i) flags[i] = dead.contains(data.ids[in_segment + i]);
  FlatView memtable;
  memtable.dim = data.dim;
  memtable.blocks.push_back(
      {&data.vectors[in_segment * data.dim], &data.ids[in_segment], flags.get(), mem_rows});

  TbbExecutor executor(2);
  const auto queries = data.Queries(5, 6);
  IvfSearchRequest r =
      Request(data, queries, 5, {source->Ref(source, std::make_shared<DeadSet>(dead))}, 8);
  r.memtable = memtable;
  auto results = RunSync(executor, std::move(r));
  ASSERT_TRUE(results.ok());
  for (size_t q = 0; q < 5; ++q) {
    EXPECT_EQ(Ids((*results)[q]), Exact(data, &queries[q * data.dim], 10, Metric::kL2, dead));
  }
}

TEST(IvfSearch, FillsQueryStats) {
  const Data data(2000, 16, 7);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 16, VectorEncoding::kFlat),
                                                   data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
  TbbExecutor executor(1);
  auto results = RunSync(executor, Request(data, data.Queries(1, 8), 1, {source->Ref(source)}, 4));
  ASSERT_TRUE(results.ok());
  const QueryStats& s = (*results)[0].stats;
  EXPECT_GE(s.partitions_probed, 1u);
  EXPECT_LE(s.partitions_probed, 4u);
  EXPECT_GT(s.vectors_scanned, 0u);
  EXPECT_LT(s.vectors_scanned, data.n);
  EXPECT_EQ(source->live_pins(), 0);
}

TEST(IvfSearch, SourceErrorsFailTheRequest) {
  class FailingSource : public PartitionSource {
   public:
    void Fetch(const PartitionFetch&, FetchDone done) override {
      std::move(done)(absl::DataLossError("partition 3: checksum mismatch"));
    }
    void ReadRaw(std::vector<RowRef>, const PartitionFetch&, RawDone done) override {
      std::move(done)(absl::DataLossError("raw"));
    }
  };
  const Data data(500, 8, 9);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 4, VectorEncoding::kFlat),
                                                   data.vectors.data(), data.ids.data(), data.n);
  auto fake = std::make_shared<FakePartitionSource>(segment, Mode::kInline);
  IvfSegmentRef ref = fake->Ref(fake);
  ref.source = std::make_shared<FailingSource>();
  TbbExecutor executor(1);
  auto results = RunSync(executor, Request(data, data.Queries(3, 1), 3, {ref}, 4));
  EXPECT_EQ(results.status().code(), absl::StatusCode::kDataLoss);
}

// I-3: one arena thread, completions held and released in random order, a pinned-bytes budget
// smaller than one partition (one fetch in flight per query), 500 concurrent queries: every
// query completes with the exact answer and nothing stays pinned.
TEST(IvfSearch, ReportsOnceThatItWaitsForTheDiskAndNeverWhenReadsAnswerInline) {
  const Data data(500, 8, 5);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 8, VectorEncoding::kSq8),
                                                   data.vectors.data(), data.ids.data(), data.n);
  TbbExecutor executor(1);
  for (Mode mode : {Mode::kHeld, Mode::kInline}) {
    auto source = std::make_shared<FakePartitionSource>(segment, mode);
    const auto queries = data.Queries(4, 3);
    IvfSearchRequest r = Request(data, queries, 4, {source->Ref(source)}, 4);
    r.refine_factor = 4;
    std::atomic<int> waits{0};
    r.on_io_wait = [&waits] { waits.fetch_add(1); };
    Answers answers(1);
    IvfSearch(executor, std::move(r), answers.Callback(0));
    std::mt19937 rng(3);
    while (!answers.AllAnswered()) {
      if (source->ReleaseSome(1 + rng() % 3, rng) == 0) std::this_thread::yield();
    }
    ASSERT_TRUE(answers.Result(0).ok()) << answers.Result(0).status();
    executor.WaitIdle();
    EXPECT_EQ(waits.load(), mode == Mode::kHeld ? 1 : 0);
  }
}

TEST(IvfSearchDeadlock, OneThreadHeldCompletionsInAdversarialOrder) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "500 queries on a 1-thread arena");
  const Data data(2000, 16, 11);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 16, VectorEncoding::kSq8),
                                                   data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kHeld);
  TbbExecutor executor(1);
  const size_t num = 500;
  const auto queries = data.Queries(num, 12);
  Answers answers(num);
  for (size_t i = 0; i < num; ++i) {
    std::vector<float> q(queries.begin() + long(i * data.dim),
                         queries.begin() + long((i + 1) * data.dim));
    IvfSearchRequest r = Request(data, std::move(q), 1, {source->Ref(source)}, 16);
    r.refine_factor = 200;  // every candidate refined: the answer must be exact
    r.options.max_pinned_bytes = 1;
    r.options.batch_partitions = 1 + i % 4;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  std::mt19937 rng(13);
  while (!answers.AllAnswered()) {
    if (source->ReleaseSome(1 + rng() % 8, rng) == 0) std::this_thread::yield();
  }
  for (size_t i = 0; i < num; ++i) {
    ASSERT_TRUE(answers.Result(i).ok()) << i << ": " << answers.Result(i).status();
    EXPECT_EQ(Ids((*answers.Result(i))[0]), Exact(data, &queries[i * data.dim], 10, Metric::kL2))
        << i;
  }
  executor.WaitIdle();
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(source->held(), 0u);
}

TEST(IvfSearchDeadlock, RandomCancellationsAndDeadlinesAllEnd) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "cancelled queries on a 1-thread arena");
  const Data data(2000, 16, 14);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 16, VectorEncoding::kFlat),
                                                   data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kHeld);
  TbbExecutor executor(1);
  const size_t num = 500;
  const auto queries = data.Queries(num, 15);
  Answers answers(num);
  std::vector<std::shared_ptr<CancelToken>> tokens;
  std::mt19937 rng(16);
  for (size_t i = 0; i < num; ++i) {
    std::vector<float> q(queries.begin() + long(i * data.dim),
                         queries.begin() + long((i + 1) * data.dim));
    IvfSearchRequest r = Request(data, std::move(q), 1, {source->Ref(source)}, 16);
    r.options.max_pinned_bytes = 1;
    tokens.push_back(i % 3 == 1
                         ? std::make_shared<CancelToken>(CancelToken::Clock::now() +
                                                         std::chrono::microseconds(rng() % 20000))
                         : std::make_shared<CancelToken>());
    r.cancel = tokens.back();
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  while (!answers.AllAnswered()) {
    // Queries i % 3 == 0 are never cancelled and have no deadline: they must all answer OK.
    if (const size_t victim = rng() % num; rng() % 4 == 0 && victim % 3 != 0) {
      tokens[victim]->Cancel();  // may hit finished queries too
    }
    if (source->ReleaseSome(1 + rng() % 8, rng) == 0) std::this_thread::yield();
  }
  size_t ok = 0;
  for (size_t i = 0; i < num; ++i) {
    const absl::StatusCode code = answers.Result(i).status().code();
    ASSERT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kCancelled ||
                code == absl::StatusCode::kDeadlineExceeded)
        << i << ": " << answers.Result(i).status();
    if (i % 3 == 0) {
      EXPECT_EQ(code, absl::StatusCode::kOk) << i;
    }
    if (code != absl::StatusCode::kOk) continue;
    ++ok;
    EXPECT_EQ(Ids((*answers.Result(i))[0]), Exact(data, &queries[i * data.dim], 10, Metric::kL2));
  }
  EXPECT_GE(ok, (num + 2) / 3);
  executor.WaitIdle();
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(source->held(), 0u);
}

// The production bug, as a test: the partition source can only answer when another task of
// the (one-thread) arena runs. The engine never waits inside a task, so every query finishes.
// A search that blocks inside its task until the partition arrives — what the production
// engine did — can never finish here; the second half shows the test catches exactly that.
TEST(IvfSearchDeadlock, SourceNeedingTheArenaToAnswerNeverDeadlocks) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "source answering on the arena");
  const Data data(1000, 8, 17);
  TbbExecutor executor(1);
  auto segment = std::make_shared<InMemorySegment>(Train(data, 8, VectorEncoding::kPq),
                                                   data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<FakePartitionSource>(segment, Mode::kOnExecutor, &executor);
  const size_t num = 200;
  const auto queries = data.Queries(num, 18);
  Answers answers(num);
  for (size_t i = 0; i < num; ++i) {
    std::vector<float> q(queries.begin() + long(i * data.dim),
                         queries.begin() + long((i + 1) * data.dim));
    IvfSearchRequest r = Request(data, std::move(q), 1, {source->Ref(source)}, 8);
    r.refine_factor = 4;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  answers.WaitFor(num);
  for (size_t i = 0; i < num; ++i) ASSERT_TRUE(answers.Result(i).ok()) << i;

  // A task that fetches and then blocks for the answer (the production engine's
  // recv-in-a-pool-task loop). With one arena thread the answer's task cannot run.
  std::promise<bool> finished;
  executor.Submit([&] {
    auto arrived = std::make_shared<std::promise<void>>();
    auto arrived_future = arrived->get_future();
    PartitionFetch fetch;
    source->Fetch(fetch, [arrived](absl::StatusOr<PartitionData>) { arrived->set_value(); });
    const bool got = arrived_future.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
    finished.set_value(got);
  });
  EXPECT_FALSE(finished.get_future().get())
      << "a blocking wait inside a task should have starved the one-thread arena";
  executor.WaitIdle();
  EXPECT_EQ(source->live_pins(), 0);
}

}  // namespace
}  // namespace shoal::core::ivf_search_test
