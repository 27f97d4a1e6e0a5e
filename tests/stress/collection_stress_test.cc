// Stress: concurrent upserts, overwrites, deletes and exact searches on one collection, with the
// search arena at one thread. Checks that every write is acknowledged, that searches never
// return a deleted-and-acknowledged id or a duplicate, and that nothing hangs (watchdog).
// Runs under TSan in `make test`.
#include <future>
#include <random>
#include <set>
#include <thread>

#include "core/exec/tbb_executor.h"
#include "core/index/flat_search.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage {
namespace {

constexpr uint32_t kDim = 16;

TEST(CollectionStress, ConcurrentWritesAndSearchesStayConsistent) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "collection stress");
  testing::TempDir dir;
  CollectionManifest manifest;
  manifest.name = "s";
  manifest.dim = kDim;
  auto created = Collection::Create(DefaultFileSystem(), dir.Sub("s"), manifest, {});
  ASSERT_TRUE(created.ok());
  Collection& c = **created;
  core::TbbExecutor arena(1);

  // Ids [0, 1000) are written and rewritten; ids [1000, 1100) are written once, then deleted.
  std::atomic<int> acked{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int round = 0; round < 50; ++round) {
        std::vector<PointRecord> points;
        for (int i = 0; i < 20; ++i) {
          PointRecord p;
          p.id = rng() % 1000;
          p.vector.assign(kDim, float(rng() % 100));
          points.push_back(std::move(p));
        }
        std::promise<absl::StatusOr<uint64_t>> done;
        c.Upsert(std::move(points), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
        ASSERT_TRUE(done.get_future().get().ok());
        acked.fetch_add(1);
      }
    });
  }
  std::vector<PointRecord> doomed;
  for (uint64_t id = 1000; id < 1100; ++id) doomed.push_back({id, std::vector<float>(kDim, 0), ""});
  std::promise<void> doomed_written;
  c.Upsert(doomed, [&](absl::StatusOr<uint64_t> n) {
    ASSERT_TRUE(n.ok());
    doomed_written.set_value();
  });
  doomed_written.get_future().wait();
  std::vector<uint64_t> doomed_ids;
  for (const auto& p : doomed) doomed_ids.push_back(p.id);
  std::promise<void> deleted;
  c.Delete(doomed_ids, [&](absl::StatusOr<uint64_t> n) {
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 100u);
    deleted.set_value();
  });
  deleted.get_future().wait();

  // Searches started after the delete was acknowledged must never see ids >= 1000.
  std::atomic<int> searches{0};
  std::vector<std::thread> searchers;
  for (int t = 0; t < 2; ++t) {
    searchers.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        core::FlatSearchRequest req;
        req.view = c.SearchView().memtable;
        req.num_queries = 2;
        req.queries.assign(2 * kDim, 0.0f);  // nearest to the deleted zero vectors
        req.k = 50;
        std::promise<absl::StatusOr<std::vector<core::QueryResult>>> done;
        core::FlatSearch(arena, std::move(req),
                         [&](absl::StatusOr<std::vector<core::QueryResult>> r) {
                           done.set_value(std::move(r));
                         });
        auto results = done.get_future().get();
        ASSERT_TRUE(results.ok());
        for (const auto& result : *results) {
          std::set<uint64_t> seen;
          for (const auto& n : result.neighbors) {
            EXPECT_LT(n.id, 1000u) << "deleted id returned";
            seen.insert(n.id);
          }
        }
        searches.fetch_add(1);
      }
    });
  }
  for (auto& w : writers) w.join();
  for (auto& s : searchers) s.join();
  arena.WaitIdle();
  EXPECT_EQ(acked.load(), 200);
  EXPECT_EQ(searches.load(), 200);
  EXPECT_LE(c.Stats().num_vectors, 1000u);

  // Once writers are done, a search sees each live id exactly once.
  core::FlatSearchRequest req;
  req.view = c.SearchView().memtable;
  req.num_queries = 1;
  req.queries.assign(kDim, 50.0f);
  req.k = 2000;
  std::promise<absl::StatusOr<std::vector<core::QueryResult>>> done;
  core::FlatSearch(arena, std::move(req), [&](auto r) { done.set_value(std::move(r)); });
  auto results = done.get_future().get();
  ASSERT_TRUE(results.ok());
  std::set<uint64_t> ids;
  for (const auto& n : (*results)[0].neighbors) EXPECT_TRUE(ids.insert(n.id).second) << n.id;
  EXPECT_EQ(ids.size(), c.Stats().num_vectors);
}

}  // namespace
}  // namespace shoal::storage
