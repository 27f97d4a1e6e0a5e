// FaultyFileSystem: a FileSystemWrapper that injects failures, for testing error paths:
// failing fsyncs (fdatasync EIO), full disks on append (ENOSPC), short appends that write
// only part of the data before failing (a torn write), and failing reads.
//
// Thread-safety: the knobs are atomics; set them from the test thread at any time.
#pragma once

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "storage/io/file_system.h"

namespace shoal::testing {

class FaultyFileSystem final : public storage::FileSystem {
 public:
  explicit FaultyFileSystem(storage::FileSystem* target) : target_(target) {}

  std::atomic<bool> fail_sync{false};
  std::atomic<bool> fail_append{false};    // ENOSPC, nothing written
  std::atomic<int> torn_append_bytes{-1};  // >= 0: write only this many bytes, then fail
  std::atomic<bool> fail_read{false};
  std::atomic<int> syncs{0};

  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewAppendableFile(
      const std::string& path) override {
    auto file = target_->NewAppendableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<storage::WritableFile>(new File(this, *std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<storage::RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    if (fail_read) return absl::InternalError("injected EIO on open for read");
    return target_->NewRandomAccessFile(path);
  }
  absl::Status CreateDirs(const std::string& p) override { return target_->CreateDirs(p); }
  absl::Status RemoveAll(const std::string& p) override { return target_->RemoveAll(p); }
  absl::Status Rename(const std::string& a, const std::string& b) override {
    return target_->Rename(a, b);
  }
  absl::Status Truncate(const std::string& p, uint64_t n) override {
    return target_->Truncate(p, n);
  }
  absl::Status SyncDir(const std::string& p) override {
    if (fail_sync) return absl::InternalError("injected EIO on fsync(dir)");
    return target_->SyncDir(p);
  }
  bool Exists(const std::string& p) override { return target_->Exists(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return target_->ListDir(p);
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& p) override { return target_->FileSize(p); }

 private:
  class File final : public storage::WritableFile {
   public:
    File(FaultyFileSystem* fs, std::unique_ptr<storage::WritableFile> target)
        : fs_(fs), target_(std::move(target)) {}
    absl::Status Append(std::string_view data) override {
      if (fs_->fail_append) return absl::ResourceExhaustedError("injected ENOSPC");
      const int torn = fs_->torn_append_bytes;
      if (torn >= 0) {
        (void)target_->Append(data.substr(0, std::min<size_t>(size_t(torn), data.size())));
        return absl::InternalError("injected EIO after a partial write");
      }
      return target_->Append(data);
    }
    absl::Status Sync() override {
      ++fs_->syncs;
      if (fs_->fail_sync) return absl::InternalError("injected EIO on fdatasync");
      return target_->Sync();
    }
    absl::Status Close() override { return target_->Close(); }
    uint64_t size() const override { return target_->size(); }

   private:
    FaultyFileSystem* fs_;
    std::unique_ptr<storage::WritableFile> target_;
  };

  storage::FileSystem* target_;
};

}  // namespace shoal::testing
