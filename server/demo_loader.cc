#include "server/demo_loader.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "dataset/vector_reader.h"

namespace shoal::server {

absl::Status LoadDemoCollection(storage::Catalog* catalog, const std::string& file,
                                const std::function<void(bool serving)>& set_serving,
                                const std::atomic<bool>& stop) {
  auto log = core::Logger("demo");
  auto reader = dataset::VectorReader::Open(file);
  if (!reader.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "demo: ", reader.status().message(), " (install the dataset-fashion-mnist package)"));
  }
  const uint64_t total = (*reader)->size_hint().value_or(0);
  auto found = catalog->Find(kDemoCollection);
  if (!found.ok() && !absl::IsNotFound(found.status())) return found.status();  // broken
  std::shared_ptr<storage::Collection> collection = found.ok() ? *found : nullptr;
  if (!collection) {
    storage::CollectionManifest manifest;
    manifest.name = kDemoCollection;
    manifest.dim = (*reader)->dim();
    manifest.metric = core::Metric::kL2;
    manifest.index.type = core::IndexType::kIvfFlat;
    auto created = catalog->Create(manifest);
    if (!created.ok()) return created.status();
    collection = *std::move(created);
  }
  if (collection->Stats().num_vectors >= total) {
    set_serving(true);
    return absl::OkStatus();
  }
  set_serving(false);
  log->info("loading {} vectors of dim {} from {} into '{}'", total, (*reader)->dim(), file,
            kDemoCollection);
  uint64_t next_id = 0;
  std::vector<float> buffer;
  while (!stop.load()) {
    buffer.clear();
    auto n = (*reader)->Read(2000, &buffer);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    std::vector<storage::PointRecord> points(*n);
    const uint32_t dim = (*reader)->dim();
    for (size_t i = 0; i < *n; ++i) {
      points[i].id = next_id++;
      points[i].vector.assign(buffer.begin() + i * dim, buffer.begin() + (i + 1) * dim);
    }
    std::promise<absl::Status> committed;
    collection->Upsert(std::move(points), [&committed](absl::StatusOr<uint64_t> r) {
      committed.set_value(r.status());
    });
    absl::Status s = committed.get_future().get();  // this is a blocking thread, not the arena
    if (!s.ok()) return s;
  }
  if (stop.load()) return absl::CancelledError("demo load interrupted by shutdown");
  log->info("demo collection '{}' ready: {} vectors", kDemoCollection,
            collection->Stats().num_vectors);
  set_serving(true);
  return absl::OkStatus();
}

}  // namespace shoal::server
