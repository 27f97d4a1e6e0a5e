// SearchBatcher: searches that arrive while the engine is busy merge into one batch, each gets
// its own queries' results, and cancellation, deadlines and errors reach exactly the searches
// they belong to. A fake engine holds each batch until the test answers it.
#include "core/index/search_batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "tests/fakes/watchdog.h"

namespace shoal::core::search_batcher_test {
namespace {

constexpr uint32_t kDim = 2;

// Holds every batch the batcher dispatches until Answer() is called.
class HeldEngine {
 public:
  struct Call {
    IvfSearchRequest request;
    SearchDone done;
  };

  SearchBatcher::Engine engine() {
    return [this](IvfSearchRequest request, SearchDone done) {
      absl::MutexLock lock(&mu_);
      calls_.push_back({std::move(request), std::move(done)});
    };
  }
  size_t calls() {
    absl::MutexLock lock(&mu_);
    return calls_.size();
  }
  const IvfSearchRequest& request(size_t i) {
    absl::MutexLock lock(&mu_);
    return calls_[i].request;
  }
  // Answers call i: each query's one neighbour has the query's first value as its id.
  void Answer(size_t i) {
    SearchDone done;
    std::vector<QueryResult> results;
    {
      absl::MutexLock lock(&mu_);
      const IvfSearchRequest& r = calls_[i].request;
      for (size_t q = 0; q < r.num_queries; ++q) {
        results.push_back({{{uint64_t(r.queries[q * r.dim]), 0.f}}, {}});
      }
      done = std::move(calls_[i].done);
    }
    std::move(done)(std::move(results));
  }
  // Call i's engine reports that it waits for the disk.
  void IoWait(size_t i) {
    std::function<void()> on_io_wait;
    {
      absl::MutexLock lock(&mu_);
      on_io_wait = calls_[i].request.on_io_wait;
    }
    ASSERT_TRUE(on_io_wait);
    on_io_wait();
  }
  void Fail(size_t i, absl::Status status) {
    SearchDone done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(calls_[i].done);
    }
    std::move(done)(std::move(status));
  }

 private:
  absl::Mutex mu_;
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
};

// What one search was answered with.
struct Outcome {
  int answers = 0;
  absl::StatusOr<std::vector<QueryResult>> result = absl::UnknownError("not answered");
};

BatchKey Key(const void* owner, size_t k = 10) { return BatchKey{owner, k, 8, 0}; }

// A search of `ids.size()` queries whose first values are `ids` (the fake engine's answer).
SearchBatcher::Search MakeSearch(BatchKey key, std::vector<uint64_t> ids, Outcome* out,
                                 std::shared_ptr<CancelToken> token = nullptr) {
  SearchBatcher::Search s;
  s.key = key;
  s.prepare = [] {
    IvfSearchRequest r;
    r.dim = kDim;
    return r;
  };
  for (uint64_t id : ids) {
    s.queries.push_back(float(id));
    s.queries.push_back(0.f);
  }
  s.num_queries = ids.size();
  s.cancel = token ? std::move(token) : std::make_shared<CancelToken>();
  s.done = [out](absl::StatusOr<std::vector<QueryResult>> r) {
    ++out->answers;
    out->result = std::move(r);
  };
  return s;
}

std::vector<uint64_t> Ids(const Outcome& out) {
  std::vector<uint64_t> ids;
  if (!out.result.ok()) return ids;
  for (const QueryResult& r : *out.result) ids.push_back(r.neighbors.at(0).id);
  return ids;
}

std::shared_ptr<SearchBatcher> MakeBatcher(HeldEngine& engine, size_t max_running = 1,
                                           size_t max_batch_queries = 256) {
  return std::make_shared<SearchBatcher>(engine.engine(),
                                         SearchBatcher::Options{max_running, max_batch_queries});
}

TEST(SearchBatcher, AnIdleEngineStartsASearchAtOnceAlone) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a;
  batcher->Submit(MakeSearch(Key(&owner), {7, 8}, &a));
  ASSERT_EQ(engine.calls(), 1u);
  EXPECT_EQ(engine.request(0).num_queries, 2u);
  EXPECT_EQ(batcher->waiting(), 0u);
  engine.Answer(0);
  EXPECT_EQ(a.answers, 1);
  EXPECT_EQ(Ids(a), (std::vector<uint64_t>{7, 8}));
}

TEST(SearchBatcher, SearchesArrivingWhileBusyMergeAndEachGetsItsOwnResults) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a, b, c;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2, 3}, &b));
  batcher->Submit(MakeSearch(Key(&owner), {4}, &c));
  EXPECT_EQ(engine.calls(), 1u);
  EXPECT_EQ(batcher->waiting(), 2u);
  engine.Answer(0);
  // b and c went to the engine as one request, in arrival order.
  ASSERT_EQ(engine.calls(), 2u);
  EXPECT_EQ(engine.request(1).num_queries, 3u);
  EXPECT_EQ(engine.request(1).queries, (std::vector<float>{2.f, 0.f, 3.f, 0.f, 4.f, 0.f}));
  EXPECT_EQ(b.answers, 0);
  engine.Answer(1);
  EXPECT_EQ(Ids(a), (std::vector<uint64_t>{1}));
  EXPECT_EQ(Ids(b), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{4}));
  EXPECT_EQ(a.answers + b.answers + c.answers, 3);
}

TEST(SearchBatcher, DifferentKeysNeverShareABatchAndTheOldestGroupGoesFirst) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int one = 0, two = 0;
  Outcome a, b, c, d, e;
  batcher->Submit(MakeSearch(Key(&one), {1}, &a));
  batcher->Submit(MakeSearch(Key(&two), {2}, &b));  // oldest waiting
  batcher->Submit(MakeSearch(Key(&one), {3}, &c));
  batcher->Submit(MakeSearch(Key(&one, 5), {4}, &d));  // same owner, another k
  batcher->Submit(MakeSearch(Key(&two), {5}, &e));
  engine.Answer(0);
  ASSERT_EQ(engine.calls(), 2u);
  EXPECT_EQ(engine.request(1).queries, (std::vector<float>{2.f, 0.f, 5.f, 0.f}));
  engine.Answer(1);
  ASSERT_EQ(engine.calls(), 3u);
  EXPECT_EQ(engine.request(2).queries, (std::vector<float>{3.f, 0.f}));
  engine.Answer(2);
  ASSERT_EQ(engine.calls(), 4u);
  EXPECT_EQ(engine.request(3).queries, (std::vector<float>{4.f, 0.f}));
  engine.Answer(3);
  EXPECT_EQ(Ids(b), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Ids(e), (std::vector<uint64_t>{5}));
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{4}));
}

TEST(SearchBatcher, MaxBatchQueriesBoundsABatchButABiggerSearchStillRunsAlone) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine, 1, 4);
  int owner = 0;
  Outcome a, b, c, d, e;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2, 2}, &b));
  batcher->Submit(MakeSearch(Key(&owner), {3, 3}, &c));
  batcher->Submit(MakeSearch(Key(&owner), {4, 4}, &d));
  batcher->Submit(MakeSearch(Key(&owner), {5, 5, 5, 5, 5}, &e));
  engine.Answer(0);
  EXPECT_EQ(engine.request(1).num_queries, 4u);  // b and c
  engine.Answer(1);
  EXPECT_EQ(engine.request(2).num_queries, 2u);  // d: e would make 7
  engine.Answer(2);
  EXPECT_EQ(engine.request(3).num_queries, 5u);  // e alone, over the bound
  engine.Answer(3);
  EXPECT_EQ(Ids(e).size(), 5u);
}

TEST(SearchBatcher, MaxRunningBatchesRunAtOnce) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine, 2);
  int owner = 0;
  Outcome a, b, c, d;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));
  batcher->Submit(MakeSearch(Key(&owner), {4}, &d));
  EXPECT_EQ(engine.calls(), 2u);
  EXPECT_EQ(batcher->waiting(), 2u);
  engine.Answer(1);
  ASSERT_EQ(engine.calls(), 3u);
  EXPECT_EQ(engine.request(2).num_queries, 2u);
  engine.Answer(0);
  engine.Answer(2);
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{4}));
}

TEST(SearchBatcher, ABatchWaitingForTheDiskLetsTheNextOneStart) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine, 1);
  int owner = 0;
  Outcome a, b, c, d;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));
  ASSERT_EQ(engine.calls(), 1u);
  engine.IoWait(0);  // b and c start together while a waits for its reads
  ASSERT_EQ(engine.calls(), 2u);
  EXPECT_EQ(engine.request(1).num_queries, 2u);
  engine.IoWait(0);  // at most once per batch: nothing more starts
  batcher->Submit(MakeSearch(Key(&owner), {4}, &d));
  EXPECT_EQ(engine.calls(), 2u);
  EXPECT_EQ(batcher->waiting(), 1u);
  engine.Answer(0);  // a answers: it gave its slot up already, so d still waits for b and c
  EXPECT_EQ(Ids(a), (std::vector<uint64_t>{1}));
  EXPECT_EQ(engine.calls(), 2u);
  engine.Answer(1);
  ASSERT_EQ(engine.calls(), 3u);
  engine.Answer(2);
  EXPECT_EQ(Ids(b), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{4}));
  // Every slot was returned exactly once: an idle batcher starts the next search at once.
  Outcome e;
  batcher->Submit(MakeSearch(Key(&owner), {5}, &e));
  EXPECT_EQ(engine.calls(), 4u);
  EXPECT_EQ(batcher->waiting(), 0u);
}

TEST(SearchBatcher, RunLaterPreparesSubmittedAndIoWaitBatchesOnTheEnginesExecutor) {
  HeldEngine engine;
  std::vector<std::function<void()>> later;
  SearchBatcher::Options options{1, 256};
  options.run_later = [&later](std::function<void()> start) { later.push_back(std::move(start)); };
  auto batcher = std::make_shared<SearchBatcher>(engine.engine(), options);
  int owner = 0;
  Outcome a, b, c;
  SearchBatcher::Search heavy = MakeSearch(Key(&owner), {1}, &a);
  heavy.heavy_prepare = true;
  batcher->Submit(std::move(heavy));
  EXPECT_EQ(engine.calls(), 0u);  // a heavy prepare does not run on the submitting thread
  ASSERT_EQ(later.size(), 1u);
  later[0]();
  ASSERT_EQ(engine.calls(), 1u);
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b));
  engine.IoWait(0);
  EXPECT_EQ(engine.calls(), 1u);  // nor any on the thread that reported the wait
  ASSERT_EQ(later.size(), 2u);
  later[1]();
  ASSERT_EQ(engine.calls(), 2u);
  engine.Answer(0);
  engine.Answer(1);
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));  // a plain snapshot starts inline
  EXPECT_EQ(engine.calls(), 3u);
  EXPECT_EQ(later.size(), 2u);
  engine.Answer(2);
  EXPECT_EQ(Ids(a), (std::vector<uint64_t>{1}));
  EXPECT_EQ(Ids(b), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
}

TEST(SearchBatcher, ACancelledWaitingSearchAnswersAtOnceAndNeverReachesTheEngine) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a, b, c;
  auto token = std::make_shared<CancelToken>();
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b, token));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));
  token->Cancel();
  EXPECT_EQ(b.answers, 1);
  EXPECT_EQ(b.result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(batcher->waiting(), 1u);
  engine.Answer(0);
  EXPECT_EQ(engine.request(1).queries, (std::vector<float>{3.f, 0.f}));
  engine.Answer(1);
  EXPECT_EQ(b.answers, 1);
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
}

TEST(SearchBatcher, ACancelInsideABatchAnswersWithTheBatchAndTheLastOneStopsIt) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a, b, c;
  auto tb = std::make_shared<CancelToken>();
  auto tc = std::make_shared<CancelToken>();
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b, tb));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c, tc));
  engine.Answer(0);
  ASSERT_EQ(engine.calls(), 2u);
  const std::shared_ptr<const CancelToken> batch_token = engine.request(1).cancel;
  tb->Cancel();
  // The engine may still be scoring b's query: b answers when the batch does, so its request
  // stays accounted (slots, memory) until then.
  EXPECT_EQ(b.answers, 0);
  EXPECT_TRUE(batch_token->Check().ok()) << "c still wants its answer";
  tc->Cancel();
  EXPECT_EQ(c.answers, 0);
  EXPECT_EQ(batch_token->Check().code(), absl::StatusCode::kCancelled);
  engine.Answer(1);  // results, but b and c stopped: each answers CANCELLED, once
  for (const Outcome* o : {&b, &c}) {
    EXPECT_EQ(o->answers, 1);
    EXPECT_EQ(o->result.status().code(), absl::StatusCode::kCancelled);
  }
}

TEST(SearchBatcher, AnEngineThatThrowsAnswersTheBatchAndFreesItsSlot) {
  int calls = 0;
  auto batcher = std::make_shared<SearchBatcher>(
      [&](IvfSearchRequest, SearchDone) {
        ++calls;
        throw std::bad_alloc();
      },
      SearchBatcher::Options{1, 256});
  int owner = 0;
  Outcome a, b;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b));  // the slot is free again: it starts too
  EXPECT_EQ(calls, 2);
  for (const Outcome* o : {&a, &b}) {
    EXPECT_EQ(o->answers, 1);
    EXPECT_EQ(o->result.status().code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(batcher->waiting(), 0u);
}

TEST(SearchBatcher, DeadlinesGoToTheirOwnSearchAndTheBatchRunsToTheLatest) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a, b, c, d;
  const auto now = CancelToken::Clock::now();
  auto expired = std::make_shared<CancelToken>(now - std::chrono::seconds(1));
  auto late = std::make_shared<CancelToken>(now + std::chrono::hours(1));
  auto later = std::make_shared<CancelToken>(now + std::chrono::hours(2));
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b, expired));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c, late));
  batcher->Submit(MakeSearch(Key(&owner), {4}, &d, later));
  engine.Answer(0);
  // b's deadline passed while it waited: answered, not batched.
  EXPECT_EQ(b.result.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(engine.calls(), 2u);
  EXPECT_EQ(engine.request(1).num_queries, 2u);
  EXPECT_EQ(engine.request(1).cancel->deadline(), later->deadline());
  engine.Answer(1);
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
  EXPECT_EQ(Ids(d), (std::vector<uint64_t>{4}));
}

TEST(SearchBatcher, AnEngineErrorReachesEveryMemberOnce) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0;
  Outcome a, b, c;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  batcher->Submit(MakeSearch(Key(&owner), {2}, &b));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));
  engine.Answer(0);
  engine.Fail(1, absl::DataLossError("partition 3: checksum mismatch"));
  for (const Outcome* o : {&b, &c}) {
    EXPECT_EQ(o->answers, 1);
    EXPECT_EQ(o->result.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(SearchBatcher, APrepareThatThrowsAnswersEveryMemberAndTheNextBatchStillRuns) {
  HeldEngine engine;
  auto batcher = MakeBatcher(engine);
  int owner = 0, other = 0;
  Outcome a, b, c;
  batcher->Submit(MakeSearch(Key(&owner), {1}, &a));
  SearchBatcher::Search throws = MakeSearch(Key(&other), {2}, &b);
  throws.prepare = []() -> IvfSearchRequest { throw std::bad_alloc(); };
  batcher->Submit(std::move(throws));
  batcher->Submit(MakeSearch(Key(&owner), {3}, &c));
  engine.Answer(0);
  EXPECT_EQ(b.result.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_EQ(engine.calls(), 2u);  // c's batch, started when b's failed
  engine.Answer(1);
  EXPECT_EQ(Ids(c), (std::vector<uint64_t>{3}));
}

// Many threads submit and cancel while another answers batches in any order: every search is
// answered exactly once, with its own results when it was not cancelled, and nothing waits.
TEST(SearchBatcher, StressEverySearchAnsweredOnceWithItsOwnResults) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "SearchBatcher stress");
  struct Pending {
    std::shared_ptr<CancelToken> token;
    std::atomic<int> answers{0};
    std::atomic<bool> wrong{false};
  };
  constexpr int kThreads = 4, kPerThread = 300;
  std::vector<Pending> pending(kThreads * kPerThread);
  absl::Mutex mu;
  std::deque<SearchDone> held;
  std::deque<IvfSearchRequest> held_requests;
  std::atomic<bool> submitting{true}, finished{false};
  std::atomic<int> merged_batches{0};
  auto batcher = std::make_shared<SearchBatcher>(
      [&](IvfSearchRequest r, SearchDone done) {
        absl::MutexLock lock(&mu);
        held_requests.push_back(std::move(r));
        held.push_back(std::move(done));
      },
      SearchBatcher::Options{2, 8, [&](size_t searches, size_t) {
                               if (searches > 1) merged_batches.fetch_add(1);
                             }});
  int owners[2];
  std::thread answerer([&] {
    std::mt19937 rng(7);
    while (true) {
      SearchDone done;
      IvfSearchRequest r;
      bool got = false;
      std::function<void()> io_wait;
      {
        absl::MutexLock lock(&mu);
        // Now and then a held batch reports that it waits for the disk, freeing its slot.
        if (!held.empty() && rng() % 4 == 0)
          io_wait = held_requests[rng() % held.size()].on_io_wait;
      }
      if (io_wait) io_wait();
      {
        absl::MutexLock lock(&mu);
        // Two batches held (max_running): searches submitted meanwhile wait and merge.
        if (!held.empty() && (held.size() >= 2 || !submitting.load())) {
          const size_t i = rng() % held.size();
          done = std::move(held[i]);
          r = std::move(held_requests[i]);
          held.erase(held.begin() + ptrdiff_t(i));
          held_requests.erase(held_requests.begin() + ptrdiff_t(i));
          got = true;
        }
      }
      if (!got) {
        if (finished.load()) break;
        std::this_thread::yield();
        continue;
      }
      std::vector<QueryResult> results;
      for (size_t q = 0; q < r.num_queries; ++q) {
        results.push_back({{{uint64_t(r.queries[q * r.dim]), 0.f}}, {}});
      }
      std::move(done)(std::move(results));
    }
  });
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      std::mt19937 rng{uint32_t(t)};
      for (int i = 0; i < kPerThread; ++i) {
        const size_t id = size_t(t * kPerThread + i);
        Pending& p = pending[id];
        p.token = std::make_shared<CancelToken>();
        SearchBatcher::Search s;
        s.key = Key(&owners[rng() % 2]);
        s.prepare = [] {
          IvfSearchRequest r;
          r.dim = kDim;
          return r;
        };
        s.queries = {float(id), 0.f};
        s.num_queries = 1;
        s.cancel = p.token;
        s.done = [&p, id](absl::StatusOr<std::vector<QueryResult>> r) {
          p.answers.fetch_add(1);
          if (r.ok()) {
            if (r->size() != 1 || r->front().neighbors.empty() ||
                r->front().neighbors[0].id != id) {
              p.wrong = true;
            }
          } else if (r.status().code() != absl::StatusCode::kCancelled) {
            p.wrong = true;
          }
        };
        batcher->Submit(std::move(s));
        if (rng() % 4 == 0) pending[id - rng() % (i + 1)].token->Cancel();
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  submitting = false;
  // Searches still waiting are dispatched as batches answer; wait until all have been.
  while (true) {
    size_t answered = 0;
    for (const Pending& p : pending) answered += p.answers.load() > 0;
    if (answered == pending.size()) break;
    std::this_thread::yield();
  }
  finished = true;
  answerer.join();
  for (const Pending& p : pending) {
    EXPECT_EQ(p.answers.load(), 1);
    EXPECT_FALSE(p.wrong.load());
  }
  EXPECT_EQ(batcher->waiting(), 0u);
  EXPECT_GT(merged_batches.load(), 0);
  // Every slot came back exactly once: two more searches start at once (max_running 2).
  Outcome x, y;
  batcher->Submit(MakeSearch(Key(&owners[0]), {1}, &x));
  batcher->Submit(MakeSearch(Key(&owners[0]), {2}, &y));
  EXPECT_EQ(batcher->waiting(), 0u);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(held.size(), 2u);
}

}  // namespace
}  // namespace shoal::core::search_batcher_test
