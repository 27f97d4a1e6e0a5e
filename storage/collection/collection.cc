#include "storage/collection/collection.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "storage/collection/manifest_store.h"

namespace shoal::storage {
namespace {

std::string WalPath(const std::string& dir, uint64_t seq) {
  return JoinPath(JoinPath(dir, "wal"), absl::StrFormat("%06d.log", seq));
}

}  // namespace

Collection::Collection(FileSystem* fs, std::string dir, CollectionManifest manifest)
    : fs_(fs), dir_(std::move(dir)), manifest_(std::move(manifest)), memtable_(manifest_.dim) {}

Collection::~Collection() { (void)Close(); }

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(FileSystem* fs,
                                                               const std::string& dir,
                                                               CollectionManifest manifest,
                                                               CollectionOptions options) {
  if (fs->Exists(dir)) return absl::AlreadyExistsError(absl::StrCat(dir, " already exists"));
  SHOAL_RETURN_IF_ERROR(fs->CreateDirs(JoinPath(dir, "wal")));
  SHOAL_RETURN_IF_ERROR(InstallManifest(fs, dir, manifest, 0).status());
  std::unique_ptr<Collection> c(new Collection(fs, dir, std::move(manifest)));
  SHOAL_RETURN_IF_ERROR(c->ReplayAndOpenWal(options));
  return c;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Open(FileSystem* fs,
                                                             const std::string& dir,
                                                             CollectionOptions options) {
  SHOAL_ASSIGN_OR_RETURN(LoadedManifest loaded, LoadManifest(fs, dir));
  std::unique_ptr<Collection> c(new Collection(fs, dir, std::move(loaded.manifest)));
  SHOAL_RETURN_IF_ERROR(c->ReplayAndOpenWal(options));
  return c;
}

absl::Status Collection::ReplayAndOpenWal(const CollectionOptions& options) {
  const std::string path = WalPath(dir_, manifest_.first_wal_seq);
  if (fs_->Exists(path)) {
    uint64_t truncated = 0;
    SHOAL_RETURN_IF_ERROR(ReplayWal(
        fs_, path,
        [this](WalRecordType type, std::string_view payload) {
          return ApplyRecord(type, payload);
        },
        &truncated));
    core::Logger("collection")
        ->info("{}: replayed WAL, {} live vectors{}", manifest_.name, memtable_.live_count(),
               truncated ? absl::StrCat(", truncated a torn tail of ", truncated, " bytes") : "");
  }
  SHOAL_ASSIGN_OR_RETURN(wal_, Wal::Open(fs_, path, options.wal));
  return absl::OkStatus();
}

absl::Status Collection::ApplyRecord(WalRecordType type, std::string_view payload) {
  switch (type) {
    case WalRecordType::kUpsertBatch: {
      SHOAL_ASSIGN_OR_RETURN(UpsertBatch batch, DecodeUpsertBatch(payload));
      if (batch.dim != manifest_.dim) {
        return absl::DataLossError(absl::StrCat(manifest_.name, ": WAL record has dim ",
                                                batch.dim, ", collection has ", manifest_.dim));
      }
      for (const PointRecord& p : batch.points) memtable_.Upsert(p);
      return absl::OkStatus();
    }
    case WalRecordType::kDeleteBatch: {
      SHOAL_ASSIGN_OR_RETURN(DeleteBatch batch, DecodeDeleteBatch(payload));
      for (uint64_t id : batch.ids) memtable_.Delete(id);
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(
      absl::StrCat(manifest_.name, ": unknown WAL record type ", int(type)));
}

void Collection::Upsert(std::vector<PointRecord> points, WriteDone done) {
  if (manifest_.metric == core::Metric::kCosine) {
    for (PointRecord& p : points) core::NormalizeInPlace(p.vector.data(), p.vector.size());
  }
  UpsertBatch batch{manifest_.dim, std::move(points)};
  std::string record = EncodeWalRecord(WalRecordType::kUpsertBatch, EncodeUpsertBatch(batch));
  auto shared = std::make_shared<UpsertBatch>(std::move(batch));
  wal_->Append(std::move(record), [this, shared, done = std::move(done)](absl::Status s) mutable {
    if (!s.ok()) return std::move(done)(s);
    for (const PointRecord& p : shared->points) memtable_.Upsert(p);
    std::move(done)(uint64_t(shared->points.size()));
  });
}

void Collection::Delete(std::vector<uint64_t> ids, WriteDone done) {
  DeleteBatch batch{std::move(ids)};
  std::string record = EncodeWalRecord(WalRecordType::kDeleteBatch, EncodeDeleteBatch(batch));
  auto shared = std::make_shared<DeleteBatch>(std::move(batch));
  wal_->Append(std::move(record), [this, shared, done = std::move(done)](absl::Status s) mutable {
    if (!s.ok()) return std::move(done)(s);
    uint64_t deleted = 0;
    for (uint64_t id : shared->ids) deleted += memtable_.Delete(id) ? 1 : 0;
    std::move(done)(deleted);
  });
}

std::vector<StoredPoint> Collection::Get(absl::Span<const uint64_t> ids,
                                         bool include_vectors) const {
  std::vector<StoredPoint> out;
  for (uint64_t id : ids) {
    if (auto p = memtable_.Get(id, include_vectors)) out.push_back(*std::move(p));
  }
  return out;
}

CollectionStats Collection::Stats() const {
  CollectionStats stats;
  stats.num_vectors = memtable_.live_count();
  stats.memory_bytes = memtable_.memory_bytes();
  stats.disk_bytes = wal_ ? wal_->file_bytes() : 0;
  return stats;
}

absl::Status Collection::Close() { return wal_ ? wal_->Close() : absl::OkStatus(); }

}  // namespace shoal::storage
