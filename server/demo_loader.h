// Demo loader: makes sure the demo collection `fmnist` (Fashion-MNIST train set, 60000 x 784,
// L2) exists and is complete, loading it from the dataset-fashion-mnist package's file.
// Upserts are idempotent by id (id = row number), so an interrupted load resumes on the next
// start. The collection reports NOT_SERVING on the health service until the load is done.
//
// Runs on a blocking executor (it waits for WAL commits); `stop` ends it early.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "storage/collection/catalog.h"

namespace shoal::server {

inline constexpr char kDemoCollection[] = "fmnist";

absl::Status LoadDemoCollection(storage::Catalog* catalog, const std::string& file,
                                const std::function<void(bool serving)>& set_serving,
                                const std::atomic<bool>& stop);

}  // namespace shoal::server
