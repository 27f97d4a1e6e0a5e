// A small IVF_FLAT segment of Gaussian rows written to disk, for tests that need a real
// Segment to read from (the scheduler and cancellation tests).
//
// Thread-safety: none needed; call it from the test's own thread.
#pragma once

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

}  // namespace shoal::testing
