#include "core/index/topk.h"

#include <algorithm>
#include <random>

#include "gtest/gtest.h"

namespace shoal::core::topk_test {
namespace {

TEST(TopK, KeepsTheKSmallestSorted) {
  std::mt19937 rng(7);
  std::vector<ScoredId> all;
  TopK top(10);
  for (uint64_t id = 0; id < 1000; ++id) {
    const float key = std::uniform_real_distribution<float>(0, 1)(rng);
    all.push_back({key, id});
    top.Push(key, id);
  }
  std::sort(all.begin(), all.end());
  auto kept = top.Take();
  ASSERT_EQ(kept.size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(kept[i].id, all[i].id);
}

TEST(TopK, BreaksTiesBySmallerIdWhateverTheOrder) {
  TopK forward(2), backward(2);
  for (uint64_t id = 0; id < 5; ++id) forward.Push(1.0f, id);
  for (uint64_t id = 5; id-- > 0;) backward.Push(1.0f, id);
  auto a = forward.Take(), b = backward.Take();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].id, 0u);
  EXPECT_EQ(a[1].id, 1u);
  EXPECT_EQ(b[0].id, 0u);
  EXPECT_EQ(b[1].id, 1u);
}

TEST(TopK, ThresholdIsInfiniteUntilFullAndMergeCombines) {
  TopK a(2), b(2);
  EXPECT_TRUE(std::isinf(a.threshold()));
  a.Push(5, 1);
  a.Push(3, 2);
  EXPECT_EQ(a.threshold(), 5);
  b.Push(1, 3);
  b.Push(4, 4);
  a.Merge(b);
  auto kept = a.Take();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].id, 3u);
  EXPECT_EQ(kept[1].id, 2u);
  TopK zero(0);
  zero.Push(1, 1);
  EXPECT_EQ(zero.size(), 0u);
}

}  // namespace
}  // namespace shoal::core::topk_test
