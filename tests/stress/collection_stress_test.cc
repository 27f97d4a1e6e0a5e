// Stress: concurrent upserts, overwrites, deletes, flushes and searches on one IVF collection,
// through the live engine (core::IvfSearch over the collection's segments — read through the
// I/O scheduler and partition cache — and its memtable), with the search arena at one thread.
// Checks that every write is acknowledged, that searches never return a deleted-and-
// acknowledged id or an id twice (a row superseded in a segment must be hidden by the
// segment's dead filter), and that nothing hangs (watchdog). Runs under TSan in `make test`.
#include <future>
#include <random>
#include <set>
#include <thread>

#include "core/exec/tbb_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/collection.h"
#include "storage/sched/io_scheduler.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::collection_stress_test {
namespace {

using testing::UpsertAndWait;

constexpr uint32_t kDim = 16;
constexpr uint32_t kNlist = 4;

// Every partition of every segment is probed, so the answer is exact over the snapshot.
absl::StatusOr<std::vector<core::QueryResult>> Search(Collection& c, core::Executor& arena,
                                                      float value, size_t num_queries, size_t k) {
  const SearchSnapshot view = c.SearchView();
  core::IvfSearchRequest req;
  req.segments = view.segments;
  req.memtable = view.memtable;
  req.dim = kDim;
  req.num_queries = num_queries;
  req.queries.assign(num_queries * kDim, value);
  req.k = k;
  req.nprobe = kNlist;
  std::promise<absl::StatusOr<std::vector<core::QueryResult>>> done;
  core::IvfSearch(arena, std::move(req), [&](absl::StatusOr<std::vector<core::QueryResult>> r) {
    done.set_value(std::move(r));
  });
  return done.get_future().get();
}

class CollectionStress : public ::testing::Test {
 protected:
  void SetUp() override {
    auto scheduler = testing::BufferedPreadScheduler();
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    io_ = *std::move(scheduler);
    CollectionManifest manifest;
    manifest.name = "s";
    manifest.dim = kDim;
    manifest.index.type = core::IndexType::kIvfFlat;
    manifest.index.nlist = kNlist;
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = &cache_;
    auto created = Collection::Create(DefaultFileSystem(), dir_.Sub("s"), manifest, options);
    ASSERT_TRUE(created.ok()) << created.status();
    collection_ = *std::move(created);
  }
  void TearDown() override {
    if (collection_) {
      EXPECT_TRUE(collection_->Close().ok());
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<IoScheduler> io_;
  PartitionCache cache_{1 << 20};  // small: partitions are evicted and fetched again
  core::TbbExecutor arena_{1};
  std::unique_ptr<Collection> collection_;
};

TEST_F(CollectionStress, ConcurrentWritesFlushesAndSearchesStayConsistent) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "collection stress");
  Collection& c = *collection_;
  // Ids [0, 1000) are written, indexed into a segment, then rewritten concurrently (each
  // rewrite supersedes a segment row); ids [1000, 1100) are indexed, then deleted.
  std::vector<PointRecord> initial;
  for (uint64_t id = 0; id < 1000; ++id) {
    initial.push_back({id, std::vector<float>(kDim, float(id % 100)), ""});
  }
  ASSERT_TRUE(UpsertAndWait(c, initial).ok());
  std::vector<PointRecord> doomed;
  std::vector<uint64_t> doomed_ids;
  for (uint64_t id = 1000; id < 1100; ++id) {
    doomed.push_back({id, std::vector<float>(kDim, 0), ""});
    doomed_ids.push_back(id);
  }
  ASSERT_TRUE(UpsertAndWait(c, doomed).ok());
  auto built = c.BuildIndex(arena_);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_EQ(c.Stats().num_segments, 1u);
  std::promise<absl::StatusOr<uint64_t>> deleted;
  c.Delete(doomed_ids, [&](absl::StatusOr<uint64_t> n) { deleted.set_value(n); });
  absl::StatusOr<uint64_t> n = deleted.get_future().get();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 100u);

  std::atomic<int> acked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int round = 0; round < 50; ++round) {
        std::vector<PointRecord> points;
        for (int i = 0; i < 20; ++i) {
          points.push_back({rng() % 1000, std::vector<float>(kDim, float(rng() % 100)), ""});
        }
        ASSERT_TRUE(UpsertAndWait(c, std::move(points)).ok());
        acked.fetch_add(1);
      }
    });
  }
  // Flushes move memtable rows into new segments (and merge) while everything else runs.
  threads.emplace_back([&] {
    for (int i = 0; i < 3; ++i) {
      auto flushed = c.Flush(arena_);
      EXPECT_TRUE(flushed.ok()) << flushed.status();
    }
  });
  // Searches started after the delete was acknowledged must never see ids >= 1000, nor an id
  // twice (once from its segment row, once from the memtable).
  std::atomic<int> searches{0};
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        auto results = Search(c, arena_, 0.0f, 2, 50);  // nearest to the deleted zero vectors
        ASSERT_TRUE(results.ok()) << results.status();
        for (const core::QueryResult& result : *results) {
          std::set<uint64_t> seen;
          for (const core::Neighbor& hit : result.neighbors) {
            EXPECT_LT(hit.id, 1000u) << "deleted id returned";
            EXPECT_TRUE(seen.insert(hit.id).second) << "id " << hit.id << " returned twice";
          }
        }
        searches.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  arena_.WaitIdle();
  EXPECT_EQ(acked.load(), 200);
  EXPECT_EQ(searches.load(), 200);
  EXPECT_EQ(c.Stats().num_vectors, 1000u);

  // Once writers are done, a search sees each live id exactly once.
  auto results = Search(c, arena_, 50.0f, 1, 2000);
  ASSERT_TRUE(results.ok()) << results.status();
  std::set<uint64_t> ids;
  for (const core::Neighbor& hit : (*results)[0].neighbors) {
    EXPECT_TRUE(ids.insert(hit.id).second) << hit.id;
  }
  EXPECT_EQ(ids.size(), 1000u);
}

}  // namespace
}  // namespace shoal::storage::collection_stress_test
