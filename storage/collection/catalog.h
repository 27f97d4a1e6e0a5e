// Catalog: the set of collections under one data directory (<data>/collections/<name>/).
//
// Create builds the collection in a hidden staging directory and renames it into place, so a
// crash never leaves half a collection visible; Open removes leftover staging directories.
// Drop renames the directory away before removing it. Collections are handed out as
// shared_ptr: a request that found a collection keeps it alive while a concurrent Drop
// unlinks it.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/collection/collection.h"

namespace shoal::storage {

class Catalog {
 public:
  // Opens every collection under data_dir/collections, creating the directory if needed.
  // A collection that fails to open makes Open fail (DATA_LOSS is never skipped silently).
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(FileSystem* fs, const std::string& data_dir,
                                                       CollectionOptions options);
  ~Catalog();

  // ALREADY_EXISTS when the name is taken.
  absl::StatusOr<std::shared_ptr<Collection>> Create(CollectionManifest manifest);
  // NOT_FOUND when there is no such collection.
  absl::Status Drop(const std::string& name);
  // nullptr when there is no such collection.
  std::shared_ptr<Collection> Find(const std::string& name) const;
  // Sorted by name.
  std::vector<std::shared_ptr<Collection>> List() const;

  // Closes every collection (drains their WALs).
  absl::Status Close();

 private:
  Catalog(FileSystem* fs, std::string root, CollectionOptions options)
      : fs_(fs), root_(std::move(root)), options_(std::move(options)) {}

  FileSystem* const fs_;
  const std::string root_;  // <data>/collections
  const CollectionOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Collection>> collections_;  // guarded by mu_
  uint64_t drop_counter_ = 0;                                       // guarded by mu_
};

}  // namespace shoal::storage
