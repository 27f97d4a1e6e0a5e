#include <atomic>
#include <thread>

#include "core/exec/manual_executor.h"
#include "core/exec/tbb_executor.h"
#include "core/exec/thread_executor.h"
#include "gtest/gtest.h"
#include "tests/fakes/watchdog.h"

namespace shoal::core {
namespace {

TEST(TbbExecutor, RunsEveryTaskIncludingOnesSubmittedFromTasks) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "TbbExecutor");
  TbbExecutor executor(2);
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) {
    executor.Submit([&] {
      ran.fetch_add(1);
      executor.Submit([&] { ran.fetch_add(1); });
    });
  }
  executor.WaitIdle();
  EXPECT_EQ(ran.load(), 2000);
  EXPECT_EQ(executor.outstanding(), 0);
  EXPECT_EQ(executor.concurrency(), 2);
}

TEST(TbbExecutor, NeverRunsMoreTasksAtOnceThanItsThreads) {
  TbbExecutor executor(1);
  std::atomic<int> running{0}, max_running{0};
  for (int i = 0; i < 200; ++i) {
    executor.Submit([&] {
      const int now = running.fetch_add(1) + 1;
      int seen = max_running.load();
      while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
      }
      volatile double x = 0;
      for (int j = 0; j < 10000; ++j) x = x + j;
      running.fetch_sub(1);
    });
  }
  executor.WaitIdle();
  EXPECT_EQ(max_running.load(), 1);
}

TEST(TbbExecutor, DestructorWaitsForOutstandingTasks) {
  std::atomic<int> ran{0};
  {
    TbbExecutor executor(1);
    for (int i = 0; i < 100; ++i) executor.Submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ManualExecutor, RunsTasksOnlyWhenAskedInSubmissionOrder) {
  ManualExecutor executor;
  std::vector<int> order;
  executor.Submit([&] { order.push_back(1); });
  executor.Submit([&] {
    order.push_back(2);
    executor.Submit([&] { order.push_back(3); });
  });
  EXPECT_TRUE(order.empty());
  EXPECT_EQ(executor.queued(), 2u);
  EXPECT_TRUE(executor.RunOne());
  EXPECT_EQ(order, std::vector<int>({1}));
  EXPECT_EQ(executor.RunAll(), 2);
  EXPECT_EQ(order, std::vector<int>({1, 2, 3}));
  EXPECT_FALSE(executor.RunOne());
}

TEST(ThreadExecutor, RunsBlockingWorkAndDrainsOnDestruction) {
  std::atomic<int> ran{0};
  {
    ThreadExecutor executor(2);
    EXPECT_EQ(executor.concurrency(), 2);
    for (int i = 0; i < 50; ++i) {
      executor.Submit([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        ran.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

}  // namespace
}  // namespace shoal::core
