// fastscan-bench: nanoseconds per (query x row) of the 4-bit fast-scan kernels
// (core/index/fastscan.h) at every SIMD level, against the 8-bit PQ table scan Shoal uses today
// (PqScan) and FAISS's IndexPQFastScan, in one process on the same codes and queries.
//
//   build/bin/fastscan-bench [--n 100000] [--dim 784] [--m 56] [--queries 64] [--partition 256]
//
// Rows are scanned partition by partition (`--partition` rows each) with every query of the
// batch per partition, as a partition-major IVF scan does; a top-10 sink keeps thresholds live.
#include <faiss/IndexPQFastScan.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/index/fastscan.h"
#include "core/index/scan_kernels.h"
#include "core/index/topk.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shoal::core;
  size_t n = 100000, dim = 784, m = 56, nq = 64, partition = 256;
  CLI::App app("fast-scan kernel throughput");
  app.add_option("--n", n);
  app.add_option("--dim", dim);
  app.add_option("--m", m);
  app.add_option("--queries", nq);
  app.add_option("--partition", partition);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(1);

  const auto base = Gaussian(n * dim, 1);
  const auto queries = Gaussian(nq * dim, 2);
  faiss::IndexPQFastScan faiss_index(int(dim), m, 4);
  faiss_index.pq.cp.niter = 5;
  faiss_index.train(std::min<size_t>(n, 20000), base.data());
  faiss_index.add(n, base.data());
  std::vector<uint8_t> codes(n * m / 2);
  faiss_index.pq.compute_codes(base.data(), codes.data(), n);

  // Shoal fast-scan: partitions of `partition` rows, all queries per partition.
  const size_t parts = (n + partition - 1) / partition;
  std::vector<std::vector<uint8_t>> packed(parts);
  for (size_t p = 0; p < parts; ++p) {
    const size_t rows = std::min(partition, n - p * partition);
    packed[p].resize(FastScanPackedBytes(rows, m));
    PackFastScanCodes(&codes[p * partition * m / 2], rows, m, packed[p].data());
  }
  std::vector<FastScanLut> luts(nq);
  std::vector<const FastScanLut*> ptrs;
  std::vector<float> tables(m * 16);
  for (size_t q = 0; q < nq; ++q) {
    faiss_index.pq.compute_distance_table(&queries[q * dim], tables.data());
    luts[q].Build(tables.data(), m, 0.0f);
    ptrs.push_back(&luts[q]);
  }
  const double work = double(n) * double(nq);
  for (SimdLevel level : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > DetectSimdLevel()) continue;
    std::vector<TopK> tops(nq, TopK(10));
    std::vector<float> thresholds(nq, std::numeric_limits<float>::infinity());
    size_t candidates = 0;
    const auto start = Clock::now();
    for (size_t p = 0; p < parts; ++p) {
      const size_t rows = std::min(partition, n - p * partition);
      FastScanPartitionAt(level, ptrs.data(), nq, packed[p].data(), rows, nullptr,
                          thresholds.data(), [&](size_t q, uint32_t row, float key) {
                            ++candidates;
                            tops[q].Push(key, p * partition + row);
                            return tops[q].threshold();
                          });
    }
    const double s = Seconds(start);
    std::printf("shoal fastscan %-7s %7.3f ns/(query*row)  %.4f of rows reached the sink\n",
                std::string(SimdLevelName(level)).c_str(), s * 1e9 / work, candidates / work);
  }

  // Today's 8-bit PQ table scan on codes of the same m (random codes; the cost is the lookups).
  {
    std::vector<uint8_t> codes8(n * m);
    std::mt19937 rng(3);
    for (uint8_t& c : codes8) c = uint8_t(rng());
    const auto tables8 = Gaussian(m * 256, 4);
    std::vector<float> out(partition);
    float sink = 0;
    const auto start = Clock::now();
    for (size_t p = 0; p < parts; ++p) {
      const size_t rows = std::min(partition, n - p * partition);
      for (size_t q = 0; q < nq; ++q) {
        PqScan(tables8.data(), m, &codes8[p * partition * m], rows, out.data());
        sink += out[0];
      }
    }
    std::printf("shoal pq8 scan  %7.3f ns/(query*row)  (%g)\n", Seconds(start) * 1e9 / work,
                double(sink) * 0);
  }

  // FAISS IndexPQFastScan over all n rows, one thread.
  {
    std::vector<float> d(nq * 10);
    std::vector<faiss::Index::idx_t> ids(nq * 10);
    const auto start = Clock::now();
    faiss_index.search(nq, queries.data(), 10, d.data(), ids.data());
    std::printf("faiss pqfs      %7.3f ns/(query*row)\n", Seconds(start) * 1e9 / work);
  }
  return 0;
}
