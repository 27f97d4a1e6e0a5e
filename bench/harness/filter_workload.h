// FilterWorkload: the attributes and filters of shoal-filter-bench (issue #24's sweep).
//
// Every base row gets attributes derived from its id — `u` uniform in [0, 10000) (the
// selectivity sweep: `u < 1` selects 0.01%), categoricals `cat10` and `cat1000`, a timestamp
// `ts` uniform over a year — and from where it lies: `region`, its nearest of 100 region centres
// (base rows spread over the set), and for Fashion-MNIST `label`, its class. Each FilterCase
// gives every query a filter in the language of docs/filtering.md and the rows it selects, in
// one of three regimes: uncorrelated (the filter ignores where the query is), correlated (it
// selects the query's own region or class: points near it) and anti-correlated (the region or
// class farthest from it). FilteredTruth is exact over the selected rows.
//
// Thread-safety: immutable once made.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/harness/dataset.h"
#include "client/client.h"

namespace shoal::bench {

struct RowAttributes {
  int64_t u = 0, cat10 = 0, cat1000 = 0, ts = 0, region = 0;
  int64_t label = -1;  // -1: the dataset has no labels
};

struct FilterWorkload {
  std::vector<RowAttributes> rows;  // per base row
  // Per query: its nearest and farthest region, its class and the class farthest from it
  // (-1 without labels).
  std::vector<int64_t> near_region, far_region, label, far_label;

  Attributes AttributesOf(size_t row) const;
};

// Fashion-MNIST's training and test labels (Debian's dataset-fashion-mnist) when `d` is
// fmnist, none otherwise. `threads`: for the region assignment (FAISS, BLAS).
absl::StatusOr<FilterWorkload> MakeFilterWorkload(const Dataset& d, int threads);

struct FilterCase {
  std::string regime;  // "none", "uncorrelated", "correlated", "anti-correlated"
  std::string name;    // "u < 10", "region = near", ...
  // Queries fall in groups that share one filter: per query its group, per group the filter
  // text, the rows it selects (FAISS IDSelectorBitmap layout: bit i % 8 of byte i / 8) and
  // how many.
  std::vector<uint32_t> group_of;
  std::vector<std::string> filter;
  std::vector<std::vector<uint8_t>> bitmap;
  std::vector<uint64_t> matches;

  double selectivity(size_t n) const;  // mean matches over the queries, as a fraction of n
};

// The sweep: the unfiltered case first, then every case the workload supports.
std::vector<FilterCase> MakeFilterCases(const Dataset& d, const FilterWorkload& w);

// Exact k nearest (L2) of every query among its group's rows: ids[q * k + j], -1 past the
// matches; dist likewise (squared, ascending). `threads` OpenMP threads.
struct FilteredTruth {
  uint32_t k = 0;
  std::vector<int64_t> ids;
  std::vector<float> dist;
};
FilteredTruth ComputeFilteredTruth(const Dataset& d, const FilterCase& c, uint32_t k, int threads);

// Recall@k of `ids` for query q, tie-aware (a returned id the case selects counts when its
// true distance is within the k-th true one); 1 when the query has no match.
double FilteredRecall(const Dataset& d, const FilterCase& c, const FilteredTruth& t, size_t q,
                      const int64_t* ids);

}  // namespace shoal::bench
