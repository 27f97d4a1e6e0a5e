// POSIX implementation of FileSystem.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "storage/io/file_system.h"

namespace shoal::storage {
namespace {

absl::Status ErrnoStatus(const char* what, const std::string& path, int err) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(std::string_view data) override {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      data.remove_prefix(size_t(n));
      size_ += uint64_t(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return absl::OkStatus();
  }

  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, scratch + done, n - done, off_t(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("pread", path_, errno);
      }
      if (r == 0) break;  // EOF
      done += size_t(r);
    }
    return done;
  }

  bool ReadIfCached(uint64_t offset, size_t n, char* scratch) const override {
    // RWF_NOWAIT: EAGAIN instead of waiting for the device (Linux >= 4.14 for reads).
    iovec iov{scratch, n};
    const ssize_t r = ::preadv2(fd_, &iov, 1, off_t(offset), RWF_NOWAIT);
    return r == ssize_t(n);
  }

  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  const int fd_;
  const uint64_t size_;
};

// open(2) plus the file's current size.
absl::StatusOr<std::pair<int, uint64_t>> OpenSized(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return ErrnoStatus("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus("fstat", path, err);
  }
  return std::make_pair(fd, uint64_t(st.st_size));
}

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    auto opened = OpenSized(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC);
    if (!opened.ok()) return opened.status();
    return std::make_unique<PosixWritableFile>(path, opened->first, opened->second);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    auto opened = OpenSized(path, O_RDONLY | O_CLOEXEC);
    if (!opened.ok()) return opened.status();
    return std::make_unique<PosixRandomAccessFile>(path, opened->first, opened->second);
  }

  absl::Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return ErrnoStatus("mkdir", path, ec.value());
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return ErrnoStatus("remove", path, ec.value());
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus("rename", from, errno);
    return absl::OkStatus();
  }

  absl::Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), off_t(size)) != 0) return ErrnoStatus("truncate", path, errno);
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoStatus("fsync", path, err);
    return absl::OkStatus();
  }

  bool Exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus("opendir", path, errno);
    std::vector<std::string> names;
    while (dirent* entry = ::readdir(dir)) {
      std::string_view name = entry->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("stat", path, errno);
    return uint64_t(st.st_size);
  }
};

}  // namespace

FileSystem* DefaultFileSystem() {
  static PosixFileSystem fs;
  return &fs;
}

}  // namespace shoal::storage
