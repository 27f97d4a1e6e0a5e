// FaultyFileSystem: a FileSystemWrapper that injects failures, for testing error paths:
// failing fsyncs (fdatasync EIO), full disks on append (ENOSPC), short appends that write
// only part of the data before failing (a torn write), failing reads and truncates.
//
// Two ways to break things:
//  - global knobs (fail_sync, fail_append, ...) hit every file;
//  - Inject(Fault) rules hit one kind of operation on paths that contain a substring, after a
//    number of matching operations went through: "the 3rd append to a seg-* file fails with
//    ENOSPC", so that a test can walk a fault through every write site in turn.
//
// Thread-safety: the knobs are atomics and the rules are under a mutex; set them from the test
// thread at any time.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "storage/io/file_system.h"

namespace shoal::testing {

inline absl::Status Enospc() {
  return absl::ResourceExhaustedError("injected: No space left on device");
}
inline absl::Status Eio() { return absl::InternalError("injected: Input/output error"); }

class FaultyFileSystem final : public storage::FileSystem {
 public:
  enum class Op {
    kCreate,   // NewAppendableFile
    kAppend,   // WritableFile::Append
    kSync,     // WritableFile::Sync
    kSyncDir,  // FileSystem::SyncDir
    kRename,   // FileSystem::Rename (matched on the source path)
  };
  struct Fault {
    Op op = Op::kAppend;
    std::string path_part;    // matches paths containing it ("" matches every path)
    bool exact_path = false;  // matches only the path equal to path_part
    int after = 0;            // matching operations that succeed before the first failure
    absl::Status error = Enospc();
    int torn_bytes = 0;  // kAppend only: bytes written before the failure
    int times = -1;      // failures before the rule retires itself; -1 = for ever
  };

  explicit FaultyFileSystem(storage::FileSystem* target) : target_(target) {}

  std::atomic<bool> fail_sync{false};
  std::atomic<bool> fail_append{false};    // ENOSPC, nothing written
  std::atomic<int> torn_append_bytes{-1};  // >= 0: write only this many bytes, then fail
  std::atomic<bool> fail_read{false};
  std::atomic<bool> fail_truncate{false};  // e.g. a crash before a failed write is cut off
  std::atomic<int> syncs{0};

  void Inject(Fault fault) {
    absl::MutexLock lock(&mu_);
    rules_.push_back({std::move(fault), 0, 0});
  }
  void ClearFaults() {
    absl::MutexLock lock(&mu_);
    rules_.clear();
  }
  // Failures the rules injected so far.
  int injected() const {
    absl::MutexLock lock(&mu_);
    return injected_;
  }

  absl::StatusOr<std::unique_ptr<storage::WritableFile>> NewAppendableFile(
      const std::string& path) override {
    int torn = 0;
    if (absl::Status s = Check(Op::kCreate, path, &torn); !s.ok()) return s;
    auto file = target_->NewAppendableFile(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<storage::WritableFile>(new File(this, path, *std::move(file)));
  }
  absl::StatusOr<std::unique_ptr<storage::RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    if (fail_read) return absl::InternalError("injected EIO on open for read");
    return target_->NewRandomAccessFile(path);
  }
  absl::Status CreateDirs(const std::string& p) override { return target_->CreateDirs(p); }
  absl::Status RemoveAll(const std::string& p) override { return target_->RemoveAll(p); }
  absl::Status Rename(const std::string& a, const std::string& b) override {
    int torn = 0;
    if (absl::Status s = Check(Op::kRename, a, &torn); !s.ok()) return s;
    return target_->Rename(a, b);
  }
  absl::Status Truncate(const std::string& p, uint64_t n) override {
    if (fail_truncate) return absl::InternalError("injected EIO on truncate");
    return target_->Truncate(p, n);
  }
  absl::Status SyncDir(const std::string& p) override {
    if (fail_sync) return absl::InternalError("injected EIO on fsync(dir)");
    int torn = 0;
    if (absl::Status s = Check(Op::kSyncDir, p, &torn); !s.ok()) return s;
    return target_->SyncDir(p);
  }
  bool Exists(const std::string& p) override { return target_->Exists(p); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return target_->ListDir(p);
  }
  absl::StatusOr<uint64_t> FileSize(const std::string& p) override { return target_->FileSize(p); }

 private:
  struct Rule {
    Fault fault;
    int seen = 0;
    int failed = 0;
  };

  // The error of the first live rule that fires for (op, path); OK when none does.
  absl::Status Check(Op op, const std::string& path, int* torn_bytes) {
    absl::MutexLock lock(&mu_);
    for (Rule& r : rules_) {
      if (r.fault.op != op) continue;
      if (r.fault.exact_path ? path != r.fault.path_part
                             : path.find(r.fault.path_part) == std::string::npos) {
        continue;
      }
      if (r.fault.times >= 0 && r.failed >= r.fault.times) continue;
      if (r.seen++ < r.fault.after) continue;
      ++r.failed;
      ++injected_;
      *torn_bytes = r.fault.torn_bytes;
      return r.fault.error;
    }
    return absl::OkStatus();
  }

  class File final : public storage::WritableFile {
   public:
    File(FaultyFileSystem* fs, std::string path, std::unique_ptr<storage::WritableFile> target)
        : fs_(fs), path_(std::move(path)), target_(std::move(target)) {}
    absl::Status Append(std::string_view data) override {
      if (fs_->fail_append) return absl::ResourceExhaustedError("injected ENOSPC");
      const int torn = fs_->torn_append_bytes;
      if (torn >= 0) {
        (void)target_->Append(data.substr(0, std::min<size_t>(size_t(torn), data.size())));
        return absl::InternalError("injected EIO after a partial write");
      }
      int rule_torn = 0;
      if (absl::Status s = fs_->Check(Op::kAppend, path_, &rule_torn); !s.ok()) {
        (void)target_->Append(data.substr(0, std::min<size_t>(size_t(rule_torn), data.size())));
        return s;
      }
      return target_->Append(data);
    }
    absl::Status Sync() override {
      ++fs_->syncs;
      if (fs_->fail_sync) return absl::InternalError("injected EIO on fdatasync");
      int torn = 0;
      if (absl::Status s = fs_->Check(Op::kSync, path_, &torn); !s.ok()) return s;
      return target_->Sync();
    }
    absl::Status Close() override { return target_->Close(); }
    uint64_t size() const override { return target_->size(); }

   private:
    FaultyFileSystem* fs_;
    const std::string path_;
    std::unique_ptr<storage::WritableFile> target_;
  };

  storage::FileSystem* target_;
  mutable absl::Mutex mu_;
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mu_);
  int injected_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shoal::testing
