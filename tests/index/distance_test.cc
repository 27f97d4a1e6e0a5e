#include "core/index/distance.h"

#include <faiss/utils/distances.h>

#include <random>

#include "gtest/gtest.h"

namespace shoal::core::distance_test {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  if (DetectSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

// Every dimension from 1 to 130 exercises each kernel's main loop, short loop and tail.
TEST(Distance, EveryKernelMatchesFaissForEveryTailLength) {
  for (size_t dim = 1; dim <= 130; ++dim) {
    auto a = Random(dim, uint32_t(dim));
    auto b = Random(dim, uint32_t(dim + 1000));
    const float l2 = faiss::fvec_L2sqr(a.data(), b.data(), dim);
    const float ip = faiss::fvec_inner_product(a.data(), b.data(), dim);
    for (SimdLevel level : SupportedLevels()) {
      SCOPED_TRACE(std::string(SimdLevelName(level)) + " dim " + std::to_string(dim));
      EXPECT_NEAR(L2SqrAt(level, a.data(), b.data(), dim), l2, 1e-4f * (1 + std::abs(l2)));
      EXPECT_NEAR(InnerProductAt(level, a.data(), b.data(), dim), ip, 1e-4f * (1 + std::abs(ip)));
    }
  }
}

TEST(Distance, ManyVariantsScanRowsLikeTheSingleKernel) {
  const size_t dim = 784, n = 37;
  auto q = Random(dim, 1);
  auto base = Random(dim * n, 2);
  std::vector<float> l2(n), ip(n);
  L2SqrMany(q.data(), base.data(), n, dim, l2.data());
  InnerProductMany(q.data(), base.data(), n, dim, ip.data());
  for (size_t i = 0; i < n; ++i) {
    EXPECT_FLOAT_EQ(l2[i], L2Sqr(q.data(), base.data() + i * dim, dim));
    EXPECT_FLOAT_EQ(ip[i], InnerProduct(q.data(), base.data() + i * dim, dim));
  }
}

TEST(Distance, ActiveLevelIsSupportedAndNamed) {
  EXPECT_LE(ActiveSimdLevel(), DetectSimdLevel());
  EXPECT_FALSE(SimdLevelName(ActiveSimdLevel()).empty());
}

}  // namespace
}  // namespace shoal::core::distance_test
