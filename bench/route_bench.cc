// route-bench: the coarse search of an IVF query batch, the old per-query loop of
// IvfSearchJob::Plan (SIMD distances to every centroid, partial_sort of all nlist) against
// RouteQueries (core/index/coarse_router.h: one sgemm per block, near-ties re-scored), in one
// process on the same centroids and queries, alternating the two so that load from other
// processes hits both alike.
//
//   build/bin/route-bench [--reps 7] [--min-ms 60]
//
// Like shoald, it sets OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1 and, on AVX-512 CPUs,
// OPENBLAS_CORETYPE=SkylakeX (server/blas_env.h) and re-executes itself, unless already set.
//
// Shapes: Fashion-MNIST-sized (784-d, nlist 1024, nprobe 16) and the synthetic set's
// (128-d, nlist 2048, nprobe 4); Gaussian centroids, each query a random centroid plus noise.
// Prints microseconds per batch (median of --reps) for batches of 1 to 100 queries,
// the ratio old / new, and how many partitions per query the router re-scored exactly.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "CLI/CLI.hpp"
#include "core/index/coarse_router.h"
#include "core/index/distance.h"
#include "core/index/scan_kernels.h"
#include "server/blas_env.h"

namespace {

using namespace shoal::core;
using Clock = std::chrono::steady_clock;

// OpenBLAS's kernel family, looked up at run time (the BLAS may not be OpenBLAS).
const char* BlasCore() {
  using Fn = char* (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  return fn ? fn() : "(not OpenBLAS)";
}

struct Shape {
  const char* name;
  size_t dim, nlist, nprobe;
};

// Plan's loop before the router, kept verbatim but for the Work bookkeeping.
void OldRoute(const IvfModel& model, const float* queries, size_t nq, size_t nprobe,
              std::vector<Probe>* out) {
  const size_t nlist = model.nlist(), dim = model.dim;
  std::vector<float> dist(nlist);
  std::vector<uint32_t> order(nlist);
  out->resize(nq * nprobe);
  for (size_t q = 0; q < nq; ++q) {
    const float* query = queries + q * dim;
    if (IsSimilarity(model.metric)) {
      InnerProductMany(query, model.centroids.data(), nlist, dim, dist.data());
      for (float& d : dist) d = -d;
    } else {
      L2SqrMany(query, model.centroids.data(), nlist, dim, dist.data());
    }
    for (uint32_t i = 0; i < nlist; ++i) order[i] = i;
    std::partial_sort(
        order.begin(), order.begin() + nprobe, order.end(),
        [&](uint32_t a, uint32_t b) { return dist[a] < dist[b] || (dist[a] == dist[b] && a < b); });
    for (size_t r = 0; r < nprobe; ++r) (*out)[q * nprobe + r] = {order[r], dist[order[r]]};
  }
}

// Microseconds per call of fn, repeated for at least min_ms.
template <typename Fn>
double MicrosPerCall(Fn&& fn, double min_ms) {
  size_t calls = 0;
  const Clock::time_point start = Clock::now();
  double elapsed_ms = 0;
  do {
    fn();
    ++calls;
    elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  } while (elapsed_ms < min_ms);
  return elapsed_ms * 1000 / double(calls);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void RunShape(const Shape& shape, int reps, double min_ms) {
  std::mt19937 rng(uint32_t(shape.dim * 7 + shape.nlist));
  std::normal_distribution<float> gauss;
  IvfModel model;
  model.dim = uint32_t(shape.dim);
  model.centroids.resize(shape.nlist * shape.dim);
  for (float& x : model.centroids) x = gauss(rng);
  constexpr size_t kMaxQueries = 100;
  std::vector<float> queries(kMaxQueries * shape.dim);
  for (size_t q = 0; q < kMaxQueries; ++q) {
    const float* c = model.centroid(rng() % shape.nlist);
    for (size_t d = 0; d < shape.dim; ++d) queries[q * shape.dim + d] = c[d] + 0.7f * gauss(rng);
  }
  model.CentroidNormsSq();  // as in a server, where the model's first request computed them
  std::printf("\n%s: dim %zu, nlist %zu, nprobe %zu\n", shape.name, shape.dim, shape.nlist,
              shape.nprobe);
  std::printf("%6s %12s %12s %12s %8s %10s %9s %10s\n", "nq", "old us", "router us", "gemm us",
              "old/new", "old/gemm", "rescored", "sgemm us");
  std::vector<Probe> a, b, c;
  for (size_t nq : {1, 2, 4, 8, 16, 32, 100}) {
    CoarseRouterOptions gemm;
    gemm.min_queries_for_gemm = 1;
    std::vector<double> old_us, new_us, gemm_us, sgemm_us;
    std::vector<float> products(nq * shape.nlist);
    for (int r = 0; r < reps; ++r) {
      old_us.push_back(
          MicrosPerCall([&] { OldRoute(model, queries.data(), nq, shape.nprobe, &a); }, min_ms));
      new_us.push_back(MicrosPerCall(
          [&] { RouteQueries(model, queries.data(), nq, shape.nprobe, &b); }, min_ms));
      gemm_us.push_back(MicrosPerCall(
          [&] { RouteQueries(model, queries.data(), nq, shape.nprobe, &c, gemm); }, min_ms));
      sgemm_us.push_back(MicrosPerCall(
          [&] {
            GemmInnerProducts(queries.data(), nq, model.centroids.data(), shape.nlist, shape.dim,
                              products.data());
          },
          min_ms));
    }
    CoarseRouterStats stats;
    RouteQueries(model, queries.data(), nq, shape.nprobe, &c, gemm, &stats);
    OldRoute(model, queries.data(), nq, shape.nprobe, &a);
    RouteQueries(model, queries.data(), nq, shape.nprobe, &b);
    bool same = a.size() == b.size() && a.size() == c.size();
    for (size_t i = 0; same && i < a.size(); ++i) {
      same = a[i].partition == b[i].partition && a[i].key == b[i].key &&
             a[i].partition == c[i].partition && a[i].key == c[i].key;
    }
    const double o = Median(old_us), n = Median(new_us), g = Median(gemm_us);
    std::printf("%6zu %12.1f %12.1f %12.1f %7.2fx %9.2fx %9.1f %10.1f%s\n", nq, o, n, g, o / n,
                o / g, double(stats.rescored) / double(nq), Median(sgemm_us),
                same ? "" : "  RESULTS DIFFER");
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  double min_ms = 60;
  CLI::App app("coarse routing: old per-query loop vs the batched router");
  app.add_option("--reps", reps, "timed rounds per cell (median reported)");
  app.add_option("--min-ms", min_ms, "milliseconds per timed round");
  CLI11_PARSE(app, argc, argv);
  // shoald's BLAS environment (one thread; SkylakeX kernels on AVX-512, which Debian's OpenBLAS
  // would not pick): re-executes once unless already set.
  shoal::server::EnsureBlasEnvironment(argv);
  omp_set_num_threads(1);
  std::printf("SIMD level %s, OpenBLAS core %s\n",
              std::string(SimdLevelName(ActiveSimdLevel())).c_str(), BlasCore());
  RunShape({"Fashion-MNIST-sized", 784, 1024, 16}, reps, min_ms);
  RunShape({"synthetic-sized", 128, 2048, 4}, reps, min_ms);
  return 0;
}
