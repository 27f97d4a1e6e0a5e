#include "storage/collection/catalog.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "storage/collection/manifest_store.h"

namespace shoal::storage {
namespace {
constexpr char kStagingPrefix[] = ".creating-";
constexpr char kDroppingPrefix[] = ".dropping-";

absl::Status NotFound(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("collection '", name, "' does not exist"));
}
}  // namespace

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(FileSystem* fs, const std::string& data_dir,
                                                       CollectionOptions options) {
  const std::string root = JoinPath(data_dir, "collections");
  SHOAL_RETURN_IF_ERROR(fs->CreateDirs(root));
  std::unique_ptr<Catalog> catalog(new Catalog(fs, root, std::move(options)));
  SHOAL_ASSIGN_OR_RETURN(auto names, fs->ListDir(root));
  for (const std::string& name : names) {
    const std::string dir = JoinPath(root, name);
    if (absl::StartsWith(name, ".")) {
      core::Logger("catalog")->warn("removing leftover {}", dir);
      SHOAL_RETURN_IF_ERROR(fs->RemoveAll(dir));
      SHOAL_FAILPOINT("recovery.between_removals");
      continue;
    }
    catalog->OpenOne(name);
  }
  return catalog;
}

void Catalog::OpenOne(const std::string& name) {
  const std::string dir = JoinPath(root_, name);
  auto collection = Collection::Open(fs_, dir, options_);
  absl::MutexLock lock(&mu_);
  if (collection.ok()) {
    collections_[name] = std::move(*collection);
    return;
  }
  BrokenCollection broken{name, collection.status(), std::nullopt};
  // The schema is still worth showing when only a segment or the WAL is bad.
  if (auto loaded = LoadManifest(fs_, dir); loaded.ok()) broken.manifest = loaded->manifest;
  core::Logger("catalog")->error("collection '{}' is broken and will not serve: {}", name,
                                 broken.error.ToString());
  broken_[name] = std::move(broken);
}

Catalog::~Catalog() { (void)Close(); }

absl::StatusOr<std::shared_ptr<Collection>> Catalog::Create(CollectionManifest manifest) {
  const std::string name = manifest.name;
  {
    absl::MutexLock lock(&mu_);
    if (dropping_.count(name)) {
      return absl::UnavailableError(
          absl::StrCat("collection '", name, "' is still being dropped; retry"));
    }
    if (collections_.count(name) || broken_.count(name) || creating_.count(name)) {
      return absl::AlreadyExistsError(absl::StrCat("collection '", name, "' already exists"));
    }
    creating_.insert(name);
  }
  // The name is ours: build the files without holding the lock, so lookups never wait on the
  // fsyncs and renames below.
  auto collection = CreateFiles(std::move(manifest));
  absl::MutexLock lock(&mu_);
  creating_.erase(name);
  if (collection.ok()) collections_[name] = *collection;
  return collection;
}

absl::StatusOr<std::shared_ptr<Collection>> Catalog::CreateFiles(CollectionManifest manifest) {
  const std::string staging = JoinPath(root_, absl::StrCat(kStagingPrefix, manifest.name));
  const std::string final_dir = JoinPath(root_, manifest.name);
  SHOAL_RETURN_IF_ERROR(fs_->RemoveAll(staging));
  {
    // Build the files in the staging directory, then close them before the rename.
    SHOAL_ASSIGN_OR_RETURN(auto staged, Collection::Create(fs_, staging, manifest, options_));
    SHOAL_RETURN_IF_ERROR(staged->Close());
  }
  SHOAL_RETURN_IF_ERROR(fs_->Rename(staging, final_dir));
  SHOAL_RETURN_IF_ERROR(fs_->SyncDir(root_));
  SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Collection> collection,
                         Collection::Open(fs_, final_dir, options_));
  return collection;
}

absl::Status Catalog::TakeForDrop(const std::string& name, std::shared_ptr<Collection>* collection,
                                  std::optional<BrokenCollection>* broken, std::string* doomed) {
  absl::MutexLock lock(&mu_);
  if (auto it = collections_.find(name); it != collections_.end()) {
    *collection = std::move(it->second);
    collections_.erase(it);
  } else if (auto b = broken_.find(name); b != broken_.end()) {
    *broken = std::move(b->second);
    broken_.erase(b);
  } else {
    return NotFound(name);
  }
  dropping_.insert(name);
  *doomed = JoinPath(root_, absl::StrCat(kDroppingPrefix, name, "-", ++drop_counter_));
  return absl::OkStatus();
}

absl::Status Catalog::Drop(const std::string& name) {
  std::shared_ptr<Collection> collection;
  std::optional<BrokenCollection> broken;
  std::string doomed;
  SHOAL_RETURN_IF_ERROR(TakeForDrop(name, &collection, &broken, &doomed));
  if (collection) {
    // Before the rename: Close waits for a build that is running and stops later ones, so
    // none writes into a directory that a new collection of this name may take over. A
    // collection whose WAL failed reports that failure again; it is being dropped, so nothing
    // it held matters any more.
    if (absl::Status closed = collection->Close(); !closed.ok()) {
      core::Logger("catalog")->warn("dropping '{}': {}", name, closed.ToString());
    }
  }
  // Unlocked: the name is reserved in dropping_, so no Create can race the rename.
  absl::Status renamed = fs_->Rename(JoinPath(root_, name), doomed);
  if (renamed.ok()) renamed = fs_->SyncDir(root_);
  const bool still_there = !renamed.ok() && fs_->Exists(JoinPath(root_, name));
  {
    absl::MutexLock lock(&mu_);
    dropping_.erase(name);
    if (still_there) {
      // Still in place: it stays in the catalog, closed (writes and builds are refused)
      // until a restart opens it again or a drop is retried.
      core::Logger("catalog")->error("dropping '{}' failed, it stays closed: {}", name,
                                     renamed.ToString());
      if (collection) collections_[name] = collection;
      if (broken) broken_[name] = std::move(*broken);
      return renamed;
    }
  }
  SHOAL_RETURN_IF_ERROR(renamed);
  return fs_->RemoveAll(doomed);
}

absl::StatusOr<std::shared_ptr<Collection>> Catalog::Find(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  if (auto it = collections_.find(name); it != collections_.end()) return it->second;
  if (auto b = broken_.find(name); b != broken_.end()) {
    return absl::DataLossError(absl::StrCat("collection '", name,
                                            "' is broken and does not serve (drop it or restore "
                                            "its files, then restart): ",
                                            b->second.error.message()));
  }
  return NotFound(name);
}

std::vector<std::shared_ptr<Collection>> Catalog::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Collection>> out;
  for (const auto& [name, c] : collections_) out.push_back(c);
  return out;
}

std::vector<BrokenCollection> Catalog::Broken() const {
  absl::MutexLock lock(&mu_);
  std::vector<BrokenCollection> out;
  for (const auto& [name, b] : broken_) out.push_back(b);
  return out;
}

absl::Status Catalog::Close() {
  // Closing drains WALs (disk): done on a copy, outside the lock.
  absl::Status status;
  for (const auto& c : List()) status.Update(c->Close());
  return status;
}

}  // namespace shoal::storage
