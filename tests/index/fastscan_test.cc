#include "core/index/fastscan.h"

#include <faiss/impl/ProductQuantizer.h>
#include <faiss/utils/distances.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/index/topk.h"
#include "gtest/gtest.h"

namespace shoal::core::fastscan_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<SimdLevel> SupportedLevels() {
  std::vector<SimdLevel> levels = {SimdLevel::kScalar};
  if (DetectSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

std::vector<uint8_t> RandomCodes(size_t n, size_t m, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(n * m / 2);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  return codes;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

uint8_t Nibble(const uint8_t* code, size_t j) {
  return (j % 2 == 0) ? (code[j / 2] & 15) : (code[j / 2] >> 4);
}

// Keys of every row from FastScanBlockAt, row-major per query: out[q * n + i].
std::vector<float> BlockKeys(SimdLevel level, const std::vector<FastScanLut>& luts,
                             const std::vector<uint8_t>& packed, size_t n, const float* terms) {
  const size_t m = luts[0].m(), nq = luts.size();
  std::vector<float> out(nq * n);
  std::vector<float> block_terms(kFastScanBlockRows);
  float keys[kFastScanQueriesPerPass * kFastScanBlockRows];
  for (size_t b = 0; b * kFastScanBlockRows < n; ++b) {
    const size_t rows = std::min(kFastScanBlockRows, n - b * kFastScanBlockRows);
    std::fill(block_terms.begin(), block_terms.end(), 0.0f);
    if (terms) std::copy_n(terms + b * kFastScanBlockRows, rows, block_terms.begin());
    for (size_t q0 = 0; q0 < nq; q0 += kFastScanQueriesPerPass) {
      const size_t group = std::min(kFastScanQueriesPerPass, nq - q0);
      std::vector<const FastScanLut*> ptrs;
      for (size_t q = q0; q < q0 + group; ++q) ptrs.push_back(&luts[q]);
      FastScanBlockAt(level, ptrs.data(), group, packed.data() + b * FastScanBlockBytes(m),
                      terms ? block_terms.data() : nullptr, keys);
      for (size_t q = 0; q < group; ++q) {
        for (size_t i = 0; i < rows; ++i) {
          out[(q0 + q) * n + b * kFastScanBlockRows + i] = keys[q * kFastScanBlockRows + i];
        }
      }
    }
  }
  return out;
}

TEST(FastScan, PackedCodesUnpackToTheirRowsAndPadWithZeros) {
  for (size_t m : {2, 4, 6, 56}) {
    for (size_t n : {1, 31, 32, 33, 100}) {
      const auto codes = RandomCodes(n, m, uint32_t(m * 1000 + n));
      std::vector<uint8_t> packed(FastScanPackedBytes(n, m), 0xff);
      PackFastScanCodes(codes.data(), n, m, packed.data());
      std::vector<uint8_t> row(m / 2);
      for (size_t i = 0; i < n; ++i) {
        UnpackFastScanCode(packed.data(), m, i, row.data());
        ASSERT_TRUE(std::equal(row.begin(), row.end(), codes.begin() + i * m / 2)) << i;
      }
      for (size_t i = n; i % kFastScanBlockRows != 0; ++i) {
        UnpackFastScanCode(packed.data(), m, i, row.data());
        EXPECT_TRUE(std::all_of(row.begin(), row.end(), [](uint8_t b) { return b == 0; }));
      }
    }
  }
}

// The scalar kernel is the reference: the exact sum of the quantized entries, undone with the
// kept scale and bias, lands within error_bound() of the float tables' sum.
TEST(FastScan, ScalarKeysAreTheQuantizedSumWithinTheErrorBoundOfTheFloatSum) {
  const size_t m = 16, n = 70;
  const auto codes = RandomCodes(n, m, 7);
  std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
  PackFastScanCodes(codes.data(), n, m, packed.data());
  const auto tables = RandomFloats(m * 16, 8, 3.0f);
  const auto terms = RandomFloats(n, 9);
  std::vector<FastScanLut> luts(1);
  luts[0].Build(tables.data(), m, 2.5f);
  const auto keys = BlockKeys(SimdLevel::kScalar, luts, packed, n, terms.data());
  for (size_t i = 0; i < n; ++i) {
    uint32_t sum = 0;
    double exact = 2.5 + terms[i];
    for (size_t j = 0; j < m; ++j) {
      const uint8_t c = Nibble(&codes[i * m / 2], j);
      sum += luts[0].entry(j, c);
      exact += tables[j * 16 + c];
    }
    const float want = std::fma(float(sum), luts[0].inv_scale(), luts[0].offset()) + terms[i];
    EXPECT_EQ(keys[i], want) << i;
    EXPECT_NEAR(keys[i], exact, luts[0].error_bound() + 1e-4) << i;
  }
}

// Every level, every query count of a pass, odd and even pair counts, and m past 256 (the
// 16-bit accumulators are flushed) give bit-identical keys.
TEST(FastScan, EverySimdLevelMatchesTheScalarReferenceExactly) {
  for (size_t m : {2, 4, 6, 8, 10, 56, 64, 98, 392, 520}) {
    const size_t n = 97, nq = 6;
    const auto codes = RandomCodes(n, m, uint32_t(m));
    std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
    PackFastScanCodes(codes.data(), n, m, packed.data());
    const auto terms = RandomFloats(n, uint32_t(m + 1));
    std::vector<FastScanLut> luts(nq);
    for (size_t q = 0; q < nq; ++q) {
      const auto tables = RandomFloats(m * 16, uint32_t(100 * m + q));
      luts[q].Build(tables.data(), m, float(q));
    }
    for (const float* t : {static_cast<const float*>(nullptr), terms.data()}) {
      const auto want = BlockKeys(SimdLevel::kScalar, luts, packed, n, t);
      for (SimdLevel level : SupportedLevels()) {
        SCOPED_TRACE(std::string(SimdLevelName(level)) + " m " + std::to_string(m));
        EXPECT_EQ(BlockKeys(level, luts, packed, n, t), want);
      }
    }
  }
}

// Tables whose every sum is the largest a 16-bit lane can hold, and past it: 512 sub-quantizers
// of entry 255 sum to 130560, which wraps unless the accumulators are flushed every 256.
TEST(FastScan, SumsOfMaximalEntriesDoNotOverflowTheSixteenBitAccumulators) {
  for (size_t m : {256, 258, 512}) {
    const size_t n = 32;
    std::vector<uint8_t> codes(n * m / 2, 0xff);  // every code 15
    std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
    PackFastScanCodes(codes.data(), n, m, packed.data());
    std::vector<float> tables(m * 16, 0.0f);
    for (size_t j = 0; j < m; ++j) tables[j * 16 + 15] = 1.0f;
    std::vector<FastScanLut> luts(1);
    luts[0].Build(tables.data(), m, 0.0f);
    ASSERT_EQ(luts[0].entry(0, 15), 255);
    for (SimdLevel level : SupportedLevels()) {
      SCOPED_TRACE(std::string(SimdLevelName(level)) + " m " + std::to_string(m));
      const auto keys = BlockKeys(level, luts, packed, n, nullptr);
      for (float key : keys) EXPECT_NEAR(key, float(m), 1e-3f * m);
    }
  }
}

// Against FAISS: 4-bit PQ codes and L2 distance tables from faiss::ProductQuantizer; the
// estimate is within the quantization bound of |q - decode(code)|^2 at every level.
TEST(FastScan, EstimatesMatchFaissFourBitPqDistancesAtEveryLevel) {
  const size_t dim = 64, m = 16, n = 300, nq = 5;
  const auto train = RandomFloats(700 * dim, 11);
  const auto base = RandomFloats(n * dim, 12);
  const auto queries = RandomFloats(nq * dim, 13);
  faiss::ProductQuantizer pq(dim, m, 4);
  pq.verbose = false;
  pq.train(700, train.data());
  ASSERT_EQ(pq.code_size, m / 2);
  std::vector<uint8_t> codes(n * pq.code_size);
  pq.compute_codes(base.data(), codes.data(), n);
  std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
  PackFastScanCodes(codes.data(), n, m, packed.data());
  std::vector<FastScanLut> luts(nq);
  for (size_t q = 0; q < nq; ++q) {
    std::vector<float> tables(m * 16);
    pq.compute_distance_table(&queries[q * dim], tables.data());
    luts[q].Build(tables.data(), m, 0.0f);
  }
  std::vector<float> decoded(n * dim);
  pq.decode(codes.data(), decoded.data(), n);
  for (SimdLevel level : SupportedLevels()) {
    SCOPED_TRACE(SimdLevelName(level));
    const auto keys = BlockKeys(level, luts, packed, n, nullptr);
    for (size_t q = 0; q < nq; ++q) {
      for (size_t i = 0; i < n; ++i) {
        const float exact = faiss::fvec_L2sqr(&queries[q * dim], &decoded[i * dim], dim);
        ASSERT_NEAR(keys[q * n + i], exact, luts[q].error_bound() + 1e-3f * exact) << q << " " << i;
      }
    }
  }
}

// The partition scan with a top-k sink finds the same k rows as ranking every row's estimate,
// and the running threshold keeps most rows from ever reaching the sink.
TEST(FastScan, PartitionScanWithRunningThresholdsKeepsTheTopKAndRejectsMostRows) {
  const size_t m = 32, n = 5000, nq = 7, k = 10;
  const auto codes = RandomCodes(n, m, 21);
  std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
  PackFastScanCodes(codes.data(), n, m, packed.data());
  const auto terms = RandomFloats(n, 22, 0.1f);
  std::vector<FastScanLut> luts(nq);
  std::vector<const FastScanLut*> ptrs;
  for (size_t q = 0; q < nq; ++q) {
    const auto tables = RandomFloats(m * 16, uint32_t(23 + q));
    luts[q].Build(tables.data(), m, 0.0f);
    ptrs.push_back(&luts[q]);
  }
  const auto all = BlockKeys(SimdLevel::kScalar, luts, packed, n, terms.data());
  for (SimdLevel level : SupportedLevels()) {
    SCOPED_TRACE(SimdLevelName(level));
    std::vector<TopK> tops(nq, TopK(k));
    std::vector<float> thresholds(nq, kInf);
    size_t calls = 0;
    FastScanPartitionAt(level, ptrs.data(), nq, packed.data(), n, terms.data(), thresholds.data(),
                        [&](size_t q, uint32_t row, float key) {
                          ++calls;
                          tops[q].Push(key, row);
                          return tops[q].threshold();
                        });
    EXPECT_LT(calls, nq * n / 5);
    for (size_t q = 0; q < nq; ++q) {
      TopK want(k);
      for (size_t i = 0; i < n; ++i) want.Push(all[q * n + i], i);
      const auto got = tops[q].Take();
      const auto expected = want.Take();
      ASSERT_EQ(got.size(), expected.size());
      for (size_t r = 0; r < k; ++r) {
        EXPECT_EQ(got[r].id, expected[r].id) << q << " " << r;
        EXPECT_EQ(got[r].key, expected[r].key);
      }
    }
  }
}

TEST(FastScan, PartitionScanSeesNoRowPastTheEndOfAPartialBlock) {
  const size_t m = 4, n = 33;
  std::vector<uint8_t> codes(n * m / 2, 0);
  std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
  PackFastScanCodes(codes.data(), n, m, packed.data());
  std::vector<float> tables(m * 16, 1.0f);
  FastScanLut lut;
  lut.Build(tables.data(), m, 0.0f);
  const FastScanLut* ptr = &lut;
  for (SimdLevel level : SupportedLevels()) {
    float threshold = kInf;
    uint32_t max_row = 0;
    size_t calls = 0;
    FastScanPartitionAt(level, &ptr, 1, packed.data(), n, nullptr, &threshold,
                        [&](size_t, uint32_t row, float) {
                          max_row = std::max(max_row, row);
                          ++calls;
                          return kInf;
                        });
    EXPECT_EQ(calls, n);
    EXPECT_EQ(max_row, n - 1);
  }
}

// A segment's region (full blocks, row-major tail, then unaligned terms) keeps every row's code
// and term and scores exactly like the padded blocks.
TEST(FastScan, RegionsKeepRowsAndScoreLikePackedBlocks) {
  const size_t m = 10;
  for (size_t term_bytes : {0, 4}) {
    for (size_t n : {1, 31, 32, 33, 77}) {
      SCOPED_TRACE("n " + std::to_string(n) + " term_bytes " + std::to_string(term_bytes));
      const size_t row_bytes = m / 2 + term_bytes;
      const auto codes = RandomCodes(n, m, uint32_t(n));
      const auto terms = RandomFloats(n, uint32_t(n + 1));
      std::vector<uint8_t> rows(n * row_bytes);
      for (size_t i = 0; i < n; ++i) {
        std::copy_n(&codes[i * m / 2], m / 2, &rows[i * row_bytes]);
        if (term_bytes) std::memcpy(&rows[i * row_bytes + m / 2], &terms[i], sizeof(float));
      }
      std::vector<uint8_t> region(n * row_bytes);
      WriteFastScanRegion(rows.data(), n, m, term_bytes, region.data());
      std::vector<uint8_t> code(m / 2);
      for (size_t i = 0; i < n; ++i) {
        float term = -1;
        ReadFastScanRegionRow(region.data(), n, m, term_bytes, i, code.data(), &term);
        ASSERT_TRUE(std::equal(code.begin(), code.end(), &codes[i * m / 2])) << i;
        EXPECT_EQ(term, term_bytes ? terms[i] : 0.0f);
      }
      std::vector<uint8_t> packed(FastScanPackedBytes(n, m));
      PackFastScanCodes(codes.data(), n, m, packed.data());
      std::vector<FastScanLut> luts(5);
      std::vector<const FastScanLut*> ptrs;
      for (size_t q = 0; q < luts.size(); ++q) {
        luts[q].Build(RandomFloats(m * 16, uint32_t(50 + q)).data(), m, 1.0f);
        ptrs.push_back(&luts[q]);
      }
      const auto want =
          BlockKeys(SimdLevel::kScalar, luts, packed, n, term_bytes ? terms.data() : nullptr);
      std::vector<float> got(luts.size() * n);
      FastScanRegionKeys(ptrs.data(), ptrs.size(), region.data(), n, term_bytes, got.data());
      EXPECT_EQ(got, want);
    }
  }
}

TEST(FastScan, NonFiniteTableEntriesTakeTheWorstCodeWithoutUndefinedConversions) {
  // A NaN or infinite entry used to reach static_cast<uint8_t>(NaN) (undefined; UBSan stops
  // there, x86 gives code 0: the nearest). Now it is the farthest code, and the finite entries
  // of a table with an infinite range keep an order-preserving code.
  const size_t m = 4;
  std::vector<float> tables(m * 16);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = float(i % 16);
  tables[3] = std::numeric_limits<float>::infinity();
  tables[16 + 5] = std::numeric_limits<float>::quiet_NaN();
  FastScanLut lut;
  lut.Build(tables.data(), m, 0.0f);
  EXPECT_EQ(lut.entry(0, 3), 255);
  EXPECT_EQ(lut.entry(1, 5), 255);
  EXPECT_EQ(lut.entry(0, 0), 0);
  EXPECT_LT(lut.entry(0, 1), lut.entry(0, 2));
  EXPECT_LT(lut.entry(2, 0), lut.entry(2, 15));
}

}  // namespace
}  // namespace shoal::core::fastscan_test
