// GroundTruth: the exact k nearest base vectors (L2) of every query, computed with FAISS's flat
// index in blocks of queries (BLAS, multi-threaded within the harness's CPU budget) and cached
// in a file whose header carries the dataset's checksum, so a changed input is never answered
// from a stale cache.
//
// Cache file: "SHOALGT2", fixed64 dataset checksum, fixed32 nq, fixed32 k, then nq*k int64 ids
// and nq*k float squared distances, row-major by query.
//
// Thread-safety: a GroundTruth is immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/harness/dataset.h"

namespace shoal::bench {

struct GroundTruth {
  uint32_t k = 0;
  std::vector<int64_t> ids;  // nq * k
  std::vector<float> dist;   // nq * k, exact (double, rounded), ascending per query

  const int64_t* ids_of(size_t q) const { return ids.data() + q * k; }
  const float* dist_of(size_t q) const { return dist.data() + q * k; }
};

// Exact search with `threads` OpenMP threads (restored afterwards).
GroundTruth ComputeGroundTruth(const Dataset& d, uint32_t k, int threads);

// "<cache_dir>/<dataset name>.q<nq>.k<k>.gt".
std::string GroundTruthPath(const std::string& cache_dir, const Dataset& d, uint32_t k);

// The cached ground truth when the file exists and matches `d` and `k`; otherwise computes it
// and writes the cache (a write failure is not an error: the result is still returned).
// *from_cache tells which happened.
absl::StatusOr<GroundTruth> LoadOrComputeGroundTruth(const Dataset& d, uint32_t k,
                                                     const std::string& cache_dir, int threads,
                                                     bool* from_cache);

// Squared L2 distance of query q to base row `row`, in double precision.
double L2(const Dataset& d, size_t q, size_t row);

// Recall@r of `ids` (the first r of them) for query q: the fraction of the true r nearest found,
// tie-aware as ann-benchmarks is: a returned id counts when its true distance is within the r-th
// true distance (a different id at the same distance is as good an answer).
double RecallAt(const Dataset& d, const GroundTruth& gt, size_t q, const int64_t* ids,
                size_t num_ids, size_t r);

}  // namespace shoal::bench
