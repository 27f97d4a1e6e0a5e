// UncachedBudget: the process-wide bound on partition bytes read past a full cache.
#include "storage/cache/uncached_budget.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::uncached_budget_test {
namespace {

// One Acquire's answer, as the test sees it.
struct Ask {
  bool answered = false;
  absl::Status status;
  UncachedBudget::Grant grant;
};

void Acquire(UncachedBudget& budget, uint64_t query, uint64_t bytes, Ask* ask,
             std::vector<uint64_t>* order = nullptr) {
  budget.Acquire(query, bytes, [ask, order, query](absl::StatusOr<UncachedBudget::Grant> g) {
    ask->answered = true;
    ask->status = g.status();
    if (g.ok()) ask->grant = *std::move(g);
    if (order) order->push_back(query);
  });
}

TEST(UncachedBudgetTest, ReadsWithinTheBudgetAreGrantedAtOnceAndReturnTheirBytesWhenDropped) {
  UncachedBudget budget(100);
  Ask a, b;
  Acquire(budget, 1, 60, &a);
  Acquire(budget, 2, 40, &b);
  ASSERT_TRUE(a.answered && b.answered);
  EXPECT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(budget.stats().held_bytes, 100u);
  a.grant.reset();
  EXPECT_EQ(budget.stats().held_bytes, 40u);
  b.grant.reset();
  EXPECT_EQ(budget.stats().held_bytes, 0u);
  EXPECT_EQ(budget.stats().waited, 0u);
}

TEST(UncachedBudgetTest, AReadPastTheBudgetWaitsUntilBytesAreReturned) {
  UncachedBudget budget(100);
  Ask first, second;
  Acquire(budget, 1, 80, &first);
  Acquire(budget, 1, 40, &second);  // the query holds bytes already: no forced read
  EXPECT_FALSE(second.answered);
  EXPECT_EQ(budget.stats().waiting, 1u);
  first.grant.reset();  // granted on this thread, as the bytes come back
  ASSERT_TRUE(second.answered);
  EXPECT_TRUE(second.status.ok());
  EXPECT_EQ(budget.stats().held_bytes, 40u);
  EXPECT_EQ(budget.stats().waited, 1u);
}

TEST(UncachedBudgetTest, TheOldestQueryHoldingNothingGetsOneReadPastTheBudgetAtATime) {
  UncachedBudget budget(10);  // smaller than any read
  Ask a, b;
  Acquire(budget, 5, 100, &a);
  ASSERT_TRUE(a.answered);  // alone and holding nothing: forced past the budget
  Acquire(budget, 6, 100, &b);
  EXPECT_FALSE(b.answered);  // one forced read at a time
  a.grant.reset();
  ASSERT_TRUE(b.answered);
  EXPECT_TRUE(b.status.ok());
  EXPECT_EQ(budget.stats().forced, 2u);
}

TEST(UncachedBudgetTest, OlderQueriesAreGrantedFirstAndNoYoungerOneOvertakes) {
  UncachedBudget budget(10);
  std::vector<uint64_t> order;
  Ask held, q1, q9, q2;
  Acquire(budget, 1, 10, &held);
  Acquire(budget, 1, 5, &q1, &order);  // query 1 holds bytes: waits
  Acquire(budget, 9, 5, &q9, &order);  // younger: behind query 1 even though it holds nothing
  Acquire(budget, 2, 5, &q2, &order);  // older than 9: ahead of it
  EXPECT_TRUE(order.empty());
  held.grant.reset();
  // 1 and 2 fit in the budget; 9 then holds nothing and is the oldest waiting: forced.
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2, 9}));
}

TEST(UncachedBudgetTest, CancellingAQueryAnswersItsWaitingReadsAndLetsTheNextOneGo) {
  UncachedBudget budget(10);
  Ask held, mine, other;
  Acquire(budget, 1, 10, &held);
  Acquire(budget, 1, 10, &mine);   // query 1 holds bytes: waits
  Acquire(budget, 3, 10, &other);  // behind query 1's read
  EXPECT_FALSE(mine.answered || other.answered);
  budget.CancelQuery(1);
  ASSERT_TRUE(mine.answered);
  EXPECT_TRUE(absl::IsCancelled(mine.status));
  ASSERT_TRUE(other.answered);  // now the oldest waiting, holding nothing: forced
  EXPECT_TRUE(other.status.ok());
  EXPECT_EQ(budget.stats().waiting, 0u);
}

// Answers that drop their grant at once (a cache hit after waiting, a cancelled token) release
// bytes that grant the next waiter: that chain runs in a loop on this thread, not as a recursion
// one frame per waiter (which overflowed the stack with thousands of waiters).
TEST(UncachedBudgetTest, AChainOfAnswersThatDropTheirGrantsRunsInALoopNotARecursion) {
  UncachedBudget budget(10);
  Ask first;
  Acquire(budget, 1, 100, &first);  // the one forced read past the budget
  ASSERT_TRUE(first.answered);
  constexpr int kWaiters = 2000;
  int depth = 0, deepest = 0, answered = 0;
  for (int i = 0; i < kWaiters; ++i) {
    budget.Acquire(2 + uint64_t(i), 100, [&](absl::StatusOr<UncachedBudget::Grant> g) {
      deepest = std::max(deepest, ++depth);
      ++answered;
      g = absl::CancelledError("dropped");  // releases the grant here, inside the answer
      --depth;
    });
  }
  EXPECT_EQ(answered, 0);
  first.grant.reset();
  EXPECT_EQ(answered, kWaiters);
  EXPECT_EQ(deepest, 1);
  EXPECT_EQ(budget.stats().held_bytes, 0u);
  EXPECT_EQ(budget.stats().waiting, 0u);
}

// A zero-byte read holds nothing: it neither blocks its query's forced read nor breaks release.
TEST(UncachedBudgetTest, ZeroByteGrantsHoldNothing) {
  UncachedBudget budget(10);
  Ask a, b, c;
  Acquire(budget, 1, 0, &a);
  Acquire(budget, 1, 0, &b);
  Acquire(budget, 1, 100, &c);  // past the budget: forced, since query 1 holds nothing
  ASSERT_TRUE(a.answered && b.answered && c.answered);
  a.grant.reset();
  b.grant.reset();
  c.grant.reset();
  EXPECT_EQ(budget.stats().held_bytes, 0u);
  EXPECT_EQ(budget.stats().forced, 1u);
}

// Threads acquire and drop reads at once, each answer possibly delivered on another thread (the
// one whose drop granted it): every read is answered, and at most one over-budget read is out.
TEST(UncachedBudgetTest, ConcurrentAcquiresAndReleasesAllAnswerWithinTheBudget) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "concurrent UncachedBudget");
  constexpr uint64_t kBudget = 1000, kMaxRead = 400;
  constexpr int kThreads = 4, kReadsPerThread = 300;
  UncachedBudget budget(kBudget);
  std::atomic<uint64_t> next_query{1};
  std::atomic<int> answered{0}, over{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kReadsPerThread; ++i) {
        const uint64_t bytes = 1 + (uint64_t(t) * 131 + uint64_t(i) * 71) % kMaxRead;
        absl::Notification done;
        UncachedBudget::Grant grant;
        budget.Acquire(next_query.fetch_add(1), bytes,
                       [&](absl::StatusOr<UncachedBudget::Grant> g) {
                         if (g.ok()) grant = *std::move(g);
                         done.Notify();
                       });
        done.WaitForNotification();  // a test thread, not an arena task: it may wait
        ASSERT_NE(grant, nullptr);
        ++answered;
        if (budget.stats().held_bytes > kBudget + kMaxRead) ++over;
        grant.reset();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(answered.load(), kThreads * kReadsPerThread);
  EXPECT_EQ(over.load(), 0) << "more than one read past the budget at once";
  const UncachedBudgetStats stats = budget.stats();
  EXPECT_EQ(stats.held_bytes, 0u);
  EXPECT_EQ(stats.waiting, 0u);
  EXPECT_EQ(stats.granted, uint64_t(kThreads * kReadsPerThread));
}

}  // namespace
}  // namespace shoal::storage::uncached_budget_test
