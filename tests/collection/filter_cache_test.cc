// A filter's selection in a segment is evaluated once and then shared from the cache's
// SelectionCache (storage/cache/selection_cache.h): a repeated filter gets the very selection
// the first search built, deletes of unselected rows leave it shared, a delete of a selected
// row is taken out of a copy (never out of the cached entry), and without a budget every search
// evaluates the filter afresh — with the same rows each way.
#include <algorithm>
#include <future>
#include <random>

#include "core/exec/tbb_executor.h"
#include "core/filter/filter.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::filter_cache_test {
namespace {

using testing::DeleteAndWait;
using testing::UpsertAndWait;

constexpr uint32_t kDim = 8;
constexpr size_t kRows = 3000, kQueries = 10;

// Attribute a = id % 100 on every point.
std::vector<PointRecord> Points() {
  std::mt19937 rng{5};
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<PointRecord> points;
  for (uint64_t id = 0; id < kRows; ++id) {
    PointRecord p{id, std::vector<float>(kDim), EncodeAttributes({{"a", int64_t(id % 100)}})};
    for (float& x : p.vector) x = u(rng);
    points.push_back(std::move(p));
  }
  return points;
}

core::filter::Filter Parse(std::string_view text) {
  auto f = core::filter::Filter::Parse(text);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

// Both answers of every query were exact_matches, `read` with reads and `in_memory` without,
// and they name the same neighbours at the same distances.
void ExpectSameExactAnswers(const std::vector<core::QueryResult>& read,
                            const std::vector<core::QueryResult>& in_memory) {
  ASSERT_EQ(read.size(), in_memory.size());
  for (size_t q = 0; q < read.size(); ++q) {
    EXPECT_EQ(read[q].stats.plan, core::FilterPlan::kExactMatches);
    EXPECT_EQ(in_memory[q].stats.plan, core::FilterPlan::kExactMatches);
    EXPECT_GT(read[q].stats.bytes_read, 0u) << q;
    EXPECT_EQ(in_memory[q].stats.bytes_read, 0u) << q;
    ASSERT_EQ(read[q].neighbors.size(), in_memory[q].neighbors.size()) << q;
    for (size_t i = 0; i < read[q].neighbors.size(); ++i) {
      EXPECT_EQ(read[q].neighbors[i].id, in_memory[q].neighbors[i].id) << q << " " << i;
      EXPECT_EQ(read[q].neighbors[i].distance, in_memory[q].neighbors[i].distance) << q;
    }
  }
}

class FilterCacheTest : public ::testing::Test {
 protected:
  // A built IVF_FLAT collection whose segments use `cache`, in `name`.
  std::unique_ptr<Collection> Build(PartitionCache* cache, const std::string& name = "c") {
    if (!io_) {  // one scheduler for all the test's collections, outliving each of them
      auto scheduler = testing::BufferedPreadScheduler();
      EXPECT_TRUE(scheduler.ok()) << scheduler.status();
      io_ = *std::move(scheduler);
    }
    CollectionManifest m;
    m.name = "c";
    m.dim = kDim;
    m.index.type = core::IndexType::kIvfFlat;
    m.index.nlist = 8;
    auto c = Collection::Create(DefaultFileSystem(), dir_.Sub(name), m, Options(cache));
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    EXPECT_TRUE(UpsertAndWait(**c, Points()).ok());
    auto built = (*c)->BuildIndex(cpu_);
    EXPECT_TRUE(built.ok()) << built.status();
    EXPECT_EQ((*c)->SearchView().segments.size(), 1u);
    return *std::move(c);
  }

  CollectionOptions Options(PartitionCache* cache) const {
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = cache;
    options.max_indexed_fields = max_indexed_fields_;
    return options;
  }

  static std::shared_ptr<const core::RowSelection> Selection(const Collection& c,
                                                             const core::filter::Filter& f) {
    SearchSnapshot snap = c.SearchView(&f);
    EXPECT_EQ(snap.segments.size(), 1u);
    return snap.segments.empty() ? nullptr : snap.segments[0].selection;
  }

  static std::vector<uint64_t> SortedIds(const core::RowSelection& s) {
    std::vector<uint64_t> ids = s.listed_ids();
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  static std::vector<uint64_t> IdsWithAUnder(uint64_t bound, std::vector<uint64_t> dead = {}) {
    std::vector<uint64_t> ids;
    for (uint64_t id = 0; id < kRows; ++id) {
      if (id % 100 < bound && std::find(dead.begin(), dead.end(), id) == dead.end()) {
        ids.push_back(id);
      }
    }
    return ids;
  }

  // A filtered search of the first `nq` of kQueries queries (k 10) over the snapshot `f`
  // selects.
  std::vector<core::QueryResult> Search(const Collection& c, const core::filter::Filter& f,
                                        std::shared_ptr<const core::RowSelection>* used,
                                        size_t nq = kQueries) {
    return Run(c, &f, used, nq, /*nprobe=*/2);
  }

  // `f` null: unfiltered, and `used` is left alone.
  std::vector<core::QueryResult> Run(const Collection& c, const core::filter::Filter* f,
                                     std::shared_ptr<const core::RowSelection>* used, size_t nq,
                                     uint32_t nprobe) {
    core::IvfSearchRequest r;
    SearchSnapshot snap = c.SearchView(f);
    EXPECT_EQ(snap.segments.size(), 1u);
    if (f && !snap.segments.empty()) *used = snap.segments[0].selection;
    r.segments = std::move(snap.segments);
    r.memtable = std::move(snap.memtable);
    r.memtable_selection = std::move(snap.memtable_selection);
    r.filtered = f != nullptr;
    std::mt19937 rng{9};
    std::uniform_real_distribution<float> u(-1, 1);
    r.queries.resize(kQueries * kDim);
    for (float& x : r.queries) x = u(rng);
    r.queries.resize(nq * kDim);
    r.num_queries = nq;
    r.dim = kDim;
    r.k = 10;
    r.nprobe = nprobe;
    std::promise<absl::StatusOr<std::vector<core::QueryResult>>> promise;
    core::IvfSearch(cpu_, std::move(r), [&](absl::StatusOr<std::vector<core::QueryResult>> res) {
      promise.set_value(std::move(res));
    });
    auto got = promise.get_future().get();
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<core::QueryResult>{};
  }

  uint32_t max_indexed_fields_ = AttributeColumns::kDefaultMaxIndexedFields;
  core::TbbExecutor cpu_{1};
  std::unique_ptr<IoScheduler> io_;
  testing::TempDir dir_;
};

TEST_F(FilterCacheTest, ARepeatedFilterSharesOneSelectionAndDeletesAreTakenOutOfACopy) {
  PartitionCache cache(64 << 20, 0, 0, 1 << 20);
  auto c = Build(&cache);
  ASSERT_NE(c, nullptr);
  const core::filter::Filter f = Parse("a < 3");
  auto first = Selection(*c, f);
  ASSERT_NE(first, nullptr);
  ASSERT_TRUE(first->listed());
  EXPECT_EQ(SortedIds(*first), IdsWithAUnder(3));
  EXPECT_EQ(Selection(*c, f), first);  // evaluated once
  EXPECT_EQ(cache.selections().stats().hits, 1u);
  EXPECT_EQ(cache.selections().stats().misses, 1u);

  // A delete of a row the filter does not select: still the cached selection.
  ASSERT_TRUE(DeleteAndWait(*c, {50}).ok());
  EXPECT_EQ(Selection(*c, f), first);

  // A delete of a selected row: a selection without it; the cached entry keeps every match.
  ASSERT_TRUE(DeleteAndWait(*c, {101}).ok());
  auto after = Selection(*c, f);
  ASSERT_NE(after, nullptr);
  EXPECT_NE(after, first);
  EXPECT_EQ(SortedIds(*after), IdsWithAUnder(3, {101}));
  EXPECT_EQ(after->matches(), first->matches() - 1);
  EXPECT_EQ(SortedIds(*first), IdsWithAUnder(3));
  // The filter was not evaluated again: the one new miss is the copy under these deletes,
  // which is cached in turn.
  EXPECT_EQ(cache.selections().stats().misses, 2u);
  EXPECT_EQ(Selection(*c, f), after);

  // Another filter is another entry.
  const core::filter::Filter g = Parse("a >= 97");
  auto other = Selection(*c, g);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->matches(), kRows / 100 * 3);
  EXPECT_EQ(cache.selections().stats().misses, 3u);
}

TEST_F(FilterCacheTest, FewMatchesOfARepeatedFilterKeepTheirVectorsAndAreScoredInPlace) {
  PartitionCache cache(64 << 20, 0, 16 << 20, 16 << 20);
  auto c = Build(&cache);
  ASSERT_NE(c, nullptr);
  const core::filter::Filter f = Parse("a < 3");
  std::shared_ptr<const core::RowSelection> first, second, third;
  const auto read = Search(*c, f, &first);  // evaluates, then reads the 90 matches' rows
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->listed_vectors(), nullptr);
  const uint64_t row_hits = cache.rows().stats().hits;
  const auto in_place = Search(*c, f, &second);    // the row cache holds them: kept, in place
  EXPECT_EQ(cache.rows().stats().hits, row_hits);  // scored without asking the row cache
  ASSERT_NE(second, nullptr);
  ASSERT_NE(second->listed_vectors(), nullptr);
  EXPECT_EQ(second->words(), first->words());
  EXPECT_EQ(second->listed_ids(), first->listed_ids());
  const std::vector<PointRecord> points = Points();
  for (size_t i = 0; i < second->listed_ids().size(); ++i) {
    const std::vector<float>& v = points[second->listed_ids()[i]].vector;
    EXPECT_TRUE(std::equal(v.begin(), v.end(), second->listed_vectors() + i * kDim)) << i;
  }
  const auto one_at_a_time = Search(*c, f, &third, 3);  // under 8 queries: no sgemm
  EXPECT_EQ(third, second);  // the cached entry is now the one with vectors
  for (size_t q = 0; q < one_at_a_time.size(); ++q) {
    ASSERT_EQ(one_at_a_time[q].neighbors.size(), read[q].neighbors.size()) << q;
    for (size_t i = 0; i < read[q].neighbors.size(); ++i) {
      EXPECT_EQ(one_at_a_time[q].neighbors[i].id, read[q].neighbors[i].id) << q << " " << i;
      EXPECT_EQ(one_at_a_time[q].neighbors[i].distance, read[q].neighbors[i].distance) << q;
    }
  }
  // A delete of a selected row: a copy without it, with the other rows' vectors.
  ASSERT_TRUE(DeleteAndWait(*c, {101}).ok());
  auto live = Selection(*c, f);
  ASSERT_NE(live, nullptr);
  ASSERT_NE(live->listed_vectors(), nullptr);
  EXPECT_EQ(SortedIds(*live), IdsWithAUnder(3, {101}));
  for (size_t i = 0; i < live->listed_ids().size(); ++i) {
    const std::vector<float>& v = points[live->listed_ids()[i]].vector;
    EXPECT_TRUE(std::equal(v.begin(), v.end(), live->listed_vectors() + i * kDim)) << i;
  }
  EXPECT_EQ(Selection(*c, f), live);  // the copy is cached under these deletes
  // An unselected delete: another set of deletes, so another copy, with the same rows.
  ASSERT_TRUE(DeleteAndWait(*c, {7}).ok());
  auto after_other = Selection(*c, f);
  EXPECT_EQ(SortedIds(*after_other), IdsWithAUnder(3, {101}));
  ASSERT_TRUE(DeleteAndWait(*c, {202}).ok());  // selected: a new copy
  auto after_second = Selection(*c, f);
  EXPECT_NE(after_second, live);
  EXPECT_EQ(SortedIds(*after_second), IdsWithAUnder(3, {101, 202}));
  ExpectSameExactAnswers(read, in_place);
}

// An IVF_FLAT partition is its rows' vectors: once the partition cache holds the partitions,
// the exact_matches plan reads its rows from them — no read, no RowCache copy — and answers
// as it does from the disk.
TEST_F(FilterCacheTest, ExactMatchesOnCachedFlatPartitionsReadNothing) {
  PartitionCache cache(64 << 20, 0, 16 << 20, 0);  // no filter cache: every search reads rows
  auto c = Build(&cache);
  ASSERT_NE(c, nullptr);
  const core::filter::Filter f = Parse("a < 3");
  std::shared_ptr<const core::RowSelection> used;
  const auto from_disk = Search(*c, f, &used);
  const RowCacheStats before = cache.rows().stats();
  EXPECT_GT(before.misses, 0u);
  Run(*c, nullptr, &used, kQueries, /*nprobe=*/8);  // every partition, now cached
  const auto from_partitions = Search(*c, f, &used);
  EXPECT_EQ(cache.rows().stats().hits, before.hits);
  EXPECT_EQ(cache.rows().stats().misses, before.misses);
  ExpectSameExactAnswers(from_disk, from_partitions);
}

TEST_F(FilterCacheTest, WithoutABudgetEverySearchEvaluatesTheFilterToTheSameRows) {
  PartitionCache cache(64 << 20);
  auto c = Build(&cache);
  ASSERT_NE(c, nullptr);
  const core::filter::Filter f = Parse("a < 3");
  auto first = Selection(*c, f);
  auto second = Selection(*c, f);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first, second);
  EXPECT_EQ(first->words(), second->words());
  EXPECT_EQ(SortedIds(*second), IdsWithAUnder(3));
  ASSERT_TRUE(DeleteAndWait(*c, {2}).ok());
  EXPECT_EQ(SortedIds(*Selection(*c, f)), IdsWithAUnder(3, {2}));
  EXPECT_EQ(cache.selections().stats().used_bytes, 0u);
}

// filter.max_indexed_fields reaches the segments, as built and as reopened: with value indexes
// the attributes take more memory and select the same rows.
TEST_F(FilterCacheTest, ValueIndexesFollowMaxIndexedFieldsAndSelectTheSameRows) {
  PartitionCache cache(64 << 20);  // no filter cache: every Selection evaluates
  max_indexed_fields_ = 0;
  auto scanned = Build(&cache, "scanned");
  max_indexed_fields_ = AttributeColumns::kDefaultMaxIndexedFields;
  auto indexed = Build(&cache, "indexed");
  ASSERT_NE(scanned, nullptr);
  ASSERT_NE(indexed, nullptr);
  const uint64_t scanned_bytes = scanned->Stats().attribute_memory_bytes;
  EXPECT_GT(indexed->Stats().attribute_memory_bytes, scanned_bytes);
  indexed.reset();
  auto reopened = Collection::Open(DefaultFileSystem(), dir_.Sub("indexed"), Options(&cache));
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_GT((*reopened)->Stats().attribute_memory_bytes, scanned_bytes);
  for (const char* text : {"a = 7", "a in [1, 2, 50]", "a < 3", "a != 4"}) {
    const core::filter::Filter f = Parse(text);
    EXPECT_EQ(SortedIds(*Selection(**reopened, f)), SortedIds(*Selection(*scanned, f))) << text;
  }
  EXPECT_EQ(SortedIds(*Selection(**reopened, Parse("a = 7"))).size(), kRows / 100);
}

}  // namespace
}  // namespace shoal::storage::filter_cache_test
