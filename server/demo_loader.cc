#include "server/demo_loader.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "dataset/vector_reader.h"

namespace shoal::server {
namespace {

absl::StatusOr<std::shared_ptr<storage::Collection>> FindOrCreate(storage::Catalog* catalog,
                                                                  uint32_t dim) {
  auto found = catalog->Find(kDemoCollection);
  if (found.ok() || !absl::IsNotFound(found.status())) return found;  // found, or broken
  storage::CollectionManifest manifest;
  manifest.name = kDemoCollection;
  manifest.dim = dim;
  manifest.metric = core::Metric::kL2;
  manifest.index.type = core::IndexType::kIvfFlat;
  return catalog->Create(manifest);
}

absl::Status Load(storage::Collection& collection, dataset::VectorReader& reader,
                  const std::atomic<bool>& stop) {
  uint64_t next_id = 0;
  std::vector<float> buffer;
  const uint32_t dim = reader.dim();
  while (!stop.load()) {
    buffer.clear();
    auto n = reader.Read(2000, &buffer);
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::OkStatus();
    std::vector<storage::PointRecord> points(*n);
    for (size_t i = 0; i < *n; ++i) {
      points[i].id = next_id++;
      points[i].vector.assign(buffer.begin() + i * dim, buffer.begin() + (i + 1) * dim);
    }
    std::promise<absl::Status> committed;
    collection.Upsert(std::move(points), [&committed](absl::StatusOr<uint64_t> r) {
      committed.set_value(r.status());
    });
    absl::Status s = committed.get_future().get();  // this is a blocking thread, not the arena
    if (!s.ok()) return s;
  }
  return absl::CancelledError("demo load interrupted by shutdown");
}

// Builds the IVF index; the collection logs each phase and its percent as it goes.
absl::Status Build(storage::Collection& collection, core::Executor& cpu) {
  auto log = core::Logger("demo");
  log->info(
      "building the IVF index of '{}' (its progress follows; `shoalctl describe {}` shows it too)",
      kDemoCollection, kDemoCollection);
  return collection.BuildIndex(cpu).status();
}

}  // namespace

absl::Status LoadDemoCollection(storage::Catalog* catalog, core::Executor& cpu,
                                const std::string& file,
                                const std::function<void(bool serving)>& set_serving,
                                const std::atomic<bool>& stop) {
  auto log = core::Logger("demo");
  auto reader = dataset::VectorReader::Open(file);
  if (!reader.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "demo: ", reader.status().message(), " (install the dataset-fashion-mnist package)"));
  }
  const uint64_t total = (*reader)->size_hint().value_or(0);
  auto collection = FindOrCreate(catalog, (*reader)->dim());
  if (!collection.ok()) return collection.status();
  storage::CollectionStats stats = (*collection)->Stats();
  if (stats.num_vectors >= total && stats.num_indexed >= stats.num_vectors) {
    set_serving(true);
    log->info("demo collection '{}' already loaded and indexed ({} vectors): nothing to rebuild",
              kDemoCollection, stats.num_vectors);
    return absl::OkStatus();
  }
  set_serving(false);
  if (stats.num_vectors < total) {
    log->info("loading {} vectors of dim {} from {} into '{}'", total, (*reader)->dim(), file,
              kDemoCollection);
    if (absl::Status s = Load(**collection, **reader, stop); !s.ok()) return s;
  }
  if (stop.load()) return absl::CancelledError("demo load interrupted by shutdown");
  absl::Status built = Build(**collection, cpu);
  set_serving(true);  // exact search if the build failed: still a working demo
  if (!built.ok()) return built;
  log->info(
      "demo collection '{}' ready: {} vectors, IVF index built; try `shoalctl search {} "
      "--query-file <t10k file> -k 10 --stats`",
      kDemoCollection, (*collection)->Stats().num_vectors, kDemoCollection);
  return absl::OkStatus();
}

}  // namespace shoal::server
