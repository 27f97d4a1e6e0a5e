// FileSystem: the small file interface every byte Shoal stores goes through (leveldb's Env,
// rocksdb's FileSystem). Production code uses DefaultFileSystem(); tests wrap it with
// FileSystemWrapper to inject full disks, short reads, failed fsyncs and EIO.
//
// Errors are absl::Status with the path and errno text in the message: ENOENT -> NotFound,
// ENOSPC -> ResourceExhausted, anything else -> Internal/DataLoss as documented per method.
//
// Thread-safety: FileSystem methods are thread-safe. A WritableFile is used by one thread at a
// time; RandomAccessFile::Read is thread-safe (positional reads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shoal::storage {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(std::string_view data) = 0;
  // Makes everything appended so far durable (fdatasync).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  // Bytes in the file, including what this handle appended.
  virtual uint64_t size() const = 0;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into scratch; returns how many were read (short at EOF).
  virtual absl::StatusOr<size_t> Read(uint64_t offset, size_t n, char* scratch) const = 0;
  // Reads exactly n bytes only if that cannot block (they are in the page cache): true when it
  // did. Never waits for a device, so it may run on the search arena (I-1). Files that cannot
  // tell return false and the caller reads asynchronously.
  virtual bool ReadIfCached(uint64_t /*offset*/, size_t /*n*/, char* /*scratch*/) const {
    return false;
  }
  virtual uint64_t size() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // Opens `path` for appending, creating it if missing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) = 0;
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;

  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Removes a file or a directory tree; OK if it does not exist.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  virtual absl::Status Truncate(const std::string& path, uint64_t size) = 0;
  // fsyncs a directory so that creations, renames and removals in it are durable.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;
};

// The process-wide POSIX file system.
FileSystem* DefaultFileSystem();

// Forwards every call to a target; override what a test wants to break.
class FileSystemWrapper : public FileSystem {
 public:
  explicit FileSystemWrapper(FileSystem* target) : target_(target) {}

  absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override {
    return target_->NewAppendableFile(path);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return target_->NewRandomAccessFile(path);
  }
  absl::Status CreateDirs(const std::string& path) override { return target_->CreateDirs(path); }
  absl::Status RemoveAll(const std::string& path) override { return target_->RemoveAll(path); }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return target_->Rename(from, to);
  }
  absl::Status Truncate(const std::string& path, uint64_t size) override {
    return target_->Truncate(path, size);
  }
  absl::Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  bool Exists(const std::string& path) override { return target_->Exists(path); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return target_->FileSize(path);
  }

 protected:
  FileSystem* target() const { return target_; }

 private:
  FileSystem* target_;
};

// Helpers built on the interface.

// Reads a whole file.
absl::StatusOr<std::string> ReadFileToString(FileSystem* fs, const std::string& path);

// Replaces `path` with `data` so that readers see the old or the new content, never a mix:
// writes path.tmp, fsyncs it, renames it over path and fsyncs the directory (I-6).
absl::Status WriteFileAtomically(FileSystem* fs, const std::string& path, std::string_view data);

// "dir/name" without doubling the slash.
std::string JoinPath(std::string_view dir, std::string_view name);
// The directory part of a path ("." when there is none).
std::string DirName(std::string_view path);

}  // namespace shoal::storage
