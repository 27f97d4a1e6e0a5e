// Refine's rows come from the cache's RowCache once read (storage/cache/row_cache.h): a
// repeated SQ8 search re-ranks without a single read, answers exactly what a search without
// the row cache answers, and a row cache too small for the shortlist still answers right.
#include <future>
#include <random>

#include "core/exec/tbb_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::refine_rows_test {
namespace {

using testing::UpsertAndWait;

constexpr uint32_t kDim = 24, kNlist = 8;
constexpr size_t kRows = 2000, kQueries = 16, kK = 10, kRefine = 4;

std::vector<PointRecord> Points(uint64_t first, uint64_t n) {
  std::mt19937 rng{uint32_t(first + 7)};
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<PointRecord> points;
  for (uint64_t id = first; id < first + n; ++id) {
    PointRecord p{id, std::vector<float>(kDim), ""};
    for (float& x : p.vector) x = u(rng);
    points.push_back(std::move(p));
  }
  return points;
}

class RefineRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto scheduler = testing::BufferedPreadScheduler();
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    io_ = *std::move(scheduler);
    for (const PointRecord& p : Points(1000000, kQueries)) {
      queries_.insert(queries_.end(), p.vector.begin(), p.vector.end());
    }
  }

  // A built IVF_SQ8 collection whose partitions and rows go through `cache`.
  std::unique_ptr<Collection> Build(const std::string& name, PartitionCache* cache) {
    CollectionManifest m;
    m.name = name;
    m.dim = kDim;
    m.index.type = core::IndexType::kIvfSq8;
    m.index.nlist = kNlist;
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = cache;
    auto c = Collection::Create(DefaultFileSystem(), dir_.Sub(name), m, options);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    EXPECT_TRUE(UpsertAndWait(**c, Points(0, kRows)).ok());
    auto built = (*c)->BuildIndex(cpu_);
    EXPECT_TRUE(built.ok()) << built.status();
    return *std::move(c);
  }

  std::vector<core::QueryResult> Search(const Collection& c) {
    core::IvfSearchRequest r;
    SearchSnapshot snap = c.SearchView();
    EXPECT_EQ(snap.segments.size(), 1u);
    r.segments = std::move(snap.segments);
    r.memtable = std::move(snap.memtable);
    r.queries = queries_;
    r.num_queries = kQueries;
    r.dim = kDim;
    r.k = kK;
    r.nprobe = 3;
    r.refine_factor = kRefine;
    std::promise<absl::StatusOr<std::vector<core::QueryResult>>> promise;
    core::IvfSearch(cpu_, std::move(r), [&](absl::StatusOr<std::vector<core::QueryResult>> res) {
      promise.set_value(std::move(res));
    });
    auto got = promise.get_future().get();
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<core::QueryResult>{};
  }

  static void ExpectSameAnswers(const std::vector<core::QueryResult>& a,
                                const std::vector<core::QueryResult>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t q = 0; q < a.size(); ++q) {
      ASSERT_EQ(a[q].neighbors.size(), b[q].neighbors.size()) << q;
      for (size_t i = 0; i < a[q].neighbors.size(); ++i) {
        EXPECT_EQ(a[q].neighbors[i].id, b[q].neighbors[i].id) << q << " " << i;
        EXPECT_EQ(a[q].neighbors[i].distance, b[q].neighbors[i].distance) << q << " " << i;
      }
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<IoScheduler> io_;
  core::TbbExecutor cpu_{2};
  std::vector<float> queries_;
};

TEST_F(RefineRowsTest, ARepeatedSearchReRanksFromTheRowCacheWithoutReads) {
  PartitionCache cache(64 << 20, 0, 8 << 20);
  auto c = Build("c", &cache);
  ASSERT_NE(c, nullptr);
  const auto first = Search(*c);
  const RowCacheStats after_first = cache.rows().stats();
  EXPECT_GT(after_first.misses, 0u);
  EXPECT_GT(after_first.used_bytes, 0u);
  const uint64_t reads = io_->stats().reads;
  const auto second = Search(*c);
  const RowCacheStats after_second = cache.rows().stats();
  EXPECT_EQ(after_second.misses, after_first.misses);  // every row was kept
  EXPECT_GE(after_second.hits - after_first.hits, kQueries * kK * kRefine);
  EXPECT_EQ(io_->stats().reads, reads);  // partitions from the partition cache, rows from rows()
  ExpectSameAnswers(first, second);
}

TEST_F(RefineRowsTest, AnswersDoNotDependOnTheRowCache) {
  // One segment on disk, opened over three caches: rows kept, none kept, and two rows per
  // shard (most of the shortlist is evicted as it is read).
  PartitionCache with(64 << 20, 0, 8 << 20), without(64 << 20, 0, 0), tiny(64 << 20, 0, 16 * 200);
  std::vector<core::QueryResult> expected;
  {
    auto c = Build("c", &without);
    ASSERT_NE(c, nullptr);
    expected = Search(*c);
    ASSERT_TRUE(c->Close().ok());
  }
  for (PartitionCache* cache : {&with, &tiny}) {
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = cache;
    auto c = Collection::Open(DefaultFileSystem(), dir_.Sub("c"), options);
    ASSERT_TRUE(c.ok()) << c.status();
    for (int round = 0; round < 2; ++round) ExpectSameAnswers(Search(**c), expected);
    ASSERT_TRUE((*c)->Close().ok());
  }
  EXPECT_EQ(without.rows().stats().used_bytes, 0u);
  EXPECT_GT(with.rows().stats().hits, 0u);
  EXPECT_LE(tiny.rows().stats().used_bytes, tiny.rows().budget());
  EXPECT_GT(tiny.rows().stats().evictions, 0u);
}

}  // namespace
}  // namespace shoal::storage::refine_rows_test
