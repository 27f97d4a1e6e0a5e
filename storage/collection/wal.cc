#include "storage/collection/wal.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage {

absl::Status WalFailureStatus(const absl::Status& cause) {
  if (cause.code() == absl::StatusCode::kResourceExhausted) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "disk full: the collection is read-only until restart (", cause.message(), ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "WAL write failed: the collection is read-only until restart (", cause.ToString(), ")"));
}

absl::StatusOr<std::unique_ptr<Wal>> Wal::Open(FileSystem* fs, const std::string& path,
                                               WalOptions options) {
  // A header cut short (ENOSPC or a crash while creating the file) holds no record; records
  // appended after it would make the whole file unreadable.
  if (auto size = fs->FileSize(path); size.ok() && *size > 0 && *size < kWalFileHeaderSize) {
    SHOAL_RETURN_IF_ERROR(fs->Truncate(path, 0));
  }
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewAppendableFile(path));
  if (file->size() == 0) {
    SHOAL_RETURN_IF_ERROR(file->Append(EncodeWalFileHeader()));
    SHOAL_RETURN_IF_ERROR(file->Sync());
    SHOAL_RETURN_IF_ERROR(fs->SyncDir(DirName(path)));
  }
  return std::unique_ptr<Wal>(new Wal(fs, path, std::move(file), std::move(options)));
}

Wal::Wal(FileSystem* fs, std::string path, std::unique_ptr<WritableFile> file, WalOptions options)
    : fs_(fs), path_(std::move(path)), options_(std::move(options)), file_(std::move(file)) {
  file_bytes_.store(file_->size());
  thread_ = std::thread([this] { Run(); });
}

Wal::~Wal() { (void)Close(); }

void Wal::Append(std::string record, Callback done) {
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) {
      refused = failed_;  // read-only, whether or not it is closing too
    } else if (closing_) {
      refused = absl::UnavailableError("collection is closing");
    } else if (queued_bytes_ + record.size() > options_.max_pending_bytes && !queue_.empty()) {
      refused = absl::ResourceExhaustedError("too many writes waiting for the WAL; retry later");
    } else {
      queued_bytes_ += record.size();
      queue_.push_back({std::move(record), std::move(done)});
      return;
    }
  }
  std::move(done)(refused);
}

std::deque<Wal::Pending> Wal::TakeBatch() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &Wal::HasWorkLocked));
  std::deque<Pending> batch;
  batch.swap(queue_);
  queued_bytes_ = 0;
  return batch;  // empty: closing and drained
}

void Wal::Run() {
  while (true) {
    std::deque<Pending> batch = TakeBatch();
    if (batch.empty()) return;
    const absl::Status status = WriteBatch(batch);
    for (Pending& p : batch) {
      // A writer's callback must not end the WAL thread (and with it every later write).
      try {
        std::move(p.done)(status);
      } catch (const std::exception& e) {
        core::Logger("wal")->error("a write callback threw: {}", e.what());
      } catch (...) {
        core::Logger("wal")->error("a write callback threw");
      }
    }
  }
}

absl::Status Wal::WriteBatch(const std::deque<Pending>& batch) {
  if (absl::Status failed = health(); !failed.ok()) return failed;
  std::string buffer;
  for (const Pending& p : batch) buffer.append(p.record);
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = file_->Append(buffer);
  if (status.ok()) SHOAL_FAILPOINT("wal.after_write");
  if (status.ok()) status = file_->Sync();
  if (options_.on_sync) {
    options_.on_sync(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  if (status.ok()) {
    file_bytes_.fetch_add(buffer.size());
    SHOAL_FAILPOINT("wal.after_sync");
    return status;
  }
  auto log = core::Logger("wal");
  log->error("{}: WAL write failed, the collection is read-only until restart: {}", path_,
             status.ToString());
  // None of this batch is acknowledged: cut whatever part of it reached the file, so that the
  // file ends on the last durable record. Nothing is appended after it (the WAL stays failed).
  if (absl::Status cut = fs_->Truncate(path_, file_bytes_.load()); !cut.ok()) {
    log->warn("{}: cannot cut the failed write's bytes ({}); replay will", path_, cut.ToString());
  }
  // Sticky before any callback runs: a writer that hears of this failure and retries at once
  // must be refused too.
  absl::MutexLock lock(&mu_);
  if (failed_.ok()) failed_ = WalFailureStatus(status);
  return failed_;
}

absl::Status Wal::Close() {
  absl::MutexLock close_lock(&close_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return failed_;
    closing_ = true;
  }
  if (thread_.joinable()) thread_.join();
  const absl::Status closed = file_->Close();
  absl::MutexLock lock(&mu_);
  closed_ = true;
  if (!closed.ok() && failed_.ok()) failed_ = WalFailureStatus(closed);
  return failed_;
}

absl::Status Wal::health() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

uint64_t Wal::file_bytes() const { return file_bytes_.load(); }

absl::Status ReplayWal(FileSystem* fs, const std::string& path,
                       const std::function<absl::Status(WalRecordType, std::string_view)>& apply,
                       uint64_t* truncated_bytes) {
  *truncated_bytes = 0;
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewRandomAccessFile(path));
  const uint64_t size = file->size();
  std::string header(kWalFileHeaderSize, '\0');
  SHOAL_ASSIGN_OR_RETURN(size_t got, file->Read(0, header.size(), header.data()));
  if (got < kWalFileHeaderSize) {
    // A crash while creating the file: nothing in it was ever acknowledged.
    *truncated_bytes = size;
    SHOAL_RETURN_IF_ERROR(fs->Truncate(path, 0));
    return absl::OkStatus();
  }
  SHOAL_RETURN_IF_ERROR(CheckWalFileHeader(header));

  uint64_t offset = kWalFileHeaderSize;
  std::string body;
  char head[kWalRecordHeaderSize - 1];
  while (offset < size) {
    const uint64_t left = size - offset;
    bool torn = left < sizeof(head);
    uint32_t length = 0, masked_crc = 0;
    if (!torn) {
      SHOAL_ASSIGN_OR_RETURN(got, file->Read(offset, sizeof(head), head));
      length = DecodeFixed32(head);
      masked_crc = DecodeFixed32(head + 4);
      torn = got < sizeof(head) || length > left - sizeof(head);
    }
    bool bad_crc = false;
    if (!torn) {
      if (length == 0 || length > kWalMaxRecordBytes) {
        bad_crc = true;
      } else {
        body.resize(length);
        SHOAL_ASSIGN_OR_RETURN(got, file->Read(offset + sizeof(head), length, body.data()));
        bad_crc = got < length || UnmaskCrc(masked_crc) != Crc32c(body);
      }
    }
    const uint64_t end = torn ? size : offset + sizeof(head) + length;
    if (torn || (bad_crc && end == size)) {
      core::Logger("wal")->warn("{}: truncating a torn record at offset {} ({} bytes)", path,
                                offset, size - offset);
      *truncated_bytes = size - offset;
      return fs->Truncate(path, offset);
    }
    if (bad_crc) {
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt WAL record at offset ", offset, " followed by more data"));
    }
    const auto type = WalRecordType(uint8_t(body[0]));
    SHOAL_RETURN_IF_ERROR(apply(type, std::string_view(body).substr(1)));
    offset = end;
  }
  return absl::OkStatus();
}

}  // namespace shoal::storage
