#include "storage/collection/catalog.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status.h"

namespace shoal::storage {
namespace {
constexpr char kStagingPrefix[] = ".creating-";
constexpr char kDroppingPrefix[] = ".dropping-";
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
      continue;
    }
    auto collection = Collection::Open(fs, dir, catalog->options_);
    if (!collection.ok()) {
      return absl::Status(
          collection.status().code(),
          absl::StrCat("opening collection '", name, "': ", collection.status().message()));
    }
    catalog->collections_[name] = std::move(*collection);
  }
  return catalog;
}

Catalog::~Catalog() { (void)Close(); }

absl::StatusOr<std::shared_ptr<Collection>> Catalog::Create(CollectionManifest manifest) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string name = manifest.name;
  if (collections_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("collection '", name, "' already exists"));
  }
  const std::string staging = JoinPath(root_, absl::StrCat(kStagingPrefix, name));
  const std::string final_dir = JoinPath(root_, name);
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
  collections_[name] = collection;
  return collection;
}

absl::Status Catalog::Drop(const std::string& name) {
  std::shared_ptr<Collection> collection;
  std::string doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = collections_.find(name);
    if (it == collections_.end()) {
      return absl::NotFoundError(absl::StrCat("collection '", name, "' does not exist"));
    }
    collection = std::move(it->second);
    collections_.erase(it);
    doomed = JoinPath(root_, absl::StrCat(kDroppingPrefix, name, "-", ++drop_counter_));
    SHOAL_RETURN_IF_ERROR(fs_->Rename(JoinPath(root_, name), doomed));
    SHOAL_RETURN_IF_ERROR(fs_->SyncDir(root_));
  }
  SHOAL_RETURN_IF_ERROR(collection->Close());
  return fs_->RemoveAll(doomed);
}

std::shared_ptr<Collection> Catalog::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = collections_.find(name);
  return it == collections_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Collection>> Catalog::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Collection>> out;
  for (const auto& [name, c] : collections_) out.push_back(c);
  return out;
}

absl::Status Catalog::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status status;
  for (auto& [name, c] : collections_) status.Update(c->Close());
  return status;
}

}  // namespace shoal::storage
