#include <atomic>
#include <stdexcept>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/exec/manual_executor.h"
#include "core/exec/run_and_wait.h"
#include "core/exec/tbb_executor.h"
#include "core/exec/thread_executor.h"
#include "gtest/gtest.h"
#include "tests/fakes/watchdog.h"

namespace shoal::core::exec_test {
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

TEST(TbbExecutor, ATaskThatThrowsIsAbandonedAndTheExecutorGoesOn) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "throwing TbbExecutor task");
  TbbExecutor executor(1);
  std::atomic<int> ran{0};
  executor.Submit([] { throw std::runtime_error("injected failure"); });
  executor.Submit([] { throw std::bad_alloc(); });
  for (int i = 0; i < 10; ++i) executor.Submit([&] { ran.fetch_add(1); });
  executor.WaitIdle();
  EXPECT_EQ(ran.load(), 10);
  EXPECT_EQ(executor.failed_tasks(), 2);
  EXPECT_EQ(executor.outstanding(), 0);
}

TEST(ThreadExecutor, ATaskThatThrowsIsAbandonedAndTheThreadGoesOn) {
  std::atomic<int> ran{0};
  {
    ThreadExecutor executor(1);
    executor.Submit([] { throw std::runtime_error("injected failure"); });
    for (int i = 0; i < 10; ++i) executor.Submit([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 10);
}

TEST(ParallelFor, ATaskThatThrowsReturnsInternalAndTheExecutorKeepsRunning) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "ParallelFor with a throwing task");
  TbbExecutor executor(2);
  const absl::Status failed = ParallelFor(executor, 16, [](size_t i) -> absl::Status {
    if (i == 5) throw std::runtime_error("injected failure in task 5");
    return absl::OkStatus();
  });
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.message().find("injected failure in task 5"), std::string::npos) << failed;
  // The executor is intact: the next call runs every task.
  std::atomic<int> ran{0};
  EXPECT_TRUE(ParallelFor(executor, 16, [&](size_t) {
                ran.fetch_add(1);
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(ran.load(), 16);
  EXPECT_EQ(executor.failed_tasks(), 0);  // ParallelFor caught it, not the executor
}

TEST(ParallelFor, ReturnsTheFirstFailureAndCountsFailedTasksAsDone) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "ParallelFor with failing tasks");
  ManualExecutor manual;
  absl::Status status;
  absl::Notification returned;
  std::thread caller([&] {
    status = ParallelFor(manual, 4, [](size_t i) {
      return i >= 1 ? absl::NotFoundError(absl::StrCat("task ", i)) : absl::OkStatus();
    });
    returned.Notify();
  });
  // Tasks run in submission order: task 1 fails first, 2 and 3 are skipped but still counted.
  while (manual.queued() < 4) std::this_thread::yield();
  EXPECT_EQ(manual.RunAll(), 4);
  caller.join();
  EXPECT_TRUE(returned.HasBeenNotified());
  EXPECT_EQ(status, absl::NotFoundError("task 1"));
  ThreadExecutor threads(2);
  EXPECT_EQ(RunAndWait(threads, [] { return absl::DataLossError("x"); }).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ParallelFor(threads, 0, [](size_t) { return absl::InternalError("never"); }).ok());
}

// I-1 checked at run time: with one arena thread, waiting inside a task would wait for itself.
TEST(RunAndWait, FromAnArenaTaskAnswersFailedPreconditionInsteadOfDeadlocking) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "RunAndWait inside the arena");
  TbbExecutor executor(1);
  ThreadExecutor admin(1);
  EXPECT_FALSE(InArenaTask());
  absl::Status same_arena, other_executor;
  bool in_task = false;
  std::atomic<bool> inner_ran{false};
  executor.Submit([&] {
    in_task = InArenaTask();
    same_arena = RunAndWait(executor, [&] {
      inner_ran = true;
      return absl::OkStatus();
    });
    other_executor = ParallelFor(admin, 2, [&](size_t) {
      inner_ran = true;
      return absl::OkStatus();
    });
  });
  executor.WaitIdle();
  EXPECT_TRUE(in_task);
  EXPECT_FALSE(InArenaTask());
  EXPECT_EQ(same_arena.code(), absl::StatusCode::kFailedPrecondition) << same_arena;
  EXPECT_NE(same_arena.message().find("I-1"), std::string::npos) << same_arena;
  EXPECT_EQ(other_executor.code(), absl::StatusCode::kFailedPrecondition) << other_executor;
  EXPECT_FALSE(inner_ran.load());
  // From an admin thread the same call runs.
  absl::Status from_admin;
  RunAndWait(admin, [&] {
    from_admin = RunAndWait(executor, [] { return absl::OkStatus(); });
    return absl::OkStatus();
  }).IgnoreError();
  EXPECT_TRUE(from_admin.ok()) << from_admin;
}

}  // namespace
}  // namespace shoal::core::exec_test
