// FlatSearch: exact k-nearest-neighbour search of a batch of queries over a FlatView.
//
// The scan is cut into tasks (query groups x row ranges) and submitted to an Executor; each
// task scans its rows tile by tile, so a tile of base vectors is loaded once for every query
// of its group, keeps a private TopK per query, checks the CancelToken between tiles and
// returns (I-1: nothing waits). The last task to finish merges the partial results and calls
// `done` exactly once, on that worker thread.
//
// Thread-safety: FlatSearch may be called from any thread; `done` runs on an executor thread.
#pragma once

#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/base/cancel.h"
#include "core/base/metric.h"
#include "core/exec/executor.h"
#include "core/index/search_types.h"

namespace shoal::core {

struct FlatSearchRequest {
  FlatView view;
  std::vector<float> queries;  // num_queries * view.dim; cosine queries already normalised
  size_t num_queries = 0;
  size_t k = 10;
  Metric metric = Metric::kL2;
  std::shared_ptr<const CancelToken> cancel;  // may be null: never cancelled
};

// REQUIRES: request.queries.size() == request.num_queries * request.view.dim, k >= 1.
void FlatSearch(Executor& executor, FlatSearchRequest request, SearchDone done);

}  // namespace shoal::core
