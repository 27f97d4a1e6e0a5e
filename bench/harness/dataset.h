// Dataset: the base vectors a benchmark indexes and the queries it asks, all in memory.
//
// Specs (LoadDataset):
//   fmnist                      Fashion-MNIST from Debian's dataset-fashion-mnist (60000 x 784,
//                               queries from the 10000 test images)
//   synthetic:n=1000000,dim=128,clusters=1000,seed=1
//                               Gaussian clusters, deterministic for a seed (queries drawn from
//                               the same mixture, never in the base)
//   <file>                      any file dataset::VectorReader opens (fvecs, bvecs, npy, IDX,
//                               .gz); queries from `query_file`, or else the file's last rows
//                               held out of the base
//
// Thread-safety: a loaded Dataset is immutable and may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::bench {

struct Dataset {
  std::string name;  // short, file-name safe: "fmnist", "synthetic-n1000-d8-c4-s1", ...
  uint32_t dim = 0;
  size_t n = 0;   // base vectors
  size_t nq = 0;  // queries
  std::vector<float> base;
  std::vector<float> queries;
  uint64_t checksum = 0;  // of dim, base and queries: names caches and collections

  const float* row(size_t i) const { return base.data() + i * dim; }
  const float* query(size_t q) const { return queries.data() + q * dim; }
};

struct SyntheticSpec {
  size_t n = 100000;
  uint32_t dim = 128;
  uint32_t clusters = 100;
  uint64_t seed = 1;
};

// Parses "n=...,dim=...,clusters=...,seed=..." (any subset, any order).
absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& text);

// Gaussian clusters: centres uniform in [-1, 1]^dim, points centre + N(0, 0.1^2) per coordinate.
Dataset MakeSynthetic(const SyntheticSpec& spec, size_t num_queries);

// Loads `spec` (see the header comment) with at most `max_queries` queries.
absl::StatusOr<Dataset> LoadDataset(const std::string& spec, const std::string& query_file,
                                    size_t max_queries);

}  // namespace shoal::bench
