// Residual SQ8/PQ codes (core/index/ivf_model.h): training on residuals, the stored per-vector
// term, the strided kernels, and the partition scan's keys against a straightforward
// reference computed from FAISS's decoding of the same codes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/index/distance.h"
#include "core/index/ivf_model.h"
#include "core/index/partition_scan.h"
#include "core/index/scan_kernels.h"
#include "faiss/impl/ProductQuantizer.h"
#include "faiss/impl/ScalarQuantizer.h"
#include "gtest/gtest.h"

namespace shoal::core::residual_scan_test {
namespace {

// `clusters` centres uniform in [-spread, spread]^dim, points centre + N(0, sigma^2).
std::vector<float> Clustered(size_t n, size_t dim, size_t clusters, float spread, float sigma,
                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-spread, spread);
  std::normal_distribution<float> noise(0.0f, sigma);
  std::vector<float> centres(clusters * dim);
  for (float& c : centres) c = uniform(rng);
  std::vector<float> x(n * dim);
  for (size_t i = 0; i < n; ++i) {
    const float* c = centres.data() + (i % clusters) * dim;
    for (size_t d = 0; d < dim; ++d) x[i * dim + d] = c[d] + noise(rng);
  }
  return x;
}

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels{SimdLevel::kScalar};
  if (DetectSimdLevel() >= SimdLevel::kAvx2) levels.push_back(SimdLevel::kAvx2);
  if (DetectSimdLevel() >= SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

double Dot(const float* a, const float* b, size_t dim) {
  double s = 0;
  for (size_t d = 0; d < dim; ++d) s += double(a[d]) * b[d];
  return s;
}

// r^ of every row, decoded by FAISS from the quantizer code at the start of each row.
std::vector<float> DecodeResiduals(const IvfModel& model, const uint8_t* rows, size_t n) {
  const size_t dim = model.dim, qsize = model.QuantizerCodeSize(), stride = model.CodeSize();
  std::vector<uint8_t> codes(n * qsize);
  for (size_t i = 0; i < n; ++i) {
    std::copy(rows + i * stride, rows + i * stride + qsize, codes.data() + i * qsize);
  }
  std::vector<float> decoded(n * dim);
  if (model.encoding == VectorEncoding::kSq8) {
    faiss::ScalarQuantizer sq(dim, faiss::ScalarQuantizer::QT_8bit);
    sq.trained = model.sq_vmin;
    sq.trained.insert(sq.trained.end(), model.sq_vdiff.begin(), model.sq_vdiff.end());
    sq.decode(codes.data(), decoded.data(), n);
  } else {
    faiss::ProductQuantizer pq(dim, model.pq_m, model.pq_nbits);
    pq.centroids = model.pq_codebooks;
    pq.decode(codes.data(), decoded.data(), n);
  }
  return decoded;
}

TEST(ScanKernels, StridedKernelsMatchAPlainLoopAtEveryLevel) {
  const size_t n = 33, dim = 37, stride = dim + 4 + 3;  // odd dim and stride: tails, unaligned
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal;
  std::vector<uint8_t> rows(n * stride);
  for (uint8_t& b : rows) b = uint8_t(byte(rng));
  std::vector<float> w(dim), tables(dim * 256);
  for (float& v : w) v = normal(rng);
  for (float& v : tables) v = normal(rng);
  for (size_t i = 0; i < n; ++i) {
    const float term = float(i) - 7.5f;
    std::memcpy(rows.data() + i * stride + dim, &term, sizeof term);
  }
  for (SimdLevel level : Levels()) {
    std::vector<float> dot(n);
    Sq8DotManyStridedAt(level, w.data(), rows.data(), stride, n, dim, dot.data());
    for (size_t i = 0; i < n; ++i) {
      double want = 0;
      for (size_t d = 0; d < dim; ++d) want += double(w[d]) * rows[i * stride + d];
      EXPECT_NEAR(dot[i], want, 1e-3 * (1 + std::abs(want))) << int(level) << " row " << i;
    }
  }
  std::vector<float> pq(n);
  PqScan(tables.data(), dim, rows.data(), stride, n, pq.data());
  std::vector<float> terms(n, 1.0f);
  AddResidualTerms(rows.data(), stride, dim, n, 0.25f, terms.data());
  std::vector<float> decoded(n * dim);
  std::vector<float> offset(dim, 0.5f), scale(dim, 2.0f);
  Sq8Decode(offset.data(), scale.data(), rows.data(), n, dim, decoded.data(), stride);
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (size_t j = 0; j < dim; ++j) want += tables[j * 256 + rows[i * stride + j]];
    EXPECT_NEAR(pq[i], want, 1e-3 * (1 + std::abs(want))) << i;
    EXPECT_EQ(terms[i], std::max(0.0f, 1.0f + 0.25f + float(i) - 7.5f)) << i;
    for (size_t d = 0; d < dim; ++d) {
      ASSERT_EQ(decoded[i * dim + d], 0.5f + 2.0f * rows[i * stride + d]) << i << " " << d;
    }
  }
}

// SQ8 learns the spread of the residuals, not of the data: with clusters in [-10, 10] and
// sigma 0.1, raw ranges are ~20 wide and residual ranges ~1 (more centroids than clusters, so
// k-means leaves no cluster without one).
TEST(IvfModel, TrainsSq8RangesOnResidualsToTheCentroids) {
  const size_t n = 4000, dim = 16;
  const auto x = Clustered(n, dim, 8, 10.0f, 0.1f, 1);
  IvfTrainOptions o;
  o.nlist = 64;
  o.encoding = VectorEncoding::kSq8;
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->residual);
  EXPECT_EQ(model->CodeSize(), dim + 4);
  for (size_t d = 0; d < dim; ++d) EXPECT_LT(model->sq_vdiff[d], 2.0f) << d;
  o.residual = false;
  auto raw = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(raw.ok());
  EXPECT_FALSE(raw->residual);
  EXPECT_EQ(raw->CodeSize(), dim);
  EXPECT_GT(raw->sq_vdiff[0], 5.0f);
}

TEST(IvfModel, EncodingResidualsWithoutPartitionsIsInvalidArgument) {
  const size_t n = 300, dim = 8;
  const auto x = Clustered(n, dim, 4, 1.0f, 0.1f, 2);
  IvfTrainOptions o;
  o.nlist = 4;
  o.encoding = VectorEncoding::kPq;
  o.pq_m = 4;
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<uint8_t> codes(n * model->CodeSize());
  EXPECT_EQ(EncodeVectors(*model, x.data(), n, nullptr, codes.data()).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> out_of_range(n, 4);
  EXPECT_EQ(EncodeVectors(*model, x.data(), n, out_of_range.data(), codes.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// Every residual key, per-query and blocked, equals the reference computed from FAISS's decoded
// residual r^: L2 |q - (c + r^)|^2 (the stored term holds |r^|^2 + 2<c, r^>), IP / cosine
// -(<q, c> + <q, r^>).
TEST(PartitionScan, ResidualKeysMatchAReferenceOnDecodedResiduals) {
  const size_t n = 2000, dim = 32, nq = 10;
  const auto x = Clustered(n, dim, 8, 1.0f, 0.2f, 3);
  const auto queries = Clustered(nq, dim, 8, 1.0f, 0.3f, 4);
  for (VectorEncoding encoding : {VectorEncoding::kSq8, VectorEncoding::kPq}) {
    for (Metric metric : {Metric::kL2, Metric::kInnerProduct}) {
      IvfTrainOptions o;
      o.nlist = 8;
      o.encoding = encoding;
      o.pq_m = 8;
      auto trained = TrainIvfModel(x.data(), n, dim, metric, o);
      ASSERT_TRUE(trained.ok()) << trained.status();
      const IvfModel& model = *trained;
      ASSERT_TRUE(model.residual);
      std::vector<uint32_t> assign(n);
      ASSERT_TRUE(AssignToCentroids(model, x.data(), n, assign.data()).ok());
      // Partition 3's rows, encoded as a segment would.
      std::vector<float> rows;
      for (size_t i = 0; i < n; ++i) {
        if (assign[i] == 3) rows.insert(rows.end(), &x[i * dim], &x[(i + 1) * dim]);
      }
      const size_t m = rows.size() / dim;
      ASSERT_GT(m, 10u);
      const std::vector<uint32_t> parts(m, 3);
      std::vector<uint8_t> codes(m * model.CodeSize());
      ASSERT_TRUE(EncodeVectors(model, rows.data(), m, parts.data(), codes.data()).ok());
      const std::vector<float> decoded = DecodeResiduals(model, codes.data(), m);
      const float* c = model.centroid(3);
      PreparedQueries prepared(model, queries.data(), nq);
      std::vector<uint32_t> ids(nq);
      std::vector<float> coarse(nq);
      for (uint32_t q = 0; q < nq; ++q) ids[q] = q, coarse[q] = prepared.CoarseKey(q, 3);
      PartitionScratch scratch;
      std::vector<float> blocked(nq * m), single(m);
      ScorePartition(ScanQueries(prepared, ids.data(), coarse.data(), nq).data(), nq, codes.data(),
                     m, blocked.data(), &scratch);
      for (uint32_t q = 0; q < nq; ++q) {
        ScorePartition(ScanQueries(prepared, &q, &coarse[q], 1).data(), 1, codes.data(), m,
                       single.data(), &scratch);
        const float* query = queries.data() + q * dim;
        for (size_t i = 0; i < m; ++i) {
          const float* rh = decoded.data() + i * dim;
          double want;
          if (metric == Metric::kL2) {
            const double term = Dot(rh, rh, dim) + 2 * Dot(c, rh, dim);
            ASSERT_NEAR(ResidualTerm(model, codes.data(), i), term, 1e-4 * (1 + std::abs(term)));
            // |q - (c + r^)|^2, straight.
            want = 0;
            for (size_t d = 0; d < dim; ++d) {
              const double diff = double(query[d]) - c[d] - rh[d];
              want += diff * diff;
            }
          } else {
            want = -(Dot(query, c, dim) + Dot(query, rh, dim));
          }
          const double tol = 1e-3 * (1 + std::abs(want));
          ASSERT_NEAR(single[i], want, tol) << int(encoding) << " " << int(metric) << " " << i;
          ASSERT_NEAR(blocked[q * m + i], want, tol) << int(encoding) << " " << int(metric);
        }
      }
    }
  }
}

// On tight clusters residual codes rank a partition's rows; raw codes cannot. Recall@10 of the
// approximate order within a query's nearest partition, residual vs raw, same data.
double OwnPartitionRecall(const std::vector<float>& x, size_t n, size_t dim,
                          const std::vector<float>& queries, size_t nq, VectorEncoding encoding,
                          bool residual) {
  IvfTrainOptions o;
  o.nlist = 64;  // four per cluster: k-means leaves no cluster sharing a centroid
  o.encoding = encoding;
  o.pq_m = dim / 4;
  o.kmeans_iterations = 4;  // plenty here; keeps the test fast
  o.residual = residual;
  auto model = TrainIvfModel(x.data(), n, dim, Metric::kL2, o);
  if (!model.ok()) return -1;
  std::vector<uint32_t> assign(n), qassign(nq);
  if (!AssignToCentroids(*model, x.data(), n, assign.data()).ok()) return -1;
  if (!AssignToCentroids(*model, queries.data(), nq, qassign.data()).ok()) return -1;
  PreparedQueries prepared(*model, queries.data(), nq);
  PartitionScratch scratch;
  size_t hits = 0;
  for (uint32_t q = 0; q < nq; ++q) {
    const uint32_t p = qassign[q];
    std::vector<float> rows;
    for (size_t i = 0; i < n; ++i) {
      if (assign[i] == p) rows.insert(rows.end(), &x[i * dim], &x[(i + 1) * dim]);
    }
    const size_t m = rows.size() / dim;
    const std::vector<uint32_t> parts(m, p);
    std::vector<uint8_t> codes(m * model->CodeSize());
    if (!EncodeVectors(*model, rows.data(), m, parts.data(), codes.data()).ok()) return -1;
    std::vector<float> keys(m), exact(m);
    const float coarse = prepared.CoarseKey(q, p);
    ScorePartition(ScanQueries(prepared, &q, &coarse, 1).data(), 1, codes.data(), m, keys.data(),
                   &scratch);
    for (size_t i = 0; i < m; ++i) exact[i] = L2Sqr(queries.data() + q * dim, &rows[i * dim], dim);
    std::vector<size_t> by_key(m), by_exact(m);
    for (size_t i = 0; i < m; ++i) by_key[i] = by_exact[i] = i;
    const size_t k = std::min<size_t>(10, m);
    std::partial_sort(by_key.begin(), by_key.begin() + k, by_key.end(),
                      [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    std::partial_sort(by_exact.begin(), by_exact.begin() + k, by_exact.end(),
                      [&](size_t a, size_t b) { return exact[a] < exact[b]; });
    for (size_t a = 0; a < k; ++a) {
      hits += std::count(by_exact.begin(), by_exact.begin() + k, by_key[a]);
    }
  }
  return double(hits) / double(nq * 10);
}

TEST(PartitionScan, ResidualCodesRankRowsOfATightClusterThatRawCodesCannot) {
  const size_t n = 4000, dim = 32, nq = 40;
  // Clusters spread over [-1, 1], each 0.05 wide: raw codes spend their precision on the
  // spread between clusters.
  auto x = Clustered(n + nq, dim, 16, 1.0f, 0.05f, 5);
  const std::vector<float> queries(x.begin() + long(n * dim), x.end());  // same mixture
  x.resize(n * dim);
  for (VectorEncoding encoding : {VectorEncoding::kSq8, VectorEncoding::kPq}) {
    const double raw = OwnPartitionRecall(x, n, dim, queries, nq, encoding, false);
    const double residual = OwnPartitionRecall(x, n, dim, queries, nq, encoding, true);
    std::printf("encoding %d: recall@10 in the own partition raw %.3f residual %.3f\n",
                int(encoding), raw, residual);
    // Measured (seeded, deterministic): SQ8 0.95 -> 0.99, PQ 0.59 -> 0.79.
    EXPECT_GT(residual, raw + (encoding == VectorEncoding::kSq8 ? 0.03 : 0.15)) << int(encoding);
  }
}

}  // namespace
}  // namespace shoal::core::residual_scan_test
