#include "storage/sched/io_policy.h"

#include <random>

#include "gtest/gtest.h"

namespace shoal::storage::io_policy_test {
namespace {

using std::chrono::milliseconds;

const IoClock::time_point kT0 = IoClock::time_point() + std::chrono::hours(1);

IoRequest Req(uint64_t id, uint64_t query, uint32_t rank, uint64_t offset, uint32_t length,
              uint64_t file = 1, IoClock::time_point deadline = IoClock::time_point::max()) {
  return {id, file, offset, length, query, rank, deadline};
}

std::vector<uint64_t> Ids(const std::vector<IoSubmission>& subs) {
  std::vector<uint64_t> ids;
  for (const auto& s : subs) {
    for (const auto& r : s.requests) ids.push_back(r.id);
  }
  return ids;
}

TEST(IoPolicy, OrdersByDeadlineThenQueryThenRank) {
  IoPolicy policy({.max_requests_in_flight = 100, .max_bytes_in_flight = 1 << 30});
  policy.Enqueue(Req(1, /*query=*/2, /*rank=*/0, 0, 10));
  policy.Enqueue(Req(2, 1, 1, 1000, 10));
  policy.Enqueue(Req(3, 1, 0, 2000, 10));
  policy.Enqueue(Req(4, 3, 0, 3000, 10, 1, kT0 + milliseconds(5)));  // has a deadline
  auto subs = policy.Dispatch(kT0, nullptr);
  EXPECT_EQ(Ids(subs), std::vector<uint64_t>({4, 3, 2, 1}));
}

TEST(IoPolicy, RespectsRequestAndByteBudgetsButForOneReadOfTheOldestQuery) {
  IoPolicy policy({.max_requests_in_flight = 2, .max_bytes_in_flight = 250});
  for (uint64_t i = 0; i < 5; ++i) policy.Enqueue(Req(i, i, 0, i * 1000, 100));
  auto subs = policy.Dispatch(kT0, nullptr);
  // Two fit the budget; then the oldest waiting query (2) gets one read over it; 3 and 4 wait.
  EXPECT_EQ(Ids(subs), std::vector<uint64_t>({0, 1, 2}));
  EXPECT_EQ(policy.bytes_in_flight(), 300u);
  EXPECT_TRUE(policy.Dispatch(kT0, nullptr).empty());
  policy.Complete(subs[0].id);
  EXPECT_TRUE(policy.Dispatch(kT0, nullptr).empty());  // still 2 in flight: at the limit
  policy.Complete(subs[2].id);                         // the forced read returns
  subs = policy.Dispatch(kT0, nullptr);
  EXPECT_EQ(Ids(subs), std::vector<uint64_t>({3, 4}));  // 3 fits; 4 is the new oldest, forced
  EXPECT_EQ(policy.requests_in_flight(), 3u);
}

TEST(IoPolicy, AdmitsTheOldestQuerysReadOverBudget) {
  IoPolicy policy({.max_requests_in_flight = 64, .max_bytes_in_flight = 100});
  policy.Enqueue(Req(1, /*query=*/5, 0, 0, 100, 1, kT0 + milliseconds(1)));  // young, urgent
  policy.Enqueue(Req(2, /*query=*/1, 0, 5000, 80));                          // oldest query
  policy.Enqueue(Req(3, /*query=*/7, 0, 9000, 80));
  auto subs = policy.Dispatch(kT0, nullptr);
  // The urgent read fills the budget; the oldest query's read goes anyway; query 7 waits.
  EXPECT_EQ(Ids(subs), std::vector<uint64_t>({1, 2}));
  EXPECT_EQ(policy.bytes_in_flight(), 180u);
  EXPECT_TRUE(policy.Dispatch(kT0, nullptr).empty());
  policy.Complete(subs[0].id);
  policy.Complete(subs[1].id);
  EXPECT_EQ(Ids(policy.Dispatch(kT0, nullptr)), std::vector<uint64_t>({3}));
}

TEST(IoPolicy, OneByteBudgetStillCompletesTenThousandReadsInPriorityOrder) {
  IoPolicy policy({.max_requests_in_flight = 64, .max_bytes_in_flight = 1});
  std::mt19937 rng(3);
  std::vector<IoRequest> all;
  for (uint64_t i = 0; i < 10000; ++i) {
    // Sparse offsets: no coalescing, every read stands alone.
    all.push_back(Req(i, rng() % 500, uint32_t(rng() % 16), i * 8192, 4096, 1 + rng() % 3));
    policy.Enqueue(all.back());
  }
  std::vector<uint64_t> order;
  for (int steps = 0; steps < 20000 && order.size() < all.size(); ++steps) {
    auto subs = policy.Dispatch(kT0, nullptr);
    ASSERT_LE(subs.size(), 1u);  // one forced read at a time
    for (const auto& s : subs) {
      for (const auto& r : s.requests) order.push_back(r.id);
      policy.Complete(s.id);
    }
  }
  ASSERT_EQ(order.size(), all.size());
  std::sort(all.begin(), all.end(), [](const IoRequest& a, const IoRequest& b) {
    return std::tie(a.query, a.rank, a.id) < std::tie(b.query, b.rank, b.id);
  });
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(order[i], all[i].id) << i;
  EXPECT_EQ(policy.bytes_in_flight(), 0u);
}

TEST(IoPolicy, CancelledAndExpiredReadsAreDroppedWithoutTakingBudget) {
  IoPolicy policy({.max_requests_in_flight = 1, .max_bytes_in_flight = 1000});
  policy.Enqueue(Req(1, 1, 0, 0, 100));
  policy.Enqueue(Req(2, 2, 0, 5000, 100));
  policy.Enqueue(Req(3, 3, 0, 9000, 100, 1, kT0 + milliseconds(10)));
  EXPECT_TRUE(policy.Cancel(2));
  EXPECT_FALSE(policy.Cancel(2));
  std::vector<IoRequest> expired;
  auto subs = policy.Dispatch(kT0 + milliseconds(20), &expired);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].id, 3u);
  EXPECT_EQ(Ids(subs), std::vector<uint64_t>({1}));
  EXPECT_FALSE(policy.Cancel(1));  // in flight: completes, caller discards
  policy.Complete(subs[0].id);
  EXPECT_EQ(policy.queued(), 0u);
  EXPECT_EQ(policy.bytes_in_flight(), 0u);
  EXPECT_EQ(policy.requests_in_flight(), 0u);
  policy.Complete(12345);  // unknown: ignored
}

TEST(IoPolicy, CoalescesAdjacentRangesOfOneFileUpToTheCap) {
  IoPolicy policy({.max_requests_in_flight = 64,
                   .max_bytes_in_flight = 1 << 30,
                   .max_request_bytes = 300,
                   .max_coalesce_gap = 0});
  policy.Enqueue(Req(1, 1, 0, 0, 100));
  policy.Enqueue(Req(2, 2, 0, 100, 100));              // adjacent: merged
  policy.Enqueue(Req(3, 3, 0, 100, 100));              // same range, another query: merged
  policy.Enqueue(Req(4, 4, 0, 200, 100));              // adjacent, reaches the 300-byte cap
  policy.Enqueue(Req(5, 5, 0, 300, 100));              // past the cap: its own read
  policy.Enqueue(Req(6, 6, 0, 500, 100));              // gap: its own read
  policy.Enqueue(Req(7, 7, 0, 100, 100, /*file=*/2));  // other file: its own read
  auto subs = policy.Dispatch(kT0, nullptr);
  ASSERT_EQ(subs.size(), 4u);
  EXPECT_EQ(subs[0].offset, 0u);
  EXPECT_EQ(subs[0].length, 300u);
  EXPECT_EQ(subs[0].requests.size(), 4u);
  EXPECT_EQ(subs[1].requests[0].id, 5u);
  EXPECT_EQ(subs[1].length, 100u);
  EXPECT_EQ(subs[2].requests[0].id, 6u);
  EXPECT_EQ(subs[3].file, 2u);
  EXPECT_EQ(policy.bytes_in_flight(), 600u);
}

TEST(IoPolicy, CoalescesAcrossTheO_DirectPaddingButNotAcrossARealGap) {
  // Partitions are padded to 4 KiB in segment files: neighbours are never byte-adjacent.
  IoPolicy policy({.max_requests_in_flight = 64, .max_bytes_in_flight = 1 << 30});
  policy.Enqueue(Req(1, 1, 0, 0, 5000));      // ends at 5000; the next starts at 8192
  policy.Enqueue(Req(2, 1, 0, 8192, 3000));   // within the padding: merged, [0, 11192)
  policy.Enqueue(Req(3, 1, 0, 20480, 4096));  // 9288 bytes on: its own read
  auto subs = policy.Dispatch(kT0, nullptr);
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].offset, 0u);
  EXPECT_EQ(subs[0].length, 11192u);
  EXPECT_EQ(subs[0].requests.size(), 2u);
  EXPECT_EQ(subs[1].requests[0].id, 3u);
}

}  // namespace
}  // namespace shoal::storage::io_policy_test
