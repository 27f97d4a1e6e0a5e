#include "storage/cache/row_cache.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace shoal::storage::row_cache_test {
namespace {

// A row of `floats` values derived from n, as the cache holds it.
std::shared_ptr<const float> Row(uint64_t n, size_t floats) {
  auto row = std::make_shared<std::vector<float>>(floats);
  for (size_t i = 0; i < floats; ++i) (*row)[i] = float(n * 31 + i);
  return std::shared_ptr<const float>(row, row->data());
}

bool Same(const std::shared_ptr<const float>& a, const std::shared_ptr<const float>& b,
          size_t floats) {
  return a && b && std::memcmp(a.get(), b.get(), floats * sizeof(float)) == 0;
}

TEST(RowCacheTest, AHitHandsOutTheInsertedRowItself) {
  RowCache cache(1 << 20);
  const auto row = Row(7, 16);
  EXPECT_EQ(cache.Lookup(1, 7, 64), nullptr);
  cache.Insert(1, 7, row, 64);
  const auto hit = cache.Lookup(1, 7, 64);
  EXPECT_EQ(hit.get(), row.get());  // no copy
  const RowCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.used_bytes, 64u);
}

TEST(RowCacheTest, KeysAreSegmentAndRow) {
  RowCache cache(1 << 20);
  const auto a = Row(1, 8), b = Row(2, 8);
  cache.Insert(1, 5, a, 32);
  cache.Insert(2, 5, b, 32);
  EXPECT_EQ(cache.Lookup(1, 5, 32).get(), a.get());
  EXPECT_EQ(cache.Lookup(2, 5, 32).get(), b.get());
  EXPECT_EQ(cache.Lookup(1, 6, 32), nullptr);
}

TEST(RowCacheTest, SizeMismatchIsAMiss) {
  RowCache cache(1 << 20);
  cache.Insert(1, 3, Row(3, 8), 32);
  EXPECT_EQ(cache.Lookup(1, 3, 64), nullptr);
}

TEST(RowCacheTest, ZeroBudgetCachesNothing) {
  RowCache cache(0);
  cache.Insert(1, 3, Row(3, 8), 32);
  EXPECT_EQ(cache.Lookup(1, 3, 32), nullptr);
  EXPECT_EQ(cache.stats().used_bytes, 0u);
  EXPECT_EQ(cache.stats().misses, 0u);  // not counted: there is no cache to miss
}

TEST(RowCacheTest, StaysWithinItsBudgetAndWhatItHoldsIsRight) {
  constexpr size_t kFloats = 256, kBytes = kFloats * sizeof(float);
  RowCache cache(64 * kBytes);
  for (uint64_t r = 0; r < 10000; ++r) {
    cache.Insert(9, r, Row(r, kFloats), kBytes);
    ASSERT_LE(cache.stats().used_bytes, cache.budget());
  }
  EXPECT_GT(cache.stats().evictions, 9000u);
  size_t cached = 0;
  for (uint64_t r = 0; r < 10000; ++r) {
    const auto hit = cache.Lookup(9, r, kBytes);
    if (!hit) continue;
    ++cached;
    EXPECT_TRUE(Same(hit, Row(r, kFloats), kFloats)) << r;
  }
  EXPECT_GT(cached, 0u);
  EXPECT_LE(cached, 64u);
}

TEST(RowCacheTest, AnEvictedRowLivesOnWhileItIsHeld) {
  constexpr size_t kFloats = 64, kBytes = kFloats * sizeof(float);
  RowCache cache(16 * kBytes);  // one row per shard
  cache.Insert(1, 0, Row(0, kFloats), kBytes);
  const auto held = cache.Lookup(1, 0, kBytes);
  ASSERT_NE(held, nullptr);
  for (uint64_t r = 1; r < 500; ++r) cache.Insert(1, r, Row(r, kFloats), kBytes);
  EXPECT_EQ(cache.Lookup(1, 0, kBytes), nullptr);     // evicted ...
  EXPECT_TRUE(Same(held, Row(0, kFloats), kFloats));  // ... but still whole for its holder
}

TEST(RowCacheTest, ReferencedRowsOutliveOneTurnOfTheHand) {
  // A row read between insertions survives a stream of one-hit rows (CLOCK's second chance):
  // with the budget of 16 shards x 8 rows, 2000 new rows evict every unreferenced one.
  constexpr size_t kFloats = 64, kBytes = kFloats * sizeof(float);
  RowCache cache(16 * 8 * kBytes);
  const auto hot = Row(0, kFloats);
  cache.Insert(1, 0, hot, kBytes);
  for (uint64_t r = 1; r <= 2000; ++r) {
    ASSERT_EQ(cache.Lookup(1, 0, kBytes).get(), hot.get()) << "evicted after " << r << " rows";
    cache.Insert(1, r, Row(r, kFloats), kBytes);
  }
}

TEST(RowCacheTest, RowLargerThanAShardIsNotCached) {
  RowCache cache(16 * 100);  // 100 bytes per shard
  cache.Insert(1, 1, Row(1, 26), 104);
  EXPECT_EQ(cache.Lookup(1, 1, 104), nullptr);
}

TEST(RowCacheTest, ConcurrentReadersAndWritersSeeWholeRows) {
  constexpr size_t kFloats = 32, kBytes = kFloats * sizeof(float);
  RowCache cache(16 * 32 * kBytes);
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 20000; ++i) {
        const uint64_t r = (i * 7 + uint64_t(t)) % 1000;
        if (const auto hit = cache.Lookup(2, r, kBytes)) {
          if (!Same(hit, Row(r, kFloats), kFloats)) bad = true;
        } else {
          cache.Insert(2, r, Row(r, kFloats), kBytes);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(bad.load());
  EXPECT_LE(cache.stats().used_bytes, cache.budget());
}

}  // namespace
}  // namespace shoal::storage::row_cache_test
