// Demo loader: makes sure the demo collection `fmnist` (Fashion-MNIST train set, 60000 x 784,
// L2, IVF_FLAT) exists, is complete and indexed: it loads the dataset-fashion-mnist package's
// file, then builds the IVF index (its phase and percent go to the log), so a new user's first
// searches run on the IVF engine (`shoalctl search ... --stats` shows partitions probed, bytes
// read, cache hits) rather than an exact scan. Upserts are idempotent by id (id = row number),
// so an interrupted load resumes on the next start, and a start that finds the data loaded but
// not indexed builds. The collection reports NOT_SERVING on the health service until it is
// loaded and indexed (searches work meanwhile, exactly).
//
// Runs on a blocking executor (it waits for WAL commits and the build); `stop` ends it early
// (a running build finishes first). `cpu` runs the build's tasks.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "core/exec/executor.h"
#include "storage/collection/catalog.h"

namespace shoal::server {

inline constexpr char kDemoCollection[] = "fmnist";

absl::Status LoadDemoCollection(storage::Catalog* catalog, core::Executor& cpu,
                                const std::string& file,
                                const std::function<void(bool serving)>& set_serving,
                                const std::atomic<bool>& stop);

}  // namespace shoal::server
