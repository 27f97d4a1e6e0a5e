// Filtered searches in the engine: each segment's RowSelection (and the memtable's) decides
// which rows may answer; every query gets min(k, selected rows) of them; a selective filter
// widens the probes, a broad one keeps nprobe; shared scans keep each request's own filter.
#include <random>

#include "absl/container/flat_hash_set.h"
#include "core/exec/tbb_executor.h"
#include "core/index/ivf_search.h"
#include "core/index/row_selection.h"
#include "gtest/gtest.h"
#include "tests/fakes/fake_partition_source.h"
#include "tests/index/ivf_search_helpers.h"

namespace shoal::core::filtered_search_test {
namespace {

using testing::FakePartitionSource;
using testing::InMemorySegment;
using Mode = FakePartitionSource::Mode;
using namespace test_util;  // NOLINT(build/namespaces)

constexpr size_t kInSegment = 3000, kRows = 4000, kDim = 16;

// Selected: ids whose hash falls in 1 of `one_in` buckets (every row when one_in is 1).
bool Chosen(uint64_t id, uint64_t one_in) {
  return (id * 0x9E3779B97F4A7C15ull >> 40) % one_in == 0;
}

// The selected ids among rows [begin, end) of data, and their exact nearest min(k, count).
std::vector<uint64_t> ExactAmong(const Data& data, const float* q, size_t k,
                                 const absl::flat_hash_set<uint64_t>& selected) {
  std::vector<std::pair<float, uint64_t>> all;
  for (size_t i = 0; i < data.n; ++i) {
    if (!selected.contains(data.ids[i])) continue;
    all.push_back({L2Sqr(q, data.vectors.data() + i * data.dim, data.dim), data.ids[i]});
  }
  std::sort(all.begin(), all.end());
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < std::min(k, all.size()); ++i) ids.push_back(all[i].second);
  return ids;
}

struct Fixture {
  Data data{kRows, kDim, 21};
  std::shared_ptr<InMemorySegment> segment;
  std::shared_ptr<FakePartitionSource> source;
  FlatView memtable;

  explicit Fixture(VectorEncoding encoding, Mode mode = Mode::kInline, uint32_t nlist = 32) {
    auto model = Train(data, nlist, encoding);
    segment =
        std::make_shared<InMemorySegment>(model, data.vectors.data(), data.ids.data(), kInSegment);
    source = std::make_shared<FakePartitionSource>(segment, mode);
    memtable.dim = kDim;
    memtable.blocks.push_back(
        {&data.vectors[kInSegment * kDim], &data.ids[kInSegment], nullptr, kRows - kInSegment});
  }

  // A request whose selections hold the rows Chosen(id, one_in) picks; `list`: the segment's
  // selection also lists their ids, as the storage layer does for few matches.
  IvfSearchRequest Filtered(const std::vector<float>& queries, size_t nq, uint64_t one_in,
                            absl::flat_hash_set<uint64_t>* selected, bool list = false) {
    IvfSegmentRef ref = source->Ref(source);
    auto seg_select = std::make_shared<RowSelection>(ref.partition_rows);
    std::vector<uint64_t> listed;
    for (uint32_t p = 0; p < segment->ids.size(); ++p) {
      for (uint32_t r = 0; r < segment->ids[p].size(); ++r) {
        if (!Chosen(segment->ids[p][r], one_in)) continue;
        seg_select->Select(p, r);
        selected->insert(segment->ids[p][r]);
        listed.push_back(segment->ids[p][r]);
      }
    }
    if (list) seg_select->SetListedIds(std::move(listed));
    auto mem_select = std::make_shared<RowSelection>(std::vector<uint64_t>{kRows - kInSegment});
    for (uint32_t r = 0; r < kRows - kInSegment; ++r) {
      if (!Chosen(data.ids[kInSegment + r], one_in)) continue;
      mem_select->Select(0, r);
      selected->insert(data.ids[kInSegment + r]);
    }
    ref.selection = seg_select;
    IvfSearchRequest req = Request(data, queries, nq, {ref}, 4);
    req.memtable = memtable;
    req.filtered = true;
    req.memtable_selection = mem_select;
    return req;
  }
};

TEST(RowSelection, CountsPerPartitionAndInRanges) {
  RowSelection s({3, 0, 130});
  s.Select(0, 2);
  s.Select(2, 0);
  s.Select(2, 64);
  s.Select(2, 129);
  s.Select(2, 129);  // once
  EXPECT_EQ(s.matches(), 4u);
  EXPECT_EQ(s.matches_in(0), 1u);
  EXPECT_EQ(s.matches_in(1), 0u);
  EXPECT_EQ(s.matches_in(2), 3u);
  EXPECT_TRUE(s.Selected(2, 64));
  EXPECT_FALSE(s.Selected(2, 63));
  EXPECT_FALSE(s.Selected(0, 1));
  EXPECT_EQ(s.CountRange(2, 0, 130), 3u);
  EXPECT_EQ(s.CountRange(2, 1, 129), 1u);
  EXPECT_EQ(s.CountRange(2, 64, 65), 1u);
  EXPECT_EQ(s.CountRange(0, 0, 2), 0u);
}

TEST(RowSelection, ListsTheSelectedRowsInRowOrder) {
  RowSelection s({3, 0, 130, 1});
  s.Select(2, 129);
  s.Select(0, 2);
  s.Select(2, 63);
  s.Select(2, 64);
  s.Select(3, 0);
  std::vector<std::pair<uint32_t, uint32_t>> rows;
  for (const RowRef& r : s.SelectedRows()) rows.push_back({r.partition, r.row});
  EXPECT_EQ(rows, (std::vector<std::pair<uint32_t, uint32_t>>{
                      {0, 2}, {2, 63}, {2, 64}, {2, 129}, {3, 0}}));
  EXPECT_FALSE(s.listed());
  s.SetListedIds({7, 8, 9, 10, 11});
  EXPECT_TRUE(s.listed());
  EXPECT_EQ(s.listed_ids().size(), 5u);
  EXPECT_TRUE(RowSelection({0, 0}).SelectedRows().empty());
}

TEST(FilteredSearch, FewListedMatchesAreReadAndScoredExactlyWithoutFetchingPartitions) {
  for (VectorEncoding encoding : {VectorEncoding::kFlat, VectorEncoding::kSq8}) {
    for (Mode mode : {Mode::kInline, Mode::kHeld}) {
      Fixture f(encoding, mode);
      TbbExecutor executor(1);
      const size_t nq = 5;
      const auto queries = f.data.Queries(nq, 31);
      absl::flat_hash_set<uint64_t> selected;
      IvfSearchRequest req = f.Filtered(queries, nq, 40, &selected, /*list=*/true);
      req.refine_factor = 2;
      const uint64_t in_segment = req.segments[0].selection->matches();
      ASSERT_GT(in_segment, 10u);
      ASSERT_LE(in_segment, 200u);
      Answers answers(1);
      IvfSearch(executor, std::move(req), answers.Callback(0));
      std::mt19937 rng(3);
      while (!answers.AllAnswered()) {
        if (f.source->ReleaseSome(1, rng) == 0) std::this_thread::yield();
      }
      auto results = answers.Result(0);
      ASSERT_TRUE(results.ok()) << results.status();
      for (size_t q = 0; q < nq; ++q) {
        const QueryResult& r = (*results)[q];
        EXPECT_EQ(Ids(r), ExactAmong(f.data, &queries[q * kDim], 10, selected)) << q;
        EXPECT_EQ(r.stats.plan, FilterPlan::kExactMatches);
        EXPECT_EQ(r.stats.partitions_probed, 0u);
        EXPECT_EQ(r.stats.rows_matched, selected.size());
        EXPECT_GE(r.stats.matching_rows_scanned, in_segment);
      }
      EXPECT_EQ(f.source->fetches(), 0u);
      EXPECT_EQ(f.source->live_pins(), 0);
    }
  }
}

TEST(FilteredSearch, ListedMatchesPastTheExactLimitWalkThePartitions) {
  // SQ8 codes are about a third of the raw vectors' bytes here: 600 matches (a fifth of the
  // rows) cost more read exactly than the walk that scans 200 of them (20 * k) through ~1000
  // rows' codes; FLAT at every row costs more than the nprobe partitions' scan.
  struct Case {
    VectorEncoding encoding;
    uint64_t one_in;
  };
  for (const Case& c : {Case{VectorEncoding::kSq8, 5}, Case{VectorEncoding::kFlat, 1}}) {
    Fixture f(c.encoding);
    TbbExecutor executor(1);
    const auto queries = f.data.Queries(3, 33);
    absl::flat_hash_set<uint64_t> selected;
    IvfSearchRequest req = f.Filtered(queries, 3, c.one_in, &selected, /*list=*/true);
    auto results = RunSync(executor, std::move(req));
    ASSERT_TRUE(results.ok()) << results.status();
    for (const QueryResult& r : *results) {
      EXPECT_NE(r.stats.plan, FilterPlan::kExactMatches);
      EXPECT_GT(r.stats.partitions_probed, 0u);
      EXPECT_EQ(r.neighbors.size(), 10u);
    }
  }
}

// Matches that fill a few partitions (a clustered filter) cost more read exactly than a
// query's walk over its nearest of them: the segment is routed over those partitions alone and
// each query walks them (selective_ivf), passing over every other partition, where the
// segment's density alone would have priced every query into exact_matches.
TEST(FilteredSearch, AClusteredSelectionIsWalkedOverItsOwnPartitionsPerQuery) {
  Fixture f(VectorEncoding::kFlat);
  TbbExecutor executor(1);
  const size_t nq = 4;
  const auto queries = f.data.Queries(nq, 35);
  IvfSegmentRef ref = f.source->Ref(f.source);
  const uint32_t nlist = uint32_t(ref.partition_rows.size()), clustered = nlist / 4;
  auto select = std::make_shared<RowSelection>(ref.partition_rows);
  absl::flat_hash_set<uint64_t> selected;
  std::vector<uint64_t> listed;
  for (uint32_t p = 0; p < clustered; ++p) {
    for (uint32_t r = 0; r < f.segment->ids[p].size(); ++r) {
      select->Select(p, r);
      selected.insert(f.segment->ids[p][r]);
      listed.push_back(f.segment->ids[p][r]);
    }
  }
  select->SetListedIds(std::move(listed));
  const uint64_t matches = select->matches();
  ASSERT_GT(matches, 200u);  // past 20 * k: priced, not exact_matches outright
  ref.selection = select;
  IvfSearchRequest req = Request(f.data, queries, nq, {ref}, /*nprobe=*/1);
  req.filtered = true;
  req.memtable_selection = std::make_shared<RowSelection>(std::vector<uint64_t>{});
  auto results = RunSync(executor, std::move(req));
  ASSERT_TRUE(results.ok()) << results.status();
  size_t found = 0;
  for (size_t q = 0; q < nq; ++q) {
    const QueryResult& r = (*results)[q];
    EXPECT_EQ(r.stats.plan, FilterPlan::kSelectiveIvf) << q;
    EXPECT_EQ(r.stats.partitions_skipped, nlist - clustered) << q;
    EXPECT_GT(r.stats.partitions_probed, 0u);
    EXPECT_LT(r.stats.matching_rows_scanned, matches);
    ASSERT_EQ(r.neighbors.size(), 10u);
    for (uint64_t id : Ids(r)) EXPECT_TRUE(selected.contains(id)) << id;
    const std::vector<uint64_t> truth = ExactAmong(f.data, &queries[q * kDim], 10, selected);
    for (uint64_t id : Ids(r)) found += std::count(truth.begin(), truth.end(), id);
  }
  EXPECT_GE(found, nq * 10 / 2);  // a walk, not a guess: most of the exact answer
  EXPECT_GT(f.source->fetches(), 0u);
}

TEST(FilteredSearch, ACancelledExactMatchesSearchAnswersCancelled) {
  Fixture f(VectorEncoding::kFlat, Mode::kHeld);
  TbbExecutor executor(1);
  const auto queries = f.data.Queries(2, 35);
  absl::flat_hash_set<uint64_t> selected;
  IvfSearchRequest req = f.Filtered(queries, 2, 40, &selected, /*list=*/true);
  auto cancel = std::make_shared<CancelToken>();
  req.cancel = cancel;
  Answers answers(1);
  IvfSearch(executor, std::move(req), answers.Callback(0));
  while (f.source->held() == 0) std::this_thread::yield();
  cancel->Cancel();
  std::mt19937 rng(4);
  while (!answers.AllAnswered()) {
    if (f.source->ReleaseSome(1, rng) == 0) std::this_thread::yield();
  }
  EXPECT_EQ(answers.Result(0).status().code(), absl::StatusCode::kCancelled);
  while (f.source->ReleaseSome(8, rng) > 0) {
  }
}

TEST(FilteredSearch, EveryQueryGetsMinKSelectedRowsAndSelectiveOnesAreExact) {
  Fixture f(VectorEncoding::kFlat);
  TbbExecutor executor(2);
  const size_t nq = 8;
  const auto queries = f.data.Queries(nq, 4);
  for (uint64_t one_in : {2000ull, 400ull, 50ull, 10ull, 2ull, 1ull}) {
    absl::flat_hash_set<uint64_t> selected;
    IvfSearchRequest req = f.Filtered(queries, nq, one_in, &selected);
    auto results = RunSync(executor, std::move(req));
    ASSERT_TRUE(results.ok()) << results.status();
    double recall = 0;
    for (size_t q = 0; q < nq; ++q) {
      const QueryResult& r = (*results)[q];
      const auto truth = ExactAmong(f.data, &queries[q * kDim], 10, selected);
      ASSERT_EQ(r.neighbors.size(), std::min<size_t>(10, selected.size())) << one_in;
      for (const Neighbor& n : r.neighbors) EXPECT_TRUE(selected.contains(n.id)) << n.id;
      recall += truth.empty() ? 1 : Recall(Ids(r), truth);
      EXPECT_EQ(r.stats.rows_matched, selected.size());
      EXPECT_GE(r.stats.matching_rows_scanned, std::min<size_t>(10, selected.size()));
      // A selective filter (fewer selected rows than the unfiltered search scans, and at most
      // 20 * k) has every selected row scanned: the answer is exact.
      if (selected.size() <= 200) {
        EXPECT_EQ(Ids(r), truth) << one_in << " q" << q;
      }
      if (one_in == 1) {
        EXPECT_EQ(r.stats.plan, FilterPlan::kIvfBitmap);
      }
      if (one_in >= 400) {
        EXPECT_EQ(r.stats.plan, FilterPlan::kSelectiveIvf);
        EXPECT_GT(r.stats.partitions_skipped, 0u);
      }
    }
    EXPECT_GE(recall / nq, 0.9) << one_in;
  }
}

TEST(FilteredSearch, ABroadFilterProbesExactlyNprobePartitions) {
  // About half of each partition's rows selected — one row fewer in every other partition, as
  // sampling noise leaves some a little short of their fair share of the matches. A partition
  // at three quarters of its share or more counts as a whole probe (ProbeCredit), so the walk
  // takes the nprobe nearest partitions, as an unfiltered search would, not one more for a few
  // missing matches.
  Fixture f(VectorEncoding::kFlat);
  TbbExecutor executor(1);
  const size_t nq = 16;
  const auto queries = f.data.Queries(nq, 17);
  absl::flat_hash_set<uint64_t> selected;
  IvfSearchRequest req = f.Filtered(queries, nq, 2, &selected);
  req.options.filter_rows_per_k = 2;  // a budget the nprobe partitions' matches always cover
  const std::vector<uint64_t>& rows = req.segments[0].partition_rows;
  auto half = std::make_shared<RowSelection>(rows);
  for (uint32_t p = 0; p < rows.size(); ++p) {
    // One row fewer only where that leaves at least three quarters of the share.
    const uint64_t take =
        std::max<uint64_t>(1, rows[p] / 2 - (p % 2 == 1 && rows[p] >= 16 ? 1 : 0));
    for (uint32_t r = 0; r < take; ++r) half->Select(p, r);
  }
  req.segments[0].selection = half;
  auto results = RunSync(executor, std::move(req));
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t q = 0; q < nq; ++q) {
    EXPECT_EQ((*results)[q].stats.partitions_probed, 4u) << q;
    EXPECT_EQ((*results)[q].stats.plan, FilterPlan::kIvfBitmap) << q;
  }
}

TEST(FilteredSearch, OneProbeStillAnswersKWhenTheSegmentHasThem) {
  Fixture f(VectorEncoding::kSq8);
  TbbExecutor executor(1);
  const size_t nq = 16;
  const auto queries = f.data.Queries(nq, 12);
  for (uint64_t one_in : {300ull, 30ull, 3ull}) {
    absl::flat_hash_set<uint64_t> selected;
    IvfSearchRequest req = f.Filtered(queries, nq, one_in, &selected);
    req.nprobe = 1;
    req.options.filter_rows_per_k = 0;  // no budget: only I-10's floor is left
    req.memtable_selection = std::make_shared<RowSelection>(std::vector<uint64_t>{1000});
    size_t in_segment = req.segments[0].selection->matches();
    auto results = RunSync(executor, std::move(req));
    ASSERT_TRUE(results.ok()) << results.status();
    for (const QueryResult& r : *results) {
      EXPECT_EQ(r.neighbors.size(), std::min<size_t>(10, in_segment)) << one_in;
    }
  }
}

TEST(FilteredSearch, AQueryShortOfMatchesInItsFirstRouteIsRoutedOverEveryPartition) {
  // 128 partitions, nprobe 4: the first route holds 36 of them; a handful of selected rows
  // spread over the rest must still all be found.
  Fixture f(VectorEncoding::kFlat, Mode::kInline, 128);
  TbbExecutor executor(1);
  const size_t nq = 8;
  const auto queries = f.data.Queries(nq, 14);
  for (uint64_t one_in : {3000ull, 500ull}) {
    absl::flat_hash_set<uint64_t> selected;
    IvfSearchRequest req = f.Filtered(queries, nq, one_in, &selected);
    req.memtable_selection = std::make_shared<RowSelection>(std::vector<uint64_t>{1000});
    absl::flat_hash_set<uint64_t> in_segment;
    for (const auto& ids : f.segment->ids) {
      for (uint64_t id : ids) {
        if (selected.contains(id)) in_segment.insert(id);
      }
    }
    auto results = RunSync(executor, std::move(req));
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t q = 0; q < nq; ++q) {
      EXPECT_EQ(Ids((*results)[q]), ExactAmong(f.data, &queries[q * kDim], 10, in_segment))
          << one_in << " q" << q;
    }
  }
}

TEST(FilteredSearch, NoSelectedRowAnswersNothingAndReadsNoPartition) {
  Fixture f(VectorEncoding::kSq8);
  TbbExecutor executor(1);
  const auto queries = f.data.Queries(2, 5);
  absl::flat_hash_set<uint64_t> selected;
  IvfSearchRequest req = f.Filtered(queries, 2, 1, &selected);
  req.segments[0].selection = std::make_shared<RowSelection>(req.segments[0].partition_rows);
  req.memtable_selection = std::make_shared<RowSelection>(std::vector<uint64_t>{1000});
  req.refine_factor = 4;
  auto results = RunSync(executor, std::move(req));
  ASSERT_TRUE(results.ok()) << results.status();
  for (const QueryResult& r : *results) {
    EXPECT_TRUE(r.neighbors.empty());
    EXPECT_EQ(r.stats.partitions_probed, 0u);
    EXPECT_EQ(r.stats.rows_matched, 0u);
  }
  EXPECT_EQ(f.source->fetches(), 0u);
}

TEST(FilteredSearch, QuantizedSegmentsRefineOnlySelectedRows) {
  Fixture f(VectorEncoding::kSq8);
  TbbExecutor executor(2);
  const size_t nq = 6;
  const auto queries = f.data.Queries(nq, 8);
  absl::flat_hash_set<uint64_t> selected;
  IvfSearchRequest req = f.Filtered(queries, nq, 100, &selected);
  req.refine_factor = 8;
  auto results = RunSync(executor, std::move(req));
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t q = 0; q < nq; ++q) {
    EXPECT_EQ(Ids((*results)[q]), ExactAmong(f.data, &queries[q * kDim], 10, selected)) << q;
  }
}

TEST(FilteredSearch, SharedScansKeepEachRequestsOwnFilter) {
  Fixture f(VectorEncoding::kFlat, Mode::kHeld);
  TbbExecutor executor(1);
  auto share = std::make_shared<ScanShare>(ScanShare::Options{});
  const auto queries = f.data.Queries(1, 9);
  std::vector<uint64_t> one_in = {3, 7, 1};
  std::vector<absl::flat_hash_set<uint64_t>> selected(one_in.size());
  Answers answers(one_in.size());
  for (size_t i = 0; i < one_in.size(); ++i) {
    IvfSearchRequest req = f.Filtered(queries, 1, one_in[i], &selected[i]);
    req.share = share;
    IvfSearch(executor, std::move(req), answers.Callback(i));
  }
  std::mt19937 rng(2);
  while (!answers.AllAnswered()) {
    if (f.source->ReleaseSome(1 + rng() % 4, rng) == 0) std::this_thread::yield();
  }
  for (size_t i = 0; i < one_in.size(); ++i) {
    auto r = answers.Result(i);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const Neighbor& n : (*r)[0].neighbors) EXPECT_TRUE(selected[i].contains(n.id)) << i;
    EXPECT_GE(Recall(Ids((*r)[0]), ExactAmong(f.data, queries.data(), 10, selected[i])), 0.8);
  }
}

}  // namespace
}  // namespace shoal::core::filtered_search_test
