// Shared scans across requests (core/index/scan_share.h): results equal to unshared searches,
// no task waits, per-request budgets, cancellation and errors per request, bounded scans.
#include "core/index/scan_share.h"

#include <algorithm>
#include <deque>
#include <random>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "core/base/cancel.h"
#include "core/exec/manual_executor.h"
#include "core/exec/tbb_executor.h"
#include "core/index/fastscan_model.h"
#include "core/index/ivf_scan.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_partition_source.h"
#include "tests/fakes/watchdog.h"
#include "tests/index/ivf_search_helpers.h"

namespace shoal::core::scan_share_test {
namespace {

using testing::InMemorySegment;
using namespace test_util;  // NOLINT(build/namespaces)

// A partition source whose fetches are all held until the test releases them. CancelQuery
// answers the query's held fetches CANCELLED (as the I/O scheduler does) when asked to;
// FailPartition makes a partition's fetches answer an error.
class HeldSource final : public PartitionSource {
 public:
  HeldSource(std::shared_ptr<const InMemorySegment> segment, bool cancel_queued)
      : segment_(std::move(segment)), cancel_queued_(cancel_queued) {}

  IvfSegmentRef Ref(std::shared_ptr<HeldSource> self,
                    std::shared_ptr<const IdFilter> dead = nullptr) const {
    IvfSegmentRef ref;
    ref.model = segment_->model;
    for (size_t p = 0; p < segment_->ids.size(); ++p) {
      ref.partition_rows.push_back(segment_->ids[p].size());
      ref.partition_bytes.push_back(segment_->codes[p].size() + 8 * segment_->ids[p].size());
    }
    ref.source = std::move(self);
    ref.dead = std::move(dead);
    return ref;
  }

  void Fetch(const PartitionFetch& fetch, FetchDone done) override {
    absl::MutexLock lock(&mu_);
    ++fetches_;
    fetched_partitions_.insert(fetch.partition);
    held_.push_back({fetch, std::move(done)});
  }

  void ReadRaw(std::vector<RowRef> rows, const PartitionFetch&, RawDone done) override {
    const size_t dim = segment_->model->dim;
    RawRows out;
    for (const RowRef& r : rows) {
      const float* v = segment_->raw[r.partition].data() + size_t(r.row) * dim;
      out.rows.emplace_back(std::shared_ptr<const void>(), v);  // the segment's own rows
    }
    std::move(done)(std::move(out));
  }

  void CancelQuery(uint64_t query_seq) override {
    if (!cancel_queued_) return;
    std::vector<Held> cancelled;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = held_.begin(); it != held_.end();) {
        if (it->fetch.query_seq != query_seq) {
          ++it;
          continue;
        }
        cancelled.push_back(std::move(*it));
        it = held_.erase(it);
      }
    }
    for (Held& h : cancelled) std::move(h.done)(absl::CancelledError("read cancelled"));
  }

  void FailPartition(uint32_t partition, absl::Status status) {
    absl::MutexLock lock(&mu_);
    failures_[partition] = std::move(status);
  }

  // Answers up to n held fetches, at random (or oldest first); returns how many.
  size_t Release(size_t n, std::mt19937* rng) {
    std::vector<Held> picked;
    absl::flat_hash_map<uint32_t, absl::Status> failures;
    {
      absl::MutexLock lock(&mu_);
      while (!held_.empty() && picked.size() < n) {
        const size_t i = rng ? std::uniform_int_distribution<size_t>(0, held_.size() - 1)(*rng) : 0;
        picked.push_back(std::move(held_[i]));
        held_.erase(held_.begin() + long(i));
      }
      failures = failures_;
    }
    for (Held& h : picked) {
      const uint32_t p = h.fetch.partition;
      if (auto f = failures.find(p); f != failures.end()) {
        std::move(h.done)(f->second);
        continue;
      }
      live_pins_.fetch_add(1);
      PartitionData data;
      data.codes = segment_->codes[p].data();
      data.ids = segment_->ids[p].data();
      data.count = segment_->ids[p].size();
      data.pin = std::shared_ptr<const void>(this, [this](const void*) { live_pins_--; });
      std::move(h.done)(std::move(data));
    }
    return picked.size();
  }

  size_t held() const {
    absl::MutexLock lock(&mu_);
    return held_.size();
  }
  std::vector<uint64_t> HeldQuerySeqs() const {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> seqs;
    for (const Held& h : held_) seqs.push_back(h.fetch.query_seq);
    return seqs;
  }
  uint64_t fetches() const {
    absl::MutexLock lock(&mu_);
    return fetches_;
  }
  std::set<uint32_t> FetchedPartitions() const {
    absl::MutexLock lock(&mu_);
    return fetched_partitions_;
  }
  int live_pins() const { return live_pins_.load(); }

 private:
  struct Held {
    PartitionFetch fetch;
    FetchDone done;
  };
  const std::shared_ptr<const InMemorySegment> segment_;
  const bool cancel_queued_;
  mutable absl::Mutex mu_;
  std::deque<Held> held_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, absl::Status> failures_ ABSL_GUARDED_BY(mu_);
  uint64_t fetches_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint32_t> fetched_partitions_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> live_pins_{0};
};

// The ids of the k rows of `partition` nearest `q` (L2), by brute force over its raw vectors:
// what a FLAT search probing only that partition must answer.
std::vector<uint64_t> ExactInPartition(const InMemorySegment& segment, uint32_t partition,
                                       const float* q, size_t k) {
  const size_t dim = segment.model->dim;
  std::vector<std::pair<float, uint64_t>> all;
  for (size_t r = 0; r < segment.ids[partition].size(); ++r) {
    all.push_back(
        {L2Sqr(q, segment.raw[partition].data() + r * dim, dim), segment.ids[partition][r]});
  }
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + long(k), all.end());
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < k; ++i) ids.push_back(all[i].second);
  return ids;
}

// The largest number of queries one partition scan scored.
struct ScanObserver {
  std::atomic<size_t> most{0};
  std::atomic<size_t> scans{0};
  std::shared_ptr<ScanShare> Share(size_t max_queries = 64, bool share = true) {
    ScanShare::Options o;
    o.share_scans = share;
    o.max_queries_per_scan = max_queries;
    o.observe_queries_per_scan = [this](size_t n) {
      scans++;
      size_t m = most.load();
      while (n > m && !most.compare_exchange_weak(m, n)) {
      }
    };
    return std::make_shared<ScanShare>(o);
  }
};

std::shared_ptr<IvfModel> TrainModel(const Data& data, uint32_t nlist, VectorEncoding encoding,
                                     uint32_t nbits, bool residual) {
  IvfTrainOptions o;
  o.nlist = nlist;
  o.encoding = encoding;
  o.pq_m = uint32_t(data.dim / 4);
  o.pq_nbits = nbits;
  o.residual = residual;
  auto model = TrainIvfModel(data.vectors.data(), data.n, uint32_t(data.dim), Metric::kL2, o);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::make_shared<IvfModel>(*std::move(model));
}

std::vector<float> Slice(const std::vector<float>& queries, size_t first, size_t n, size_t dim) {
  return {queries.begin() + long(first * dim), queries.begin() + long((first + n) * dim)};
}

// Runs queued tasks and releases held fetches until every search answered.
void Drive(ManualExecutor& executor, HeldSource& source, Answers& answers, std::mt19937* rng) {
  while (!answers.AllAnswered()) {
    executor.RunAll();
    if (answers.AllAnswered()) break;
    const size_t released = source.Release(rng ? 1 + (*rng)() % 4 : 1, rng);
    ASSERT_TRUE(released > 0 || executor.queued() > 0) << "stuck: nothing to release or run";
  }
  executor.RunAll();
}

// `exact` (FLAT): distances bit-identical. Otherwise (approximate keys, refine re-ranks a
// shortlist) equal ids and distances within rounding.
void ExpectSameResults(const absl::StatusOr<std::vector<QueryResult>>& a,
                       const absl::StatusOr<std::vector<QueryResult>>& b, size_t request,
                       bool exact = true) {
  ASSERT_TRUE(a.ok()) << request << ": " << a.status();
  ASSERT_TRUE(b.ok()) << request << ": " << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (size_t q = 0; q < a->size(); ++q) {
    EXPECT_EQ(Ids((*a)[q]), Ids((*b)[q])) << "request " << request << " query " << q;
    for (size_t i = 0; i < (*a)[q].neighbors.size() && i < (*b)[q].neighbors.size(); ++i) {
      const float x = (*a)[q].neighbors[i].distance, y = (*b)[q].neighbors[i].distance;
      if (exact) {
        EXPECT_EQ(x, y) << request << " " << q << " " << i;
      } else {
        EXPECT_NEAR(x, y, 1e-3f * (1 + std::abs(y))) << request << " " << q << " " << i;
      }
    }
  }
}

// A member that records what the entries tell it.
class RecordingMember final : public ScanMember {
 public:
  // Contract: `data` is taken only when accepting, untouched otherwise.
  bool AcceptShared(size_t work, const std::shared_ptr<SharedScan>&, PartitionData& data) override {
    accepted.push_back(work);
    if (accept) held = std::move(data);
    return accept;
  }
  void FailShared(size_t work, absl::Status) override { failed.push_back(work); }
  void OnHandBack(size_t work, HandBack) override { handed_back.push_back(work); }
  bool accept = true;
  std::vector<size_t> accepted, failed, handed_back;
  PartitionData held;
};

Ticket MakeTicket(std::shared_ptr<ScanMember> member, size_t work, uint64_t seq, size_t queries) {
  Ticket t;
  t.job = std::move(member);
  t.work = work;
  t.num_queries = queries;
  t.query_seq = seq;
  t.fetch.query_seq = seq;
  return t;
}

// The joining rule: an older query never joins a younger one's entry (it leads a new one that
// takes the map slot), younger ones join the oldest open entry until it is full, and a lone
// ticket may exceed the cap.
TEST(ScanShare, AnOlderQueryLeadsItsOwnEntryAndYoungerOnesJoinUpToTheCap) {
  auto share = std::make_shared<ScanShare>(ScanShare::Options{true, 4, {}});
  auto member = std::make_shared<RecordingMember>();
  const ScanKey key{nullptr, 7};
  auto young = share->Register(key, nullptr, MakeTicket(member, 0, 10, 1));
  EXPECT_TRUE(young.lead);
  auto old = share->Register(key, nullptr, MakeTicket(member, 1, 5, 1));
  EXPECT_TRUE(old.lead) << "an older query rode a younger one's I/O priority";
  auto joiner = share->Register(key, nullptr, MakeTicket(member, 2, 11, 2));
  EXPECT_FALSE(joiner.lead);
  EXPECT_EQ(joiner.entry, old.entry);
  auto too_many = share->Register(key, nullptr, MakeTicket(member, 3, 12, 2));
  EXPECT_TRUE(too_many.lead) << "the entry's scan grew past max_queries_per_scan";
  auto huge = share->Register({nullptr, 8}, nullptr, MakeTicket(member, 4, 13, 100));
  EXPECT_TRUE(huge.lead);
  EXPECT_EQ(share->open_entries(), 2u);

  // Data goes to the oldest ticket; the others stay for the accepting job's Close.
  PartitionData data;
  data.count = 1;
  old.entry->Deliver(data);
  EXPECT_EQ(member->accepted, std::vector<size_t>{1});
  EXPECT_FALSE(share->Leave(old.entry, member.get(), 1)) << "an offered ticket left twice";
  const std::vector<Ticket> closed = share->Close(old.entry);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].work, 2u);
  EXPECT_FALSE(share->Leave(old.entry, member.get(), 2)) << "left after a scan took it";
  EXPECT_TRUE(share->Leave(huge.entry, member.get(), 4));
  huge.entry->Deliver(data);  // nobody left: dropped, the entry closes
  EXPECT_EQ(member->accepted, std::vector<size_t>{1});
  EXPECT_EQ(share->open_entries(), 1u);  // too_many's
  share->Close(too_many.entry);          // (entries hold their share: no cycle left behind)
  EXPECT_EQ(share->open_entries(), 0u);
}

// Many concurrent requests of 1-3 queries with different k, refine and dead rows: with
// sharing on (fewer fetches, scans of several requests' queries) every answer equals the
// unshared one, for every encoding.
TEST(ScanShare, SharedScansGiveTheSameResultsAsUnsharedOnes) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "shared vs unshared");
  const Data data(3000, 16, 21);
  struct Case {
    const char* name;
    VectorEncoding encoding;
    uint32_t nbits;
    bool residual;
  };
  const Case cases[] = {{"flat", VectorEncoding::kFlat, 8, false},
                        {"sq8", VectorEncoding::kSq8, 8, true},
                        {"sq8 raw", VectorEncoding::kSq8, 8, false},
                        {"pq", VectorEncoding::kPq, 8, true},
                        {"fast-scan", VectorEncoding::kPq, 4, true}};
  const size_t num = 48;
  const auto queries = data.Queries(3 * num, 22);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = TrainModel(data, 16, c.encoding, c.nbits, c.residual);
    auto segment =
        std::make_shared<InMemorySegment>(model, data.vectors.data(), data.ids.data(), data.n);
    for (auto& codes : segment->codes) {
      LayoutPartitionCodes(*model, codes.data(), codes.size() / model->CodeSize());
    }
    std::vector<std::shared_ptr<const IdFilter>> dead(num);
    for (size_t i = 1; i < num; i += 4) {
      absl::flat_hash_set<uint64_t> ids;
      for (uint64_t id = 1000 + i; id < 1000 + data.n; id += 5) ids.insert(id);
      dead[i] = std::make_shared<DeadSet>(std::move(ids));
    }
    std::vector<absl::StatusOr<std::vector<QueryResult>>> results[2];
    uint64_t fetches[2];
    for (int shared = 0; shared < 2; ++shared) {
      auto source = std::make_shared<HeldSource>(segment, false);
      ScanObserver observer;
      std::shared_ptr<ScanShare> share = shared ? observer.Share() : nullptr;
      ManualExecutor executor(2);
      Answers answers(num);
      for (size_t i = 0; i < num; ++i) {
        const size_t nq = 1 + i % 3;
        IvfSearchRequest r = Request(data, Slice(queries, 3 * i, nq, data.dim), nq,
                                     {source->Ref(source, dead[i])}, 4);
        r.k = 5 + 5 * (i % 3);
        r.refine_factor = c.encoding == VectorEncoding::kFlat ? 0 : uint32_t(i % 2 * 3);
        r.share = share;
        IvfSearch(executor, std::move(r), answers.Callback(i));
      }
      std::mt19937 rng(23);
      Drive(executor, *source, answers, &rng);
      for (size_t i = 0; i < num; ++i) results[shared].push_back(answers.Result(i));
      fetches[shared] = source->fetches();
      EXPECT_EQ(source->live_pins(), 0);
      if (shared) {
        EXPECT_GT(observer.most.load(), 3u) << "requests did not share scans";
        EXPECT_EQ(share->open_entries(), 0u);
      }
    }
    EXPECT_LT(fetches[1], fetches[0]);
    for (size_t i = 0; i < num; ++i) {
      ExpectSameResults(results[1][i], results[0][i], i, c.encoding == VectorEncoding::kFlat);
    }
  }
}

// Exact FLAT answers do not depend on load: a scan shared by >= 8 queries goes through sgemm
// (|q|^2 + |x|^2 - 2<q, x>), whose rounding at |x|^2 ~ 1e6 (Fashion-MNIST-like pixels) exceeds
// the gaps between near-duplicate rows. Every request's ids and distances must still be
// bit-identical to the same query searched alone with sharing off (the per-row kernel).
TEST(ScanShare, ExactFlatAnswersUnderSharingAreBitIdenticalToOneQueryAtATime) {
  const size_t n = 1200, dim = 64, num = 24;
  std::mt19937 rng(91);
  std::uniform_real_distribution<float> pixel(0.0f, 255.0f), tiny(-0.02f, 0.02f);
  Data data(n, dim, 91);
  for (size_t i = 0; i < n; ++i) {
    float* v = data.vectors.data() + i * dim;
    if (i % 2 == 1) {  // a near-duplicate of the row before it
      const float* prev = v - dim;
      for (size_t d = 0; d < dim; ++d) v[d] = prev[d] + tiny(rng);
      continue;
    }
    for (size_t d = 0; d < dim; ++d) v[d] = pixel(rng);
  }
  std::vector<float> queries(num * dim);
  for (size_t q = 0; q < num; ++q) {
    const float* base = data.vectors.data() + (q * 37 % n) * dim;
    for (size_t d = 0; d < dim; ++d) queries[q * dim + d] = base[d] + 4 * tiny(rng);
  }
  for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
    SCOPED_TRACE(MetricName(metric));
    auto model = std::make_shared<IvfModel>(MakeExactModel(uint32_t(dim), metric, 1));
    auto segment =
        std::make_shared<InMemorySegment>(model, data.vectors.data(), data.ids.data(), data.n);
    auto request = [&](size_t i, const std::shared_ptr<HeldSource>& source,
                       std::shared_ptr<ScanShare> share) {
      IvfSearchRequest r =
          Request(data, Slice(queries, i, 1, dim), 1, {source->Ref(source)}, 1, metric);
      r.share = std::move(share);
      return r;
    };
    ManualExecutor executor(1);
    // One at a time, sharing off: the single-query kernel.
    std::vector<absl::StatusOr<std::vector<QueryResult>>> alone;
    for (size_t i = 0; i < num; ++i) {
      auto source = std::make_shared<HeldSource>(segment, false);
      Answers one(1);
      IvfSearch(executor, request(i, source, nullptr), one.Callback(0));
      Drive(executor, *source, one, nullptr);
      alone.push_back(one.Result(0));
    }
    // All at once on one ScanShare: one scan scores every query.
    auto source = std::make_shared<HeldSource>(segment, false);
    ScanObserver observer;
    auto share = observer.Share();
    Answers shared(num);
    for (size_t i = 0; i < num; ++i)
      IvfSearch(executor, request(i, source, share), shared.Callback(i));
    Drive(executor, *source, shared, nullptr);
    ASSERT_GE(observer.most.load(), kMinQueriesForGemm) << "the scan did not go through sgemm";
    for (size_t i = 0; i < num; ++i) ExpectSameResults(shared.Result(i), alone[i], i);
  }
}

// I-1 with sharing: one arena thread, completions held and released in random order, a
// pinned-bytes budget below one partition, 300 single-query requests on 16 partitions (so they
// share nearly every partition): every request answers exactly and nothing stays pinned.
TEST(ScanShare, OneThreadManyRequestsSharingHeldCompletionsInAdversarialOrder) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "300 sharing queries on 1 thread");
  const Data data(2000, 16, 31);
  auto segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kSq8, 8, true),
                                        data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<testing::FakePartitionSource>(
      segment, testing::FakePartitionSource::Mode::kHeld);
  ScanObserver observer;
  auto share = observer.Share();
  TbbExecutor executor(1);
  const size_t num = 300;
  const auto queries = data.Queries(num, 32);
  Answers answers(num);
  for (size_t i = 0; i < num; ++i) {
    IvfSearchRequest r = Request(data, Slice(queries, i, 1, data.dim), 1, {source->Ref(source)}, 8);
    r.refine_factor = 200;  // every candidate refined: the answer must be exact
    r.options.max_pinned_bytes = 1;
    r.options.batch_partitions = 1 + i % 4;
    r.share = share;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  std::mt19937 rng(33);
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
  EXPECT_EQ(share->open_entries(), 0u);
  EXPECT_GT(observer.most.load(), 1u);
  EXPECT_LT(source->fetches(), num * 8);
}

// Two arena threads, random cancellations and deadlines while requests share partitions, and
// a source that drops a stopped query's queued reads (so leaders' reads get re-issued): every
// request ends, the untouched ones with the exact answer, and nothing stays pinned or open.
TEST(ScanShare, RandomCancellationsAndDeadlinesWhileSharingAllEnd) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "cancelled sharing queries");
  const Data data(2000, 16, 81);
  auto segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kFlat, 8, false),
                                        data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<HeldSource>(segment, /*cancel_queued=*/true);
  ScanObserver observer;
  auto share = observer.Share(8);
  TbbExecutor executor(2);
  const size_t num = 300;
  const auto queries = data.Queries(num, 82);
  Answers answers(num);
  std::vector<std::shared_ptr<CancelToken>> tokens;
  std::mt19937 rng(83);
  for (size_t i = 0; i < num; ++i) {
    IvfSearchRequest r =
        Request(data, Slice(queries, i, 1, data.dim), 1, {source->Ref(source)}, 16);
    r.options.max_pinned_bytes = i % 2 ? 1 : 64 << 20;
    tokens.push_back(i % 3 == 1
                         ? std::make_shared<CancelToken>(CancelToken::Clock::now() +
                                                         std::chrono::microseconds(rng() % 20000))
                         : std::make_shared<CancelToken>());
    r.cancel = tokens.back();
    r.share = share;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  while (!answers.AllAnswered()) {
    // Requests i % 3 == 0 are never cancelled: they must all answer OK.
    if (const size_t victim = rng() % num; rng() % 3 == 0 && victim % 3 != 0) {
      tokens[victim]->Cancel();
    }
    if (source->Release(1 + rng() % 6, &rng) == 0) std::this_thread::yield();
  }
  for (size_t i = 0; i < num; ++i) {
    const absl::StatusCode code = answers.Result(i).status().code();
    ASSERT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kCancelled ||
                code == absl::StatusCode::kDeadlineExceeded)
        << i << ": " << answers.Result(i).status();
    if (i % 3 == 0) {
      EXPECT_EQ(code, absl::StatusCode::kOk) << i;
    }
    if (code != absl::StatusCode::kOk) continue;
    EXPECT_EQ(Ids((*answers.Result(i))[0]), Exact(data, &queries[i * data.dim], 10, Metric::kL2))
        << i;
  }
  executor.WaitIdle();
  while (source->Release(16, nullptr) > 0) executor.WaitIdle();  // reads of entries all left
  executor.WaitIdle();
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(share->open_entries(), 0u);
  EXPECT_GT(observer.most.load(), 1u);
}

// I-9 with sharing: a joined partition counts against the joiner's budget like a fetch of its
// own. With a budget below one partition, no request ever has two registrations open.
TEST(ScanShare, PinnedBytesBudgetAndPrefetchDepthHoldForJoinedTickets) {
  const Data data(2000, 16, 41);
  auto segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kFlat, 8, false),
                                        data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<HeldSource>(segment, false);
  ScanObserver observer;
  auto share = observer.Share();
  ManualExecutor executor(1);
  const size_t num = 40;
  const auto queries = data.Queries(num, 42);
  Answers answers(num);
  for (size_t i = 0; i < num; ++i) {
    IvfSearchRequest r = Request(data, Slice(queries, i, 1, data.dim), 1, {source->Ref(source)}, 8);
    r.options.max_pinned_bytes = 1;
    r.share = share;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  std::mt19937 rng(43);
  size_t most = 0;
  while (!answers.AllAnswered()) {
    executor.RunAll();
    most = std::max(most, share->MaxOpenTicketsPerQuery());
    if (source->Release(1 + rng() % 3, &rng) == 0 && executor.queued() == 0) break;
    most = std::max(most, share->MaxOpenTicketsPerQuery());
  }
  executor.RunAll();
  ASSERT_TRUE(answers.AllAnswered());
  EXPECT_EQ(most, 1u);
  EXPECT_GT(observer.most.load(), 1u) << "requests did not share scans";
  for (size_t i = 0; i < num; ++i) {
    ASSERT_TRUE(answers.Result(i).ok()) << i;
    EXPECT_EQ(Ids((*answers.Result(i))[0]), Exact(data, &queries[i * data.dim], 10, Metric::kL2));
  }
  EXPECT_EQ(source->live_pins(), 0);
}

// Two requests on the same partitions: the older leads (issues the reads), the younger joins.
struct LeaderAndJoiner {
  const Data data{2000, 16, 51};
  std::shared_ptr<InMemorySegment> segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kFlat, 8, false),
                                        data.vectors.data(), data.ids.data(), data.n);
  std::vector<float> query = data.Queries(1, 52);
  ManualExecutor executor{1};
  Answers answers{2};
  std::shared_ptr<ScanShare> share = std::make_shared<ScanShare>(ScanShare::Options{});

  // Starts the leader (0) then the joiner (1); returns the reads in flight.
  size_t Start(const std::shared_ptr<HeldSource>& source,
               const std::shared_ptr<CancelToken> (&tokens)[2]) {
    for (size_t i = 0; i < 2; ++i) {
      IvfSearchRequest r = Request(data, query, 1, {source->Ref(source)}, 4);
      r.cancel = tokens[i];
      r.share = share;
      IvfSearch(executor, std::move(r), answers.Callback(i));
      executor.RunAll();
    }
    return source->held();
  }
  absl::StatusOr<std::vector<QueryResult>> Unshared() {
    auto source = std::make_shared<HeldSource>(segment, false);
    Answers one(1);
    IvfSearch(executor, Request(data, query, 1, {source->Ref(source)}, 4), one.Callback(0));
    Drive(executor, *source, one, nullptr);
    return one.Result(0);
  }
};

TEST(ScanShare, ACancelledJoinerLeavesWithoutDisturbingTheOthers) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/false);
  const std::shared_ptr<CancelToken> tokens[2] = {nullptr, std::make_shared<CancelToken>()};
  const size_t reads = t.Start(source, tokens);
  ASSERT_EQ(reads, 4u) << "the joiner should not read";
  tokens[1]->Cancel();
  t.executor.RunAll();
  // The joiner answers while the leader's reads are still held: it waits for no one.
  ASSERT_FALSE(t.answers.Result(0).ok());
  EXPECT_EQ(t.answers.Result(1).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(source->held(), 4u);
  Drive(t.executor, *source, t.answers, nullptr);
  ExpectSameResults(t.answers.Result(0), t.Unshared(), 0);
  EXPECT_EQ(source->fetches(), 4u);
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(t.share->open_entries(), 0u);
}

TEST(ScanShare, ALeaderCancelledWhileItsReadsAreQueuedHasThemReissuedForTheOthers) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/true);
  const std::shared_ptr<CancelToken> tokens[2] = {std::make_shared<CancelToken>(), nullptr};
  ASSERT_EQ(t.Start(source, tokens), 4u);
  const uint64_t leader_seq = source->HeldQuerySeqs()[0];
  tokens[0]->Cancel();  // the source drops the leader's queued reads: they answer CANCELLED
  t.executor.RunAll();
  EXPECT_EQ(t.answers.Result(0).status().code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(source->held(), 4u) << "the joiner's reads were not re-issued";
  for (uint64_t seq : source->HeldQuerySeqs()) EXPECT_NE(seq, leader_seq);
  Drive(t.executor, *source, t.answers, nullptr);
  ExpectSameResults(t.answers.Result(1), t.Unshared(), 1);
  EXPECT_EQ(source->fetches(), 8u);
  EXPECT_EQ(source->live_pins(), 0);
}

// A read already dispatched cannot be cancelled: the cancelled leader leaves and answers while
// the read is held, and the entry keeps owning it. InFlightFetches() (what server shutdown
// waits for before freeing the cache and the I/O scheduler) stays > 0 until the read answers;
// then the data is dropped (no pin, no leak under ASan).
TEST(ScanShare, ALeaderCancelledWhileItsReadIsDispatchedAnswersAndTheReadStaysCounted) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/false);
  auto token = std::make_shared<CancelToken>();
  IvfSearchRequest r = Request(t.data, t.query, 1, {source->Ref(source)}, 4);
  r.cancel = token;
  r.share = t.share;
  IvfSearch(t.executor, std::move(r), t.answers.Callback(0));
  t.executor.RunAll();
  ASSERT_EQ(source->held(), 4u);
  EXPECT_EQ(t.share->InFlightFetches(), 4u);
  token->Cancel();
  t.executor.RunAll();
  EXPECT_EQ(t.answers.Result(0).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(source->held(), 4u) << "the dispatched reads were cancelled";
  EXPECT_EQ(t.share->InFlightFetches(), 4u) << "the reads still at the disk went uncounted";
  EXPECT_EQ(source->Release(3, nullptr), 3u);
  t.executor.RunAll();
  EXPECT_EQ(t.share->InFlightFetches(), 1u);
  EXPECT_EQ(source->Release(1, nullptr), 1u);
  t.executor.RunAll();
  EXPECT_EQ(t.share->InFlightFetches(), 0u);
  EXPECT_EQ(source->live_pins(), 0) << "the entry kept the data of a read nobody waits for";
  EXPECT_EQ(t.share->open_entries(), 0u);
  EXPECT_EQ(t.executor.queued(), 0u);
}

// After a re-issue the read has the new issuer's priority: a query older than it (though
// younger than the cancelled leader) must not join and ride it.
TEST(ScanShare, AfterAReissueAQueryOlderThanTheNewIssuerLeadsItsOwnEntry) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/true);
  auto share = std::make_shared<ScanShare>(ScanShare::Options{});
  auto member = std::make_shared<RecordingMember>();
  const ScanKey key{source.get(), 3};
  auto token = std::make_shared<CancelToken>();
  Ticket leader = MakeTicket(member, 0, 1, 1);
  leader.fetch.cancel = token;
  auto lead = share->Register(key, source, leader);
  ASSERT_TRUE(lead.lead);
  lead.entry->Issue(leader.fetch);
  ASSERT_FALSE(share->Register(key, source, MakeTicket(member, 2, 3, 1)).lead);
  token->Cancel();
  ASSERT_TRUE(share->Leave(lead.entry, member.get(), 0));
  source->CancelQuery(1);  // the leader's queued read answers CANCELLED: re-issued for seq 3
  ASSERT_EQ(source->HeldQuerySeqs(), std::vector<uint64_t>{3});
  auto middle = share->Register(key, source, MakeTicket(member, 1, 2, 1));
  EXPECT_TRUE(middle.lead) << "query 2 rode query 3's I/O priority";
  source->Release(1, nullptr);  // the re-issued read: query 3 takes it
  EXPECT_EQ(member->accepted, std::vector<size_t>{2});
  share->Close(lead.entry);
  share->Close(middle.entry);
}

// Every re-issue goes to a distinct live ticket (a stopped one never becomes live again), so
// re-issues end without a cap: after ten issuers in a row are cancelled, the eleventh ticket,
// whose token is fine, still gets the data rather than a failure. Each ticket has its own
// member; a cancelled one refuses the data (as a failed IvfSearchJob does), so the data is
// offered oldest first and must end with the eleventh.
TEST(ScanShare, ATicketWhoseTokenIsFineOutlivesAnyNumberOfCancelledIssuers) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/true);
  auto share = std::make_shared<ScanShare>(ScanShare::Options{});
  const ScanKey key{source.get(), 3};
  const size_t issuers = 10;
  std::vector<std::shared_ptr<CancelToken>> tokens;
  std::vector<std::shared_ptr<RecordingMember>> members;
  std::shared_ptr<SharedScan> entry;
  for (size_t i = 0; i <= issuers; ++i) {
    tokens.push_back(std::make_shared<CancelToken>());
    members.push_back(std::make_shared<RecordingMember>());
    Ticket ticket = MakeTicket(members.back(), i, 1 + i, 1);
    ticket.fetch.partition = key.partition;
    ticket.fetch.cancel = tokens.back();
    const PartitionFetch fetch = ticket.fetch;
    auto r = share->Register(key, source, std::move(ticket));
    ASSERT_EQ(r.lead, i == 0) << i;
    if (r.lead) (entry = r.entry)->Issue(fetch);
  }
  for (size_t i = 0; i < issuers; ++i) {
    ASSERT_EQ(source->HeldQuerySeqs(), std::vector<uint64_t>{1 + i});
    tokens[i]->Cancel();
    members[i]->accept = false;  // a stopped job refuses the data
    source->CancelQuery(1 + i);  // the issuer's queued read answers CANCELLED: re-issued
  }
  for (size_t i = 0; i <= issuers; ++i) {
    EXPECT_TRUE(members[i]->failed.empty()) << "ticket " << i << " failed after re-issues";
  }
  ASSERT_EQ(source->HeldQuerySeqs(), std::vector<uint64_t>{1 + issuers});
  source->Release(1, nullptr);
  // Offered oldest first: each cancelled ticket was offered it once and refused it; the
  // eleventh took it.
  for (size_t i = 0; i < issuers; ++i) {
    EXPECT_EQ(members[i]->accepted, std::vector<size_t>{i}) << "ticket " << i;
    EXPECT_EQ(members[i]->held.ids, nullptr) << "cancelled ticket " << i << " holds the data";
  }
  EXPECT_EQ(members[issuers]->accepted, std::vector<size_t>{issuers});
  ASSERT_GT(t.segment->ids[3].size(), 0u);
  EXPECT_EQ(members[issuers]->held.ids, t.segment->ids[3].data())
      << "the eleventh ticket did not get partition 3's data";
  EXPECT_EQ(share->InFlightFetches(), 0u);
  share->Close(entry);
}

// Pass-on: the leader accepts a read and is cancelled before its scan task runs. It drops the
// item and passes the data to the joiner, which scans it: the joiner answers exactly, and no
// partition is read twice.
TEST(ScanShare, ALeaderCancelledBeforeScanningPassesTheDataOnWithoutAnotherRead) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, /*cancel_queued=*/false);
  const std::shared_ptr<CancelToken> tokens[2] = {std::make_shared<CancelToken>(), nullptr};
  ASSERT_EQ(t.Start(source, tokens), 4u);
  ASSERT_EQ(source->Release(1, nullptr), 1u);  // the leader (oldest) accepts it
  ASSERT_GT(t.executor.queued(), 0u) << "the leader's scan task should be queued, not run";
  tokens[0]->Cancel();  // Abort, before that task runs: the leader drops and passes on
  EXPECT_EQ(t.answers.Result(0).status().code(), absl::StatusCode::kUnknown)
      << "answered before its queued task ran";
  Drive(t.executor, *source, t.answers, nullptr);
  EXPECT_EQ(t.answers.Result(0).status().code(), absl::StatusCode::kCancelled);
  ExpectSameResults(t.answers.Result(1), t.Unshared(), 1);
  EXPECT_EQ(source->fetches(), 4u) << "a partition was read again";
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(t.share->open_entries(), 0u);
  EXPECT_EQ(t.share->InFlightFetches(), 0u);
}

// Hand-backs carry the joiner's own segment index: requests list two segments in opposite
// orders ([S0, S1] and [S1, S0]), so a scan by one hands the other candidates whose refine
// must read the right segment. SQ8 with refine: sharing on answers as sharing off.
TEST(ScanShare, HandBacksUseTheJoinersSegmentOrder) {
  const Data data(3000, 16, 101);
  std::vector<std::shared_ptr<InMemorySegment>> segments;
  for (size_t s = 0; s < 2; ++s) {
    const size_t half = data.n / 2;
    const float* v = data.vectors.data() + s * half * data.dim;
    Data part(half, data.dim, 0);
    part.vectors.assign(v, v + half * data.dim);
    part.ids.assign(data.ids.begin() + long(s * half), data.ids.begin() + long((s + 1) * half));
    segments.push_back(
        std::make_shared<InMemorySegment>(TrainModel(part, 8, VectorEncoding::kSq8, 8, true),
                                          part.vectors.data(), part.ids.data(), half));
  }
  const size_t num = 24;
  const auto queries = data.Queries(num, 102);
  std::vector<absl::StatusOr<std::vector<QueryResult>>> results[2];
  for (int shared = 0; shared < 2; ++shared) {
    std::shared_ptr<HeldSource> sources[2] = {std::make_shared<HeldSource>(segments[0], false),
                                              std::make_shared<HeldSource>(segments[1], false)};
    ScanObserver observer;
    std::shared_ptr<ScanShare> share = shared ? observer.Share() : nullptr;
    ManualExecutor executor(2);
    Answers answers(num);
    for (size_t i = 0; i < num; ++i) {
      const size_t first = i % 2;
      IvfSearchRequest r = Request(
          data, Slice(queries, i, 1, data.dim), 1,
          {sources[first]->Ref(sources[first]), sources[1 - first]->Ref(sources[1 - first])}, 3);
      r.refine_factor = 4;
      r.share = share;
      IvfSearch(executor, std::move(r), answers.Callback(i));
    }
    std::mt19937 rng(103);
    while (!answers.AllAnswered()) {
      executor.RunAll();
      size_t released = 0;
      for (auto& source : sources) released += source->Release(1 + rng() % 3, &rng);
      ASSERT_TRUE(released > 0 || executor.queued() > 0 || answers.AllAnswered()) << "stuck";
    }
    executor.RunAll();
    for (size_t i = 0; i < num; ++i) results[shared].push_back(answers.Result(i));
    if (shared) {
      EXPECT_GT(observer.most.load(), 1u) << "requests did not share scans";
    }
    for (auto& source : sources) EXPECT_EQ(source->live_pins(), 0);
  }
  for (size_t i = 0; i < num; ++i) {
    ExpectSameResults(results[1][i], results[0][i], i, /*exact=*/false);
  }
}

TEST(ScanShare, AnIoErrorFailsEveryRequestOnTheEntry) {
  LeaderAndJoiner t;
  auto source = std::make_shared<HeldSource>(t.segment, false);
  const std::shared_ptr<CancelToken> tokens[2] = {nullptr, nullptr};
  ASSERT_EQ(t.Start(source, tokens), 4u);
  const auto held = source->HeldQuerySeqs();
  ASSERT_EQ(held.size(), 4u);
  for (uint32_t p = 0; p < 16; ++p) source->FailPartition(p, absl::DataLossError("checksum"));
  Drive(t.executor, *source, t.answers, nullptr);
  EXPECT_EQ(t.answers.Result(0).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(t.answers.Result(1).status().code(), absl::StatusCode::kDataLoss);
  // Both left the other entries; those entries still own their reads until they answer.
  while (source->Release(1, nullptr) > 0) t.executor.RunAll();
  EXPECT_EQ(source->live_pins(), 0);
  EXPECT_EQ(t.share->open_entries(), 0u);
}

// Oldest-first fairness: one hot partition and a stream of requests that all probe it. Each
// scan of it scores at most max_queries_per_scan queries, and every request answers while new
// ones keep arriving: each read of the hot partition (one per round, oldest first) answers the
// `cap` oldest waiting requests, so request i answers by round i / cap, never after a younger
// one, and with the brute-force answer of that partition.
TEST(ScanShare, AHotPartitionsStreamOfJoinersNeitherStarvesOlderRequestsNorGrowsScans) {
  const Data data(2000, 16, 61);
  auto segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kFlat, 8, false),
                                        data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<HeldSource>(segment, false);
  const size_t cap = 4;
  ScanObserver observer;
  auto share = observer.Share(cap);
  ManualExecutor executor(1);
  // More arrive per round than one scan takes: the hot partition is always being joined.
  const size_t rounds = 30, per_round = cap + 1, num = rounds * per_round;
  const auto hot = data.Queries(1, 62);
  Answers answers(num);
  std::vector<size_t> answered_in_round(num, SIZE_MAX);
  for (size_t round = 0; round < rounds; ++round) {
    for (size_t j = 0; j < per_round; ++j) {
      IvfSearchRequest r = Request(data, hot, 1, {source->Ref(source)}, 1);
      r.share = share;
      IvfSearch(executor, std::move(r), answers.Callback(round * per_round + j));
    }
    executor.RunAll();
    source->Release(1, nullptr);  // oldest read first
    executor.RunAll();
    for (size_t i = 0; i < num; ++i) {
      if (answered_in_round[i] == SIZE_MAX && answers.Result(i).ok()) answered_in_round[i] = round;
    }
  }
  for (size_t i = 0; i < num; ++i) {
    if (i / cap < rounds) {
      EXPECT_LE(answered_in_round[i], i / cap)
          << "request " << i << " waited behind younger joiners";
    }
    if (i > 0) {
      EXPECT_LE(answered_in_round[i - 1], answered_in_round[i])
          << "request " << i << " answered before the older request " << i - 1;
    }
  }
  Drive(executor, *source, answers, nullptr);
  ASSERT_EQ(source->FetchedPartitions().size(), 1u) << "the requests probe one hot partition";
  const uint32_t p = *source->FetchedPartitions().begin();
  const std::vector<uint64_t> exact = ExactInPartition(*segment, p, hot.data(), 10);
  for (size_t i = 0; i < num; ++i) {
    ASSERT_TRUE(answers.Result(i).ok()) << i;
    EXPECT_EQ(Ids((*answers.Result(i))[0]), exact) << "request " << i;
  }
  EXPECT_LE(observer.most.load(), cap);
  EXPECT_EQ(observer.most.load(), cap) << "the hot partition's scans did not fill up";
  EXPECT_EQ(source->live_pins(), 0);
}

TEST(ScanShare, SharingOffGivesEveryScanOneRequest) {
  const Data data(2000, 16, 71);
  auto segment =
      std::make_shared<InMemorySegment>(TrainModel(data, 16, VectorEncoding::kFlat, 8, false),
                                        data.vectors.data(), data.ids.data(), data.n);
  auto source = std::make_shared<HeldSource>(segment, false);
  ScanObserver observer;
  auto share = observer.Share(64, /*share=*/false);
  ManualExecutor executor(1);
  const auto hot = data.Queries(1, 72);
  Answers answers(10);
  for (size_t i = 0; i < 10; ++i) {
    IvfSearchRequest r = Request(data, hot, 1, {source->Ref(source)}, 2);
    r.share = share;
    IvfSearch(executor, std::move(r), answers.Callback(i));
  }
  Drive(executor, *source, answers, nullptr);
  EXPECT_EQ(observer.most.load(), 1u);
  EXPECT_EQ(source->fetches(), 20u);
  EXPECT_EQ(observer.scans.load(), 20u);
}

}  // namespace
}  // namespace shoal::core::scan_share_test
