#include <cmath>
#include <thread>

#include "core/base/cancel.h"
#include "core/base/logging.h"
#include "core/base/metric.h"
#include "core/base/status.h"
#include "gtest/gtest.h"

namespace shoal::core::base_test {
namespace {

TEST(Metric, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(*ParseMetric("L2"), Metric::kL2);
  EXPECT_EQ(*ParseMetric("ip"), Metric::kInnerProduct);
  EXPECT_EQ(*ParseMetric("cosine"), Metric::kCosine);
  auto bad = ParseMetric("hamming");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("metric"), std::string::npos);
  for (Metric m : {Metric::kL2, Metric::kInnerProduct, Metric::kCosine}) {
    EXPECT_EQ(*ParseMetric(std::string(MetricName(m))), m);
  }
}

TEST(Metric, KeyOrderingMakesNearerSmallerForEveryMetric) {
  EXPECT_LT(ToKey(Metric::kL2, 1.0f), ToKey(Metric::kL2, 2.0f));
  EXPECT_LT(ToKey(Metric::kInnerProduct, 2.0f), ToKey(Metric::kInnerProduct, 1.0f));
  EXPECT_EQ(FromKey(Metric::kCosine, ToKey(Metric::kCosine, 0.5f)), 0.5f);
}

TEST(Metric, NormalizeMakesUnitLengthAndLeavesZeroAlone) {
  float v[3] = {3, 4, 0};
  NormalizeInPlace(v, 3);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  float z[2] = {0, 0};
  NormalizeInPlace(z, 2);
  EXPECT_EQ(z[0], 0.0f);
}

// A tiny but finite vector (accepted by validation) normalises to a unit vector: in float,
// 1 / |v| overflowed to inf and 0 * inf made the other components NaN.
TEST(Metric, NormalizeKeepsATinyVectorFinite) {
  float v[4] = {1e-39f, 0, 0, 0};
  NormalizeInPlace(v, 4);
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 0.0f);
  float w[2] = {-1e-45f, 1e-45f};  // the smallest subnormals
  NormalizeInPlace(w, 2);
  EXPECT_FLOAT_EQ(w[0], -std::sqrt(0.5f));
  EXPECT_FLOAT_EQ(w[1], std::sqrt(0.5f));
}

TEST(CancelToken, ReportsCancellationAndDeadline) {
  CancelToken forever;
  EXPECT_TRUE(forever.Check().ok());
  forever.Cancel();
  EXPECT_EQ(forever.Check().code(), absl::StatusCode::kCancelled);

  CancelToken past(CancelToken::Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(past.Check().code(), absl::StatusCode::kDeadlineExceeded);
  CancelToken future(CancelToken::Clock::now() + std::chrono::hours(1));
  EXPECT_TRUE(future.Check().ok());
}

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status UseMacros(int x, int* out) {
  SHOAL_ASSIGN_OR_RETURN(int h, Half(x));
  SHOAL_RETURN_IF_ERROR(h > 100 ? absl::OutOfRangeError("big") : absl::OkStatus());
  *out = h;
  return absl::OkStatus();
}

TEST(StatusMacros, PropagateErrorsAndValues) {
  int out = 0;
  EXPECT_TRUE(UseMacros(8, &out).ok());
  EXPECT_EQ(out, 4);
  EXPECT_EQ(UseMacros(3, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UseMacros(400, &out).code(), absl::StatusCode::kOutOfRange);
}

TEST(Logging, SharesLoggersAndValidatesLevels) {
  EXPECT_EQ(Logger("a").get(), Logger("a").get());
  EXPECT_TRUE(SetLogLevel("warn").ok());
  EXPECT_EQ(Logger("b")->level(), spdlog::level::warn);
  EXPECT_FALSE(SetLogLevel("loud").ok());
  EXPECT_TRUE(SetLogLevel("info").ok());
}

}  // namespace
}  // namespace shoal::core::base_test
