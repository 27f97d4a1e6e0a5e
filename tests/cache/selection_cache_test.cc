// SelectionCache: hits hand back the selection inserted, entries are keyed by segment and filter
// text, the least recently used go first when the budget is full, and nothing larger than the
// budget (or anything, with budget 0) is kept.
#include "storage/cache/selection_cache.h"

#include "gtest/gtest.h"

namespace shoal::storage::selection_cache_test {
namespace {

// A selection over `rows` rows in one partition, the first `matches` selected.
std::shared_ptr<const core::RowSelection> Selection(uint64_t rows, uint32_t matches) {
  auto s = std::make_shared<core::RowSelection>(std::vector<uint64_t>{rows});
  for (uint32_t r = 0; r < matches; ++r) s->Select(0, r);
  return s;
}

uint64_t Cost(const std::shared_ptr<const core::RowSelection>& s, std::string_view filter) {
  return s->memory_bytes() + filter.size();
}

TEST(SelectionCache, AHitIsTheSelectionInsertedForThatSegmentAndText) {
  SelectionCache cache(1 << 20);
  auto a = Selection(1000, 3);
  EXPECT_EQ(cache.Lookup(1, "a < 3"), nullptr);
  cache.Insert(1, "a < 3", a);
  EXPECT_EQ(cache.Lookup(1, "a < 3"), a);
  EXPECT_EQ(cache.Lookup(2, "a < 3"), nullptr);   // another segment
  EXPECT_EQ(cache.Lookup(1, "a <  3"), nullptr);  // another spelling
  cache.Insert(1, "a < 3", Selection(1000, 5));   // already cached: kept as it was
  EXPECT_EQ(cache.Lookup(1, "a < 3"), a);
  const SelectionCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.used_bytes, Cost(a, "a < 3"));
}

TEST(SelectionCache, TheLeastRecentlyUsedEntryIsEvictedFirst) {
  auto a = Selection(4096, 1), b = Selection(4096, 2), c = Selection(4096, 3);
  SelectionCache cache(Cost(a, "a") + Cost(b, "b") + Cost(c, "c") / 2);  // room for two
  cache.Insert(7, "a", a);
  cache.Insert(7, "b", b);
  EXPECT_EQ(cache.Lookup(7, "a"), a);  // b is now the least recently used
  cache.Insert(7, "c", c);
  EXPECT_EQ(cache.Lookup(7, "b"), nullptr);
  EXPECT_EQ(cache.Lookup(7, "a"), a);
  EXPECT_EQ(cache.Lookup(7, "c"), c);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().used_bytes, Cost(a, "a") + Cost(c, "c"));
}

TEST(SelectionCache, NothingLargerThanTheBudgetOrWithBudgetZeroIsKept) {
  auto big = Selection(1 << 16, 1);
  SelectionCache small(Cost(big, "f") - 1);
  small.Insert(1, "f", big);
  EXPECT_EQ(small.Lookup(1, "f"), nullptr);
  EXPECT_EQ(small.stats().used_bytes, 0u);
  SelectionCache none(0);
  none.Insert(1, "f", Selection(10, 1));
  EXPECT_EQ(none.Lookup(1, "f"), nullptr);
  EXPECT_EQ(none.stats().used_bytes, 0u);
}

TEST(SelectionCache, ReplacePutsANewSelectionInPlaceOfTheCachedOne) {
  auto small = Selection(1000, 3), big = Selection(8000, 3), other = Selection(4000, 1);
  SelectionCache cache(Cost(big, "f") + Cost(other, "g"));
  cache.Insert(1, "f", small);
  cache.Insert(1, "g", other);
  cache.Replace(1, "f", big);  // fits beside g once small is gone
  EXPECT_EQ(cache.Lookup(1, "f"), big);
  EXPECT_EQ(cache.Lookup(1, "g"), other);
  EXPECT_EQ(cache.stats().used_bytes, Cost(big, "f") + Cost(other, "g"));
  EXPECT_EQ(cache.stats().evictions, 0u);
  cache.Replace(1, "g", Selection(1 << 20, 1));  // larger than the budget: the old entry stays
  EXPECT_EQ(cache.Lookup(1, "g"), other);
  cache.Replace(2, "h", small);  // not cached yet: inserted, evicting the least recent (f)
  EXPECT_EQ(cache.Lookup(2, "h"), small);
  EXPECT_EQ(cache.Lookup(1, "f"), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().used_bytes, Cost(other, "g") + Cost(small, "h"));
}

TEST(SelectionCache, EachSetOfDeletesIsAnEntryOfItsOwn) {
  SelectionCache cache(1 << 20);
  auto matched = Selection(1000, 3), live = Selection(1000, 2);
  cache.Insert(1, "f", matched);
  cache.Insert(1, "f", live, {1, 40});
  EXPECT_EQ(cache.Lookup(1, "f"), matched);
  EXPECT_EQ(cache.Lookup(1, "f", {1, 40}), live);
  EXPECT_EQ(cache.Lookup(1, "f", {2, 41}), nullptr);
  EXPECT_EQ(cache.Lookup(1, "f", {1, 41}), nullptr);
}

}  // namespace
}  // namespace shoal::storage::selection_cache_test
