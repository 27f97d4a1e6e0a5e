#include "core/base/failpoint.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shoal::core {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

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
  for (const char* bad : {"wal.after_write", "wal.after_write:explode", "x:crash@0", "x:crash@two",
                          ":crash", "a b:crash", "x:crash,x:crash@2", "x:crash,"}) {
    auto parsed = ParseFailPoints(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("SHOAL_FAILPOINTS")) << bad;
  }
}

TEST_F(FailPointTest, AFailedArmLeavesTheArmedSetAlone) {
  ASSERT_TRUE(ArmFailPoints("kept:crash@5").ok());
  EXPECT_FALSE(ArmFailPoints("kept:bogus").ok());
  SHOAL_FAILPOINT("kept");
  EXPECT_EQ(FailPointHits("kept"), 1u);
}

TEST_F(FailPointTest, UnarmedFailPointsAreInert) {
  SHOAL_FAILPOINT("never.armed");
  EXPECT_EQ(FailPointHits("never.armed"), 0u);
  ASSERT_TRUE(ArmFailPoints("other:crash@9").ok());
  SHOAL_FAILPOINT("never.armed");  // armed set is non-empty, but not this name
  EXPECT_EQ(FailPointHits("never.armed"), 0u);
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
  ASSERT_TRUE(ArmFailPoints("segment.write.mid_file:crash@3").ok());
  SHOAL_FAILPOINT("segment.write.mid_file");
  SHOAL_FAILPOINT("segment.write.mid_file");
  EXPECT_EQ(FailPointHits("segment.write.mid_file"), 2u);
  EXPECT_EXIT(SHOAL_FAILPOINT("segment.write.mid_file"),
              ::testing::ExitedWithCode(kFailPointExitCode),
              "failpoint segment.write.mid_file hit 3: crashing");
}

TEST_F(FailPointTest, DisarmingStopsCountingAndCrashing) {
  ASSERT_TRUE(ArmFailPoints("x:crash@2").ok());
  SHOAL_FAILPOINT("x");
  DisarmFailPoints();
  SHOAL_FAILPOINT("x");
  SHOAL_FAILPOINT("x");
  EXPECT_EQ(FailPointHits("x"), 0u);
}

}  // namespace
}  // namespace shoal::core
