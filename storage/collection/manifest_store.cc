#include "storage/collection/manifest_store.h"

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/base/failpoint.h"
#include "core/base/status.h"

namespace shoal::storage {
namespace {

// WriteFileAtomically's steps, with a failpoint at each edge of the rename that installs the
// manifest.
absl::Status WriteCurrent(FileSystem* fs, const std::string& dir, std::string_view data) {
  const std::string path = JoinPath(dir, "CURRENT"), tmp = path + ".tmp";
  SHOAL_RETURN_IF_ERROR(fs->RemoveAll(tmp));
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewAppendableFile(tmp));
  SHOAL_RETURN_IF_ERROR(file->Append(data));
  SHOAL_RETURN_IF_ERROR(file->Sync());
  SHOAL_RETURN_IF_ERROR(file->Close());
  SHOAL_FAILPOINT("manifest.before_rename");
  SHOAL_RETURN_IF_ERROR(fs->Rename(tmp, path));
  SHOAL_FAILPOINT("manifest.before_dir_sync");
  return fs->SyncDir(dir);
}

}  // namespace

std::string ManifestFileName(uint64_t n) { return absl::StrFormat("MANIFEST-%06d", n); }

absl::StatusOr<LoadedManifest> LoadManifest(FileSystem* fs, const std::string& dir) {
  const std::string current_path = JoinPath(dir, "CURRENT");
  if (!fs->Exists(current_path)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no CURRENT file"));
  }
  SHOAL_ASSIGN_OR_RETURN(std::string current, ReadFileToString(fs, current_path));
  absl::string_view name = absl::StripAsciiWhitespace(current);
  uint64_t number;
  if (!absl::ConsumePrefix(&name, "MANIFEST-") || !absl::SimpleAtoi(name, &number)) {
    return absl::DataLossError(absl::StrCat(current_path, ": does not name a manifest"));
  }
  const std::string path = JoinPath(dir, ManifestFileName(number));
  SHOAL_ASSIGN_OR_RETURN(std::string data, ReadFileToString(fs, path));
  auto manifest = DecodeManifest(data);
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat(path, ": ", manifest.status().message()));
  }
  return LoadedManifest{*std::move(manifest), number};
}

absl::StatusOr<uint64_t> InstallManifest(FileSystem* fs, const std::string& dir,
                                         const CollectionManifest& manifest,
                                         uint64_t previous_number) {
  const uint64_t number = previous_number + 1;
  SHOAL_RETURN_IF_ERROR(
      WriteFileAtomically(fs, JoinPath(dir, ManifestFileName(number)), EncodeManifest(manifest)));
  SHOAL_FAILPOINT("manifest.before_current");
  SHOAL_RETURN_IF_ERROR(WriteCurrent(fs, dir, ManifestFileName(number) + "\n"));
  SHOAL_FAILPOINT("manifest.before_old_removed");
  if (previous_number > 0) (void)fs->RemoveAll(JoinPath(dir, ManifestFileName(previous_number)));
  return number;
}

}  // namespace shoal::storage
