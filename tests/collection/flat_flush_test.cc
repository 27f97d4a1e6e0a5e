// FLAT collections (and IVF ones never built) flush into exact segments: the WAL is cut, the
// memtable released, and searches stay exact — before and after a restart.
#include <algorithm>
#include <future>
#include <random>

#include "core/exec/tbb_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::flat_flush_test {
namespace {

using testing::DeleteAndWait;
using testing::UpsertAndWait;

constexpr uint32_t kDim = 8;
constexpr size_t kRows = 60000;  // 60000 x 40 bytes: three exact slices of ~1 MiB

std::vector<PointRecord> Points(uint64_t first, uint64_t n) {
  std::mt19937 rng{uint32_t(first)};
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<PointRecord> points;
  for (uint64_t id = first; id < first + n; ++id) {
    PointRecord p{id, std::vector<float>(kDim),
                  id % 5 == 0 ? EncodeAttributes({{"a", int64_t(id)}}) : ""};
    for (float& x : p.vector) x = u(rng);
    points.push_back(std::move(p));
  }
  return points;
}

class FlatFlushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto scheduler = testing::BufferedPreadScheduler();
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    io_ = *std::move(scheduler);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    queries_.resize(kQueries * kDim);
    for (float& x : queries_) x = u(rng);
  }

  CollectionOptions Options() {
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = &cache_;
    options.build_memory_bytes = 1 << 20;
    return options;
  }

  std::unique_ptr<Collection> Create(core::IndexType type) {
    CollectionManifest m;
    m.name = "c";
    m.dim = kDim;
    m.index.type = type;
    m.index.nlist = 8;
    auto c = Collection::Create(DefaultFileSystem(), path_, m, Options());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  std::vector<core::QueryResult> Search(const Collection& c) {
    core::IvfSearchRequest r;
    SearchSnapshot snap = c.SearchView();
    r.segments = std::move(snap.segments);
    r.memtable = std::move(snap.memtable);
    r.queries = queries_;
    r.num_queries = kQueries;
    r.dim = kDim;
    r.k = 10;
    r.nprobe = 1;  // exact segments ignore it
    std::promise<absl::StatusOr<std::vector<core::QueryResult>>> promise;
    core::IvfSearch(cpu_, std::move(r), [&](absl::StatusOr<std::vector<core::QueryResult>> res) {
      promise.set_value(std::move(res));
    });
    auto got = promise.get_future().get();
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<core::QueryResult>{};
  }

  // Exact top-10 ids of each query over `live`.
  std::vector<std::vector<uint64_t>> BruteForce(const std::vector<PointRecord>& live) {
    std::vector<std::vector<uint64_t>> out;
    for (size_t q = 0; q < kQueries; ++q) {
      std::vector<std::pair<float, uint64_t>> d;
      for (const PointRecord& p : live) {
        float s = 0;
        for (uint32_t j = 0; j < kDim; ++j) {
          const float x = p.vector[j] - queries_[q * kDim + j];
          s += x * x;
        }
        d.push_back({s, p.id});
      }
      std::partial_sort(d.begin(), d.begin() + 10, d.end());
      std::vector<uint64_t> ids;
      for (size_t i = 0; i < 10; ++i) ids.push_back(d[i].second);
      out.push_back(ids);
    }
    return out;
  }

  static std::vector<std::vector<uint64_t>> Ids(const std::vector<core::QueryResult>& r) {
    std::vector<std::vector<uint64_t>> out;
    for (const auto& q : r) {
      std::vector<uint64_t> ids;
      for (const auto& n : q.neighbors) ids.push_back(n.id);
      out.push_back(ids);
    }
    return out;
  }

  uint64_t WalBytes() {
    uint64_t total = 0;
    auto names = DefaultFileSystem()->ListDir(path_ + "/wal");
    for (const std::string& n : names.ok() ? *names : std::vector<std::string>{}) {
      total += DefaultFileSystem()->FileSize(path_ + "/wal/" + n).value_or(0);
    }
    return total;
  }

  static constexpr size_t kQueries = 20;
  testing::TempDir dir_;
  const std::string path_ = dir_.Sub("c");
  std::unique_ptr<IoScheduler> io_;
  PartitionCache cache_{8 << 20};
  core::TbbExecutor cpu_{2};
  std::vector<float> queries_;
};

TEST_F(FlatFlushTest, AFlushedFlatCollectionHasASegmentAShortWalAndAnswersIdenticallyAfterRestart) {
  auto c = Create(core::IndexType::kFlat);
  ASSERT_NE(c, nullptr);
  std::vector<PointRecord> live = Points(0, kRows);
  for (size_t i = 0; i < kRows; i += 1000) {
    ASSERT_TRUE(UpsertAndWait(*c, {live.begin() + long(i), live.begin() + long(i + 1000)}).ok());
  }
  const uint64_t wal_before = WalBytes();
  auto flushed = c->Flush(cpu_);
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  EXPECT_NE(flushed->find("exact segment"), std::string::npos) << *flushed;
  CollectionStats stats = c->Stats();
  EXPECT_EQ(stats.num_segments, 1u);
  EXPECT_EQ(stats.memtable_rows, 0u);
  EXPECT_EQ(stats.num_vectors, kRows);
  EXPECT_LT(WalBytes(), wal_before / 100);  // the WAL is cut: only the new file's header
  const auto expected = BruteForce(live);
  EXPECT_EQ(Ids(Search(*c)), expected);

  // Deletes and overwrites after the flush, then a restart.
  ASSERT_TRUE(DeleteAndWait(*c, {expected[0][0], expected[1][0]}).ok());
  live.erase(std::remove_if(live.begin(), live.end(),
                            [&](const PointRecord& p) {
                              return p.id == expected[0][0] || p.id == expected[1][0];
                            }),
             live.end());
  const auto before_restart = Search(*c);
  EXPECT_EQ(Ids(before_restart), BruteForce(live));
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  auto reopened = Collection::Open(DefaultFileSystem(), path_, Options());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const auto after = Search(**reopened);
  ASSERT_EQ(after.size(), before_restart.size());
  for (size_t q = 0; q < after.size(); ++q) {
    ASSERT_EQ(after[q].neighbors.size(), before_restart[q].neighbors.size());
    for (size_t i = 0; i < after[q].neighbors.size(); ++i) {
      EXPECT_EQ(after[q].neighbors[i].id, before_restart[q].neighbors[i].id);
      EXPECT_EQ(after[q].neighbors[i].distance, before_restart[q].neighbors[i].distance);
    }
  }
  const auto got = (*reopened)->Get({5, 10}, true);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].attributes, EncodeAttributes({{"a", int64_t(10)}}));
  EXPECT_EQ(got[1].vector, Points(0, kRows)[10].vector);
}

TEST_F(FlatFlushTest, FlushesBeyondTheSegmentLimitMergeIntoOneExactSegment) {
  auto c = Create(core::IndexType::kFlat);
  ASSERT_NE(c, nullptr);
  std::vector<PointRecord> live;
  for (uint64_t round = 0; round <= Collection::kMaxSegments; ++round) {
    auto batch = Points(round * 500, 500);
    live.insert(live.end(), batch.begin(), batch.end());
    ASSERT_TRUE(UpsertAndWait(*c, std::move(batch)).ok());
    ASSERT_TRUE(c->Flush(cpu_).ok());
  }
  EXPECT_EQ(c->Stats().num_segments, 1u);
  EXPECT_EQ(c->Stats().num_vectors, live.size());
  EXPECT_EQ(Ids(Search(*c)), BruteForce(live));
}

TEST_F(FlatFlushTest, AnIvfCollectionNeverBuiltFlushesExactlyThenBuildsFromTheSegment) {
  auto c = Create(core::IndexType::kIvfFlat);
  ASSERT_NE(c, nullptr);
  const std::vector<PointRecord> live = Points(0, 3000);
  ASSERT_TRUE(UpsertAndWait(*c, live).ok());
  ASSERT_TRUE(c->Flush(cpu_).ok());
  EXPECT_EQ(c->Stats().num_segments, 1u);
  EXPECT_EQ(Ids(Search(*c)), BruteForce(live));
  auto built = c->BuildIndex(cpu_);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(c->Stats().num_segments, 1u);
  EXPECT_EQ(c->Stats().num_vectors, live.size());
  EXPECT_FALSE(c->SearchView().segments[0].model->exact);
}

}  // namespace
}  // namespace shoal::storage::flat_flush_test
