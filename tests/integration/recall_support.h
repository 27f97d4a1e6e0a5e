// Helpers of the end-to-end recall tests: loading a bench data set into a collection through
// the real server, and a tie-aware recall@k of its answers against FAISS's exact ground truth.
//
// Thread-safety: the functions share no state; each Client is used as the SDK allows.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "bench/harness/dataset.h"
#include "bench/harness/ground_truth.h"
#include "client/client.h"
#include "gtest/gtest.h"

namespace shoal::testing {

// Tie-aware recall@k: a hit counts when its true distance is within the true k-th distance.
inline double TieAwareRecall(const bench::Dataset& d, const bench::GroundTruth& gt,
                             const std::vector<SearchResult>& results, size_t k) {
  size_t found = 0;
  for (size_t q = 0; q < results.size(); ++q) {
    const double kth = gt.dist_of(q)[k - 1];
    for (const Hit& hit : results[q].hits) {
      if (hit.id >= d.n) {
        ADD_FAILURE() << "query " << q << ": id " << hit.id << " does not exist";
        return 0;
      }
      double dist = 0;
      for (size_t j = 0; j < d.dim; ++j) {
        const double diff = double(d.query(q)[j]) - double(d.row(hit.id)[j]);
        dist += diff * diff;
      }
      if (dist <= kth * (1 + 1e-5)) ++found;
    }
  }
  return double(found) / double(results.size() * k);
}

// Upserts every row of `d` (ids 0..n-1) into `name` through one stream.
inline void LoadDataset(Client& client, const std::string& name, const bench::Dataset& d) {
  auto writer = client.OpenUpsertStream(name);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (size_t first = 0; first < d.n; first += 2000) {
    std::vector<Point> points;
    for (size_t i = first; i < std::min(d.n, first + 2000); ++i) {
      points.push_back({i, {d.row(i), d.row(i) + d.dim}, {}});
    }
    ASSERT_TRUE((*writer)->Write(points).ok());
  }
  ASSERT_EQ(*(*writer)->Finish(), d.n);
}

}  // namespace shoal::testing
