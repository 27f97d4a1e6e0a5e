#include "storage/cache/partition_cache.h"

#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::partition_cache_test {
namespace {

using Admission = PartitionCache::Admission;

// A loader that answers at once with `bytes` bytes filled with the partition number.
PartitionCache::Loader Immediate(uint32_t partition, size_t bytes, std::atomic<int>* loads) {
  return [=](PartitionCache::LoadDone done) {
    if (loads) loads->fetch_add(1);
    auto data = std::make_shared<std::string>(bytes, char('a' + partition % 26));
    std::move(done)(PartitionBytes{data, data->data(), data->size()});
  };
}

absl::StatusOr<PartitionHandle> GetNow(PartitionCache& cache, uint32_t p, size_t bytes,
                                       Admission admission = Admission::kIfRoom,
                                       std::atomic<int>* loads = nullptr) {
  absl::StatusOr<PartitionHandle> out = absl::UnknownError("not answered");
  cache.Get({1, p}, bytes, admission, Immediate(p, bytes, loads),
            [&](absl::StatusOr<PartitionHandle> h) { out = std::move(h); });
  return out;
}

TEST(PartitionCache, MissLoadsThenHitsAndPinsWhileHeld) {
  PartitionCache cache(1000);
  std::atomic<int> loads{0};
  {
    auto a = GetNow(cache, 7, 100, Admission::kIfRoom, &loads);
    ASSERT_TRUE(a.ok());
    EXPECT_FALSE(a->hit());
    EXPECT_EQ(a->size(), 100u);
    EXPECT_EQ(a->data()[0], 'h');
    EXPECT_EQ(cache.stats().pinned_bytes, 100u);
    auto b = GetNow(cache, 7, 100, Admission::kIfRoom, &loads);
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b->hit());
    EXPECT_EQ(loads.load(), 1);
  }
  EXPECT_EQ(cache.stats().pinned_bytes, 0u);
  EXPECT_EQ(cache.stats().used_bytes, 100u);  // still cached
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(PartitionCache, TryGetHitPinsACachedPartitionAndLeavesMissesAndLoadsAlone) {
  PartitionCache cache(1000);
  EXPECT_FALSE(cache.TryGetHit({1, 7}).has_value());  // absent: nothing counted, nothing loaded
  EXPECT_EQ(cache.stats().misses, 0u);
  EXPECT_EQ(cache.stats().used_bytes, 0u);
  // Loading (the loader holds its answer): not a hit yet.
  PartitionCache::LoadDone pending;
  cache.Get(
      {1, 7}, 100, Admission::kIfRoom,
      [&](PartitionCache::LoadDone done) { pending = std::move(done); },
      [](absl::StatusOr<PartitionHandle>) {});
  EXPECT_FALSE(cache.TryGetHit({1, 7}).has_value());
  auto data = std::make_shared<std::string>(100, 'h');
  std::move(pending)(PartitionBytes{data, data->data(), data->size()});
  {
    std::optional<PartitionHandle> hit = cache.TryGetHit({1, 7});
    ASSERT_TRUE(hit.has_value());
    EXPECT_TRUE(hit->hit());
    EXPECT_EQ(hit->data()[0], 'h');
    EXPECT_EQ(cache.stats().pinned_bytes, 100u);
    EXPECT_EQ(cache.stats().hits, 1u);
  }
  EXPECT_EQ(cache.stats().pinned_bytes, 0u);
  EXPECT_EQ(cache.stats().misses, 1u);  // the one Get
}

TEST(PartitionCache, NeverEvictsPinnedAndAlwaysAdmitsTheOldestQuerysRead) {
  PartitionCache cache(100);
  auto a = GetNow(cache, 1, 60);
  ASSERT_TRUE(a.ok());
  auto rejected = GetNow(cache, 2, 60);  // does not fit next to pinned A
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  auto forced = GetNow(cache, 2, 60, Admission::kAlways);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(cache.stats().used_bytes, 120u);  // over budget only through kAlways
  EXPECT_EQ(a->data()[0], 'b');               // A's bytes are intact
  *a = PartitionHandle();                     // unpin A: the cache shrinks back
  EXPECT_LE(cache.stats().used_bytes, 100u);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

// A read refused for room must not flush the cache on its way out: unpinned entries stay when
// evicting them all would still not make room.
TEST(PartitionCache, ARefusedReadEvictsNothing) {
  PartitionCache cache(100);
  auto pinned = GetNow(cache, 1, 50);
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(GetNow(cache, 2, 40).ok());  // cached, unpinned once the handle is gone
  EXPECT_EQ(GetNow(cache, 3, 60).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.stats().evictions, 0u);
  auto again = GetNow(cache, 2, 40);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->hit());
  // One that fits once the unpinned entry goes still evicts it.
  *again = PartitionHandle();
  ASSERT_TRUE(GetNow(cache, 4, 50).ok());
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST(PartitionCache, RandomWorkloadNeverExceedsTheBudget) {
  PartitionCache cache(10000);
  std::mt19937 rng(4);
  std::vector<PartitionHandle> held;
  for (int i = 0; i < 20000; ++i) {
    auto h = GetNow(cache, rng() % 300, 100 + rng() % 900);
    if (h.ok()) held.push_back(*std::move(h));
    if (held.size() > 5 || rng() % 2) {
      if (!held.empty()) held.erase(held.begin() + long(rng() % held.size()));
    }
    ASSERT_LE(cache.stats().used_bytes, 10000u);
  }
  held.clear();
  EXPECT_EQ(cache.stats().pinned_bytes, 0u);
  EXPECT_GT(cache.stats().hits, 0u);
  EXPECT_GT(cache.stats().evictions, 0u);
}

TEST(PartitionCache, ConcurrentRequestsForOnePartitionShareOneLoad) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "single flight");
  PartitionCache cache(1 << 20);
  std::atomic<int> loads{0}, answered{0};
  std::mutex mu;
  std::vector<PartitionCache::LoadDone> parked;  // the read "in flight"
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (uint32_t p = 0; p < 50; ++p) {
        cache.Get(
            {9, p}, 4096, Admission::kIfRoom,
            [&](PartitionCache::LoadDone done) {
              loads.fetch_add(1);
              std::lock_guard<std::mutex> lock(mu);
              parked.push_back(std::move(done));
            },
            [&](absl::StatusOr<PartitionHandle> h) {
              EXPECT_TRUE(h.ok());
              answered.fetch_add(1);
            });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(loads.load(), 50);  // one load per partition, however many asked
  for (auto& done : parked) {
    auto data = std::make_shared<std::string>(4096, 'x');
    std::move(done)(PartitionBytes{data, data->data(), data->size()});
  }
  EXPECT_EQ(answered.load(), 400);
  EXPECT_EQ(cache.stats().attached + cache.stats().hits, 350u);
}

TEST(PartitionCache, LoadErrorsReachEveryWaiterAndAreNotCached) {
  PartitionCache cache(1000);
  PartitionCache::LoadDone pending;
  int errors = 0;
  for (int i = 0; i < 3; ++i) {
    cache.Get(
        {1, 1}, 100, Admission::kIfRoom,
        [&](PartitionCache::LoadDone done) { pending = std::move(done); },
        [&](absl::StatusOr<PartitionHandle> h) { errors += !h.ok(); });
  }
  std::move(pending)(absl::DataLossError("checksum mismatch"));
  EXPECT_EQ(errors, 3);
  EXPECT_EQ(cache.stats().used_bytes, 0u);
  EXPECT_TRUE(GetNow(cache, 1, 100).ok());  // a later request loads again
}

TEST(PartitionCache, AScanOfOneHitPartitionsDoesNotFlushTheHotSet) {
  PartitionCache cache(100 * 100);  // room for 100 partitions of 100 bytes
  std::atomic<int> loads{0};
  for (int round = 0; round < 3; ++round) {
    for (uint32_t p = 0; p < 50; ++p)
      ASSERT_TRUE(GetNow(cache, p, 100, Admission::kIfRoom, &loads).ok());
  }
  const int hot_loads = loads.load();
  for (uint32_t p = 1000; p < 3000; ++p) ASSERT_TRUE(GetNow(cache, p, 100).ok());  // the scan
  loads = 0;
  for (uint32_t p = 0; p < 50; ++p)
    ASSERT_TRUE(GetNow(cache, p, 100, Admission::kIfRoom, &loads).ok());
  EXPECT_EQ(hot_loads, 50);
  EXPECT_EQ(loads.load(), 0) << "the scan evicted hot partitions";
}

}  // namespace
}  // namespace shoal::storage::partition_cache_test
