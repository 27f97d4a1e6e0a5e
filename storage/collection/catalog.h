// Catalog: the set of collections under one data directory (<data>/collections/<name>/).
//
// Create builds the collection in a hidden staging directory and renames it into place, so a
// crash never leaves half a collection visible; Open removes leftover staging directories.
// Drop renames the directory away before removing it. Collections are handed out as
// shared_ptr: a request that found a collection keeps it alive while a concurrent Drop
// unlinks it.
//
// A collection that fails to open (a corrupt MANIFEST or ivf.meta, a missing file) does not
// stop the others: it is kept as *broken*, with the reason. Find() answers DATA_LOSS for it
// (naming the file), Broken() lists it, Drop() removes its files, and its name stays taken
// until then. It is never opened again in this process: restart after repairing the files.
//
// Lookups never wait on disk: the mutex guards the name map only. Create and Drop reserve the
// name under it, do their fsyncs and renames unlocked, then publish the result under it again,
// so concurrent Creates of one name still give exactly one success.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/collection/collection.h"

namespace shoal::storage {

// A collection directory that did not open.
struct BrokenCollection {
  std::string name;
  // Why it did not open: the original code, and a message naming the file.
  absl::Status error;
  // The schema, when the manifest itself still decodes (e.g. only a segment is corrupt).
  std::optional<CollectionManifest> manifest;
};

class Catalog {
 public:
  // Opens every collection under data_dir/collections, creating the directory if needed.
  // A collection that fails to open is kept as broken (logged, never skipped silently); only
  // a failure to read the collections directory itself makes Open fail.
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(FileSystem* fs, const std::string& data_dir,
                                                       CollectionOptions options);
  ~Catalog();

  // ALREADY_EXISTS when the name is taken (by a live, broken or half-created collection);
  // UNAVAILABLE while a Drop of that name is still removing its directory.
  absl::StatusOr<std::shared_ptr<Collection>> Create(CollectionManifest manifest)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a live or broken collection and its files. NOT_FOUND when there is no such
  // collection.
  absl::Status Drop(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND when there is no such collection; DATA_LOSS (with the reason, naming the file)
  // when it is broken. Never waits on disk.
  absl::StatusOr<std::shared_ptr<Collection>> Find(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Live collections, sorted by name.
  std::vector<std::shared_ptr<Collection>> List() const ABSL_LOCKS_EXCLUDED(mu_);
  // Broken collections, sorted by name.
  std::vector<BrokenCollection> Broken() const ABSL_LOCKS_EXCLUDED(mu_);

  // Closes every collection (drains their WALs).
  absl::Status Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Catalog(FileSystem* fs, std::string root, CollectionOptions options)
      : fs_(fs), root_(std::move(root)), options_(std::move(options)) {}
  // Opens one collection directory, or records it as broken.
  void OpenOne(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // The disk part of Create: staging directory, rename, open. REQUIRES: `name` reserved.
  absl::StatusOr<std::shared_ptr<Collection>> CreateFiles(CollectionManifest manifest);
  // Takes `name` out of the maps and reserves it; NOT_FOUND when there is no such collection.
  // `collection` is null for a broken one.
  absl::Status TakeForDrop(const std::string& name, std::shared_ptr<Collection>* collection,
                           std::optional<BrokenCollection>* broken, std::string* doomed)
      ABSL_LOCKS_EXCLUDED(mu_);

  FileSystem* const fs_;
  const std::string root_;  // <data>/collections
  const CollectionOptions options_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Collection>> collections_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, BrokenCollection> broken_ ABSL_GUARDED_BY(mu_);
  // Names a Create is building or a Drop is removing: their directories are in flux.
  std::set<std::string> creating_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dropping_ ABSL_GUARDED_BY(mu_);
  uint64_t drop_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shoal::storage
