// The coarse search of an IVF query batch: each query's nprobe nearest partitions of one
// IvfModel, with their routing keys (|q - c|^2 for L2, -<q, c> for inner product and cosine:
// the coarse keys of core/index/partition_scan.h), in rank order.
//
// The answer is exactly that of the per-query path (score every centroid with the SIMD kernels
// of core/index/distance.h, order by (key, partition id), keep the first nprobe): the same
// partitions, in the same order, with bit-identical keys, ties broken by the smaller id.
//
// A query routed alone is first scored against a half-precision copy of the centroids (half
// the bytes a query streams; the copy is kept with the centroid norms) and only the partitions
// whose bounds reach the cut are re-scored with the float kernel (coarse_router.cc
// PerQueryRouter): the same answer, bit for bit.
//
// A batch of at least MinQueriesForRouterGemm(dim) queries is scored with one BLAS
// sgemm per block of queries instead: key ~ |q|^2 + |c|^2 - 2<q, c> (L2) or -<q, c>. Those
// approximate keys only shortlist. Both they and the kernels' keys are within
// b = 4 * gamma(dim + 8) * (|q|^2 + max |c|^2) of the true distance (gamma(n) = n u / (1 - n u),
// u = 2^-24; core/index/rounding_bound.h), so an approximate and an exact key of one partition
// differ by at most B = 2b (DistanceRoundingBound). A partition in the exact top nprobe has an
// approximate key within B of its exact key, which is at most the nprobe-th exact key, itself
// within B of the nprobe-th approximate key: so every partition whose approximate key is within
// 2B of the nprobe-th smallest approximate key is re-scored with the SIMD kernel, and the nprobe
// best of those by (exact key, id) are the per-query path's answer. Near-ties at the cut are
// re-scored, never guessed. A query whose approximate keys are not finite (overflow) takes the
// per-query path.
//
// Memory: the sgemm block is at most options.max_scratch_floats floats (4 MiB by default, the
// engine's per-thread scratch bound); the answer is nq * min(nprobe, nlist) Probes.
// The centroid norms |c|^2 are computed once per model, on first use (IvfModel's
// CentroidNormCache).
//
// Errors: RouteQueries allocates (scratch, the answer, the norm cache) and lets std::bad_alloc
// propagate; it throws nothing else. The engine calls it inside IvfSearchJob::Plan, which runs
// under Catching (core/index/ivf_search.cc): the exception becomes the request's
// RESOURCE_EXHAUSTED status there and never crosses the engine's boundary. Other callers must
// catch it the same way.
//
// Thread-safety: thread-safe; concurrent calls may share a model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/index/ivf_model.h"

namespace shoal::core {

struct Probe {
  uint32_t partition = 0;
  float key = 0;  // |q - c|^2 (L2) or -<q, c> (IP, cosine), from the SIMD kernel
};

// A batch of at least this many queries is routed through sgemm; below it, one SIMD pass per
// query is faster. sgemm has a fixed cost (packing the centroids) that a pass of a low-dim
// query does not amortise: about 4 queries at 784-d and 16 at 128-d break even (route-bench,
// bench/route_bench.cc), hence max(4, 2048 / dim).
size_t MinQueriesForRouterGemm(size_t dim);
// Floats of sgemm output per block of queries: the engine's per-thread scratch bound.
inline constexpr size_t kRouterScratchFloats = size_t(1) << 20;  // 4 MiB

struct CoarseRouterOptions {
  size_t min_queries_for_gemm = 0;  // 0: MinQueriesForRouterGemm(dim)
  size_t max_scratch_floats = kRouterScratchFloats;
};

// What the sgemm path did, for tests and benchmarks.
struct CoarseRouterStats {
  size_t gemm_queries = 0;      // queries shortlisted through sgemm
  size_t rescored = 0;          // partitions re-scored with the SIMD kernel after the sgemm
  size_t fallback_queries = 0;  // sgemm keys not finite: routed per query
  size_t half_queries = 0;      // queries routed per query through the half centroids
  size_t half_rescored = 0;     // partitions those re-scored with the float kernel
};

// Routes queries[0, nq) (row-major, model.dim floats each) and returns the number of probes
// per query, p = min(nprobe, model.nlist()); (*out)[q * p + r] is query q's rank-r partition.
// REQUIRES: nprobe >= 1.
size_t RouteQueries(const IvfModel& model, const float* queries, size_t nq, size_t nprobe,
                    std::vector<Probe>* out, const CoarseRouterOptions& options = {},
                    CoarseRouterStats* stats = nullptr);

}  // namespace shoal::core
