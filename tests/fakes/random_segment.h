// A small IVF_FLAT segment of Gaussian rows written to disk, for tests that need a real
// Segment to read from (the scheduler and cancellation tests).
//
// Thread-safety: none needed; call it from the test's own thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/index/ivf_model.h"
#include "storage/collection/segment_writer.h"
#include "storage/io/file_system.h"

namespace shoal::testing {

// Writes `n` rows (ids 1..n) of `dim` N(0, 1) floats drawn from `rng` into a segment at `dir`
// with an `nlist`-partition L2 model; the rows are returned in `rows`.
inline absl::Status WriteRandomSegment(const std::string& dir, std::mt19937& rng, size_t n,
                                       uint32_t dim, uint32_t nlist, storage::SegmentRows* rows) {
  std::normal_distribution<float> normal;
  rows->vectors.resize(n * dim);
  for (float& x : rows->vectors) x = normal(rng);
  for (uint64_t i = 0; i < n; ++i) rows->ids.push_back(i + 1);
  rows->attributes.resize(n);
  core::IvfTrainOptions o;
  o.nlist = nlist;
  auto model = core::TrainIvfModel(rows->vectors.data(), n, dim, core::Metric::kL2, o);
  if (!model.ok()) return model.status();
  std::vector<uint32_t> assign(n);
  std::vector<uint8_t> codes(n * model->CodeSize());
  if (absl::Status s = core::AssignToCentroids(*model, rows->vectors.data(), n, assign.data());
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          core::EncodeVectors(*model, rows->vectors.data(), n, assign.data(), codes.data());
      !s.ok()) {
    return s;
  }
  return storage::WriteSegment(storage::DefaultFileSystem(), dir, *model, *rows, assign, codes);
}

// `dim` N(0, 1) floats drawn from a generator seeded with `seed`: one query.
inline std::vector<float> RandomQuery(uint32_t seed, uint32_t dim) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> q(dim);
  for (float& x : q) x = normal(rng);
  return q;
}

// The ids of the `k` rows of `rows` nearest `query` in L2, by brute force.
inline std::vector<uint64_t> ExactTopIds(const storage::SegmentRows& rows, uint32_t dim,
                                         const std::vector<float>& query, size_t k) {
  std::vector<std::pair<float, uint64_t>> all;
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    float d = 0;
    for (uint32_t j = 0; j < dim; ++j) {
      const float t = query[j] - rows.vectors[i * dim + j];
      d += t * t;
    }
    all.push_back({d, rows.ids[i]});
  }
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + k, all.end());
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < k; ++i) ids.push_back(all[i].second);
  return ids;
}

}  // namespace shoal::testing
