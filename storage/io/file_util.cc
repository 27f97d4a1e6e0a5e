// Helpers over the FileSystem interface.
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

absl::StatusOr<std::string> ReadFileToString(FileSystem* fs, const std::string& path) {
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewRandomAccessFile(path));
  std::string data(file->size(), '\0');
  SHOAL_ASSIGN_OR_RETURN(size_t n, file->Read(0, data.size(), data.data()));
  data.resize(n);
  return data;
}

absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  SHOAL_RETURN_IF_ERROR(fs->RemoveAll(tmp));
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewAppendableFile(tmp));
  SHOAL_RETURN_IF_ERROR(file->Append(data));
  SHOAL_RETURN_IF_ERROR(file->Sync());
  SHOAL_RETURN_IF_ERROR(file->Close());
  SHOAL_RETURN_IF_ERROR(fs->Rename(tmp, path));
  return fs->SyncDir(DirName(path));
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  std::string out(dir);
  if (out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

std::string DirName(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace shoal::storage
