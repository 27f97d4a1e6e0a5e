// Collection: one collection's durable state — manifest, WAL, memtable — and the operations
// the server runs on it.
//
// Writes (Upsert, Delete) are framed into one WAL record each, made durable by the WAL's group
// commit, then applied to the memtable on the WAL thread, and only then reported done (I-5,
// read-after-write). Reads (Get, SearchView) see every write reported done before they began.
// Cosine collections store vectors normalised at insert.
//
// On-disk layout (DESIGN.md §5): <dir>/CURRENT, <dir>/MANIFEST-<n>, <dir>/wal/<seq>.log.
//
// Thread-safety: every method is thread-safe. Close() must be the last call.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/index/search_types.h"
#include "storage/collection/memtable.h"
#include "storage/collection/wal.h"
#include "storage/format/manifest_format.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

struct CollectionOptions {
  WalOptions wal;
};

struct CollectionStats {
  uint64_t num_vectors = 0;  // live
  uint64_t disk_bytes = 0;
  uint64_t memory_bytes = 0;
};

class Collection {
 public:
  // How many points or ids a write affected, or why it failed.
  using WriteDone = absl::AnyInvocable<void(absl::StatusOr<uint64_t>) &&>;

  // Creates the collection's files under `dir`, which must not exist yet.
  static absl::StatusOr<std::unique_ptr<Collection>> Create(FileSystem* fs, const std::string& dir,
                                                            CollectionManifest manifest,
                                                            CollectionOptions options);
  // Opens an existing collection and replays its WAL.
  static absl::StatusOr<std::unique_ptr<Collection>> Open(FileSystem* fs, const std::string& dir,
                                                          CollectionOptions options);
  ~Collection();

  const CollectionManifest& manifest() const { return manifest_; }
  const std::string& name() const { return manifest_.name; }
  uint32_t dim() const { return manifest_.dim; }

  // REQUIRES: every point's vector has dim() finite floats (the server validates).
  // `done` gets the number of points written.
  void Upsert(std::vector<PointRecord> points, WriteDone done);
  // `done` gets the number of ids that existed.
  void Delete(std::vector<uint64_t> ids, WriteDone done);

  // The live points among `ids`, in the order asked, skipping ids that do not exist.
  std::vector<StoredPoint> Get(absl::Span<const uint64_t> ids, bool include_vectors) const;

  // A consistent view for exact search.
  core::FlatView SearchView() const { return memtable_.Snapshot(); }

  CollectionStats Stats() const;

  // Drains the WAL and closes files.
  absl::Status Close();

 private:
  Collection(FileSystem* fs, std::string dir, CollectionManifest manifest);
  absl::Status ReplayAndOpenWal(const CollectionOptions& options);
  absl::Status ApplyRecord(WalRecordType type, std::string_view payload);

  FileSystem* const fs_;
  const std::string dir_;
  const CollectionManifest manifest_;
  Memtable memtable_;
  std::unique_ptr<Wal> wal_;
};

}  // namespace shoal::storage
