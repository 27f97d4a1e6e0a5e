// --quiet-check (bench/harness/quiet_check.h): CPU of the harness's own tree does not count,
// CPU of another process does, and the refusal names it.
#include "bench/harness/quiet_check.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::bench::quiet_check_test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Spins for `seconds` of wall time.
void Spin(double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < end) x = x + 1;
}

// A process outside this one's tree: a child that forks a grandchild and exits, so the
// grandchild is re-parented (to init or a subreaper) and spins until killed. Returns its pid.
pid_t StartForeignSpinner() {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      close(fds[0]);
      close(fds[1]);
      setsid();
      for (int i = 0; i < 100; ++i) Spin(0.1);  // at most 10 s, if nobody kills it
      _exit(0);
    }
    if (write(fds[1], &grandchild, sizeof grandchild) != sizeof grandchild) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  pid_t grandchild = -1;
  if (read(fds[0], &grandchild, sizeof grandchild) != sizeof grandchild) grandchild = -1;
  close(fds[0]);
  waitpid(child, nullptr, 0);
  return grandchild;
}

TEST(QuietCheckTest, ReadsTheMachine) {
  EXPECT_GE(ReadLoadAverage(), 0.0);
  const ProcTable table = ReadProcTable();
  ASSERT_TRUE(table.contains(getpid()));
  EXPECT_EQ(table.at(getpid()).ppid, getppid());
  EXPECT_GT(ReadBusyTicks(), 0u);
}

// Both tests read the whole machine, which other tests may be loading: they assert on what is
// attributed to whom, never on a threshold the machine's load could cross.
TEST(QuietCheckTest, OwnChildrenAreOurs) {
  QuietCheck check(QuietCheckOptions{}, [](const std::string&) {});
  check.Start();
  const pid_t child = fork();
  if (child == 0) {
    Spin(10);  // until killed
    _exit(0);
  }
  ASSERT_GT(child, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const QuietCheck::Usage u = check.Measure();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_GT(u.own_cores, 0.3);  // the spinning child, a core when the machine lets it
  EXPECT_THAT(u.busiest, Not(HasSubstr(absl::StrCat("(", child, ")"))));
}

TEST(QuietCheckTest, AForeignProcessIsCountedAndNamed) {
  QuietCheckOptions options;
  options.max_foreign_cores = 0.05;
  QuietCheck check(options, [](const std::string&) {});
  check.Start();
  const pid_t spinner = StartForeignSpinner();
  ASSERT_GT(spinner, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const QuietCheck::Usage u = check.Measure();
  const absl::Status status = check.Finish("a point");
  kill(spinner, SIGKILL);
  EXPECT_GT(u.foreign_cores, 0.05);
  EXPECT_THAT(u.busiest, HasSubstr(absl::StrCat("(", spinner, ")")));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("during a point"));
}

TEST(QuietCheckTest, BusiestForeignSortsAndSkipsTheTree) {
  ProcTable before, after;
  before[10] = {1, 0, "mine"};
  before[11] = {10, 0, "my-child"};
  before[20] = {1, 0, "small"};
  before[30] = {1, 0, "big"};
  after = before;
  after[10].ticks = 1000;
  after[11].ticks = 1000;
  after[20].ticks = 10;
  after[30].ticks = 90;
  const std::string s = BusiestForeign(before, after, 10, 1.0);
  EXPECT_THAT(s, Not(HasSubstr("mine")));
  EXPECT_THAT(s, Not(HasSubstr("my-child")));
  EXPECT_LT(s.find("big"), s.find("small"));
  EXPECT_EQ(TreeTicks(after, 10), 2000u);
}

}  // namespace
}  // namespace shoal::bench::quiet_check_test
