#include "core/base/failpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::core::failpoint_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::set<std::string> RegisteredNames() {
  std::set<std::string> names;
  for (std::string_view name : kFailPointNames) names.emplace(name);
  return names;
}

// Every "open NAME close" in text whose NAME is a failpoint-shaped word ([a-z0-9_.]+). (Not
// std::regex: GCC 12's libstdc++ regex trips -Wmaybe-uninitialized under ASan at -O2.)
std::set<std::string> NamesBetween(const std::string& text, std::string_view open,
                                   std::string_view close) {
  std::set<std::string> names;
  size_t at = text.find(open);
  while (at != std::string::npos) {
    const size_t begin = at + open.size();
    const size_t end = text.find(close, begin);
    if (end == std::string::npos) break;
    const std::string name = text.substr(begin, end - begin);
    const bool is_name =
        !name.empty() &&
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") == std::string::npos;
    if (is_name) names.insert(name);
    // Like a regex iterator: a match's closing delimiter does not open the next one.
    at = text.find(open, is_name ? end + close.size() : at + 1);
  }
  return names;
}

std::string ReadSourceFile(const std::string& relative) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FailPointTest : public ::testing::Test {
 protected:
  // Death tests re-run the binary rather than fork a process that may hold other threads'
  // locks (sanitizer runtimes start threads of their own).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  void TearDown() override { DisarmFailPoints(); }
};

TEST_F(FailPointTest, ParsesNamesActionsAndNthHits) {
  auto parsed = ParseFailPoints("wal.after_write:crash,manifest.before_rename:crash@3");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed,
              ElementsAre(FailPointSpec{"wal.after_write", FailPointAction::kCrash, 1},
                          FailPointSpec{"manifest.before_rename", FailPointAction::kCrash, 3}));
  auto empty = ParseFailPoints("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(FailPointTest, RejectsMalformedSpecsNamingTheBadPart) {
  for (const char* bad :
       {"wal.after_write", "wal.after_write:explode", "wal.rotate:crash@0", "wal.rotate:crash@two",
        ":crash", "wal rotate:crash", "wal.rotate:crash,wal.rotate:crash@2", "wal.rotate:crash,"}) {
    auto parsed = ParseFailPoints(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("SHOAL_FAILPOINTS")) << bad;
  }
}

// A misspelt name would otherwise arm nothing, and a crash test would pass without crashing.
TEST_F(FailPointTest, RefusesAnUnknownNameNamingIt) {
  auto parsed = ParseFailPoints("wal.after_write:crash,wal.after_wirte:crash@2");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("unknown failpoint 'wal.after_wirte'"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("wal.after_write"));  // the known ones listed

  ASSERT_TRUE(ArmFailPoints("wal.rotate:crash@5").ok());
  absl::Status armed = ArmFailPoints("wal.after_wirte:crash");
  EXPECT_EQ(armed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(armed.message(), HasSubstr("'wal.after_wirte'"));
  SHOAL_FAILPOINT("wal.rotate");  // the earlier set is still armed
  EXPECT_EQ(FailPointHits("wal.rotate"), 1u);
  EXPECT_EQ(FailPointHits("wal.after_wirte"), 0u);
}

// SHOAL_FAILPOINTS is read before main(): a process given an unknown name ends at start-up with
// exit code 2 and the name on stderr. This binary, re-run with one, shows it.
TEST_F(FailPointTest, AnUnknownNameInTheEnvironmentEndsTheProcessWithExitCodeTwo) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], STDERR_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    char* const env[] = {const_cast<char*>("SHOAL_FAILPOINTS=manifest.before_renmae:crash"),
                         nullptr};
    execle("/proc/self/exe", "base_test", "--gtest_list_tests", static_cast<char*>(nullptr), env);
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) output.append(buf, size_t(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 2) << output;
  EXPECT_THAT(output, HasSubstr("unknown failpoint 'manifest.before_renmae'"));
}

TEST_F(FailPointTest, AFailedArmLeavesTheArmedSetAlone) {
  ASSERT_TRUE(ArmFailPoints("wal.rotate:crash@5").ok());
  EXPECT_FALSE(ArmFailPoints("wal.rotate:bogus").ok());
  SHOAL_FAILPOINT("wal.rotate");
  EXPECT_EQ(FailPointHits("wal.rotate"), 1u);
}

TEST_F(FailPointTest, UnarmedFailPointsAreInert) {
  SHOAL_FAILPOINT("merge.after_install");
  EXPECT_EQ(FailPointHits("merge.after_install"), 0u);
  ASSERT_TRUE(ArmFailPoints("wal.rotate:crash@9").ok());
  SHOAL_FAILPOINT("merge.after_install");  // armed set is non-empty, but not this name
  EXPECT_EQ(FailPointHits("merge.after_install"), 0u);
}

TEST_F(FailPointTest, CrashEndsTheProcessAtTheFirstHitWithItsExitCode) {
  EXPECT_EXIT(
      {
        (void)ArmFailPoints("wal.after_write:crash");
        SHOAL_FAILPOINT("wal.after_write");
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(kFailPointExitCode), "failpoint wal.after_write hit 1: crashing");
}

TEST_F(FailPointTest, CrashAtNthHitLetsEarlierHitsPass) {
  ASSERT_TRUE(ArmFailPoints("segment.mid_file:crash@3").ok());
  SHOAL_FAILPOINT("segment.mid_file");
  SHOAL_FAILPOINT("segment.mid_file");
  EXPECT_EQ(FailPointHits("segment.mid_file"), 2u);
  EXPECT_EXIT(SHOAL_FAILPOINT("segment.mid_file"), ::testing::ExitedWithCode(kFailPointExitCode),
              "failpoint segment.mid_file hit 3: crashing");
}

TEST_F(FailPointTest, DisarmingStopsCountingAndCrashing) {
  ASSERT_TRUE(ArmFailPoints("wal.rotate:crash@2").ok());
  SHOAL_FAILPOINT("wal.rotate");
  DisarmFailPoints();
  SHOAL_FAILPOINT("wal.rotate");
  SHOAL_FAILPOINT("wal.rotate");
  EXPECT_EQ(FailPointHits("wal.rotate"), 0u);
}

// docs/failpoints.md's table names exactly the registered failpoints (a row may name several).
TEST(FailPointRegistry, TheDocsTableListsExactlyTheRegisteredNames) {
  const std::string doc = ReadSourceFile("docs/failpoints.md");
  ASSERT_FALSE(doc.empty()) << "cannot read docs/failpoints.md under " << SHOAL_SOURCE_DIR;
  std::set<std::string> documented;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;  // a row of the table
    const std::string first_cell = line.substr(1, line.find('|', 1) - 1);
    documented.merge(NamesBetween(first_cell, "`", "`"));
  }
  EXPECT_EQ(documented, RegisteredNames());
}

// Every registered failpoint marks a step somewhere in core/, storage/ or server/: one that was
// removed from the code would otherwise stay armable and never fire.
TEST(FailPointRegistry, EveryRegisteredNameHasASite) {
  std::set<std::string> sites;
  for (const char* dir : {"core", "storage", "server"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(
             std::filesystem::path(SHOAL_SOURCE_DIR) / dir)) {
      const std::string ext = entry.path().extension();
      if (ext != ".cc" && ext != ".h") continue;
      std::ifstream in(entry.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      sites.merge(NamesBetween(text, "SHOAL_FAILPOINT(\"", "\")"));
    }
  }
  EXPECT_EQ(sites, RegisteredNames());
}

}  // namespace
}  // namespace shoal::core::failpoint_test
