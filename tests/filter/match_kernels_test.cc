// The match kernels (interval, set, compare) at every SIMD level this CPU has against the scalar
// reference loop, over random values with the edge cases mixed in (INT64_MIN/MAX, NaN, +-inf, -0),
// at lengths around the 64-row words, ORed into bitsets that already hold bits; and CountBits over
// every range shape against a bit-by-bit count.
#include "storage/attributes/match_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/index/bit_count.h"

namespace shoal::storage::match_kernels_test {
namespace {

using core::SimdLevel;
using core::filter::CompareOp;

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels{SimdLevel::kScalar};
  if (core::DetectSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (core::DetectSimdLevel() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

std::vector<uint64_t> Noise(size_t n, std::mt19937_64* rng) {
  std::vector<uint64_t> words((n + 63) / 64);
  for (uint64_t& w : words) w = (*rng)() & (*rng)();  // about a quarter of the bits already set
  return words;
}

bool Bit(const std::vector<uint64_t>& w, size_t i) { return (w[i >> 6] >> (i & 63)) & 1; }

TEST(MatchKernels, IntervalBitsAreTheIntervalTestAtEveryLevel) {
  std::mt19937_64 rng(7);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> edges{kMin, kMin + 1, -1, 0, 1, 2, 5, 9, 10, kMax - 1, kMax};
  for (size_t n : {0, 1, 63, 64, 65, 127, 128, 200, 1000}) {
    std::vector<int64_t> v(n);
    for (int64_t& x : v) x = rng() % 3 == 0 ? edges[rng() % edges.size()] : int64_t(rng() % 20) - 5;
    const std::vector<std::pair<int64_t, uint64_t>> intervals{
        {0, 9}, {-5, 0}, {kMin, 5}, {3, uint64_t(kMax)}, {kMin, ~uint64_t(0) - 1}, {kMax, 0}};
    for (const auto& [lo, span] : intervals) {
      for (bool outside : {false, true}) {
        const std::vector<uint64_t> before = Noise(n, &rng);
        for (SimdLevel level : Levels()) {
          std::vector<uint64_t> words = before;
          OrIntervalBitsAt(level, v.data(), n, lo, span, outside, words.data());
          for (size_t i = 0; i < n; ++i) {
            const bool in = (uint64_t(v[i]) - uint64_t(lo) <= span) != outside;
            ASSERT_EQ(Bit(words, i), Bit(before, i) || in)
                << "level " << int(level) << " n " << n << " i " << i << " v " << v[i];
          }
        }
      }
    }
  }
}

TEST(MatchKernels, SetBitsAreMembershipAtEveryLevel) {
  std::mt19937_64 rng(5);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::vector<std::vector<int64_t>> sets{
      {}, {0}, {kMin, kMax}, {-3, 1, 4, 7}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
  for (size_t n : {0, 1, 63, 64, 65, 129, 500}) {
    std::vector<int64_t> v(n);
    for (int64_t& x : v) x = rng() % 5 == 0 ? (rng() % 2 ? kMin : kMax) : int64_t(rng() % 16) - 4;
    for (const std::vector<int64_t>& set : sets) {
      for (bool negate : {false, true}) {
        const std::vector<uint64_t> before = Noise(n, &rng);
        for (SimdLevel level : Levels()) {
          std::vector<uint64_t> words = before;
          OrSetBitsAt(level, v.data(), n, set.data(), set.size(), negate, words.data());
          for (size_t i = 0; i < n; ++i) {
            const bool in = std::find(set.begin(), set.end(), v[i]) != set.end();
            ASSERT_EQ(Bit(words, i), Bit(before, i) || (in != negate))
                << "level " << int(level) << " n " << n << " i " << i << " v " << v[i];
          }
        }
      }
    }
  }
}

TEST(MatchKernels, CompareBitsAreTheNativeCompareAtEveryLevel) {
  std::mt19937_64 rng(11);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> edges{nan, inf, -inf, 0.0, -0.0, 1.5, -2.25, 1e300};
  const std::vector<CompareOp> ops{CompareOp::kEq, CompareOp::kNe, CompareOp::kLt,
                                   CompareOp::kLe, CompareOp::kGt, CompareOp::kGe};
  for (size_t n : {0, 1, 63, 64, 65, 130, 777}) {
    std::vector<double> v(n);
    for (double& x : v) x = rng() % 3 == 0 ? edges[rng() % edges.size()] : double(rng() % 7) * 0.75;
    for (double x : {0.0, -0.0, 1.5, nan, inf, -inf, 2.25}) {
      for (CompareOp op : ops) {
        const std::vector<uint64_t> before = Noise(n, &rng);
        for (SimdLevel level : Levels()) {
          std::vector<uint64_t> words = before;
          OrCompareBitsAt(level, v.data(), n, op, x, words.data());
          for (size_t i = 0; i < n; ++i) {
            const double a = v[i];
            const bool want = op == CompareOp::kEq   ? a == x
                              : op == CompareOp::kNe ? a != x
                              : op == CompareOp::kLt ? a < x
                              : op == CompareOp::kLe ? a <= x
                              : op == CompareOp::kGt ? a > x
                                                     : a >= x;
            ASSERT_EQ(Bit(words, i), Bit(before, i) || want)
                << "level " << int(level) << " op " << int(op) << " x " << x << " v " << a;
          }
        }
      }
    }
  }
}

TEST(CountBits, CountsEveryRangeShape) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> words(6);
  for (uint64_t& w : words) w = rng();
  words[2] = ~uint64_t(0);
  for (uint64_t begin = 0; begin <= 6 * 64; begin += 7) {
    for (uint64_t end = begin; end <= 6 * 64; end += 5) {
      uint64_t want = 0;
      for (uint64_t i = begin; i < end; ++i) want += Bit(words, i);
      ASSERT_EQ(core::CountBits(words.data(), begin, end), want) << begin << ".." << end;
    }
  }
  EXPECT_EQ(core::CountBits(words.data(), 128, 192), 64u);  // the full word
}

}  // namespace
}  // namespace shoal::storage::match_kernels_test
