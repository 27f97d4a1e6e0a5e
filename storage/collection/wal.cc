#include "storage/collection/wal.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"

namespace shoal::storage {

absl::StatusOr<std::unique_ptr<Wal>> Wal::Open(FileSystem* fs, const std::string& path,
                                               WalOptions options) {
  SHOAL_ASSIGN_OR_RETURN(auto file, fs->NewAppendableFile(path));
  if (file->size() == 0) {
    SHOAL_RETURN_IF_ERROR(file->Append(EncodeWalFileHeader()));
    SHOAL_RETURN_IF_ERROR(file->Sync());
    SHOAL_RETURN_IF_ERROR(fs->SyncDir(DirName(path)));
  }
  return std::unique_ptr<Wal>(new Wal(std::move(file), std::move(options)));
}

Wal::Wal(std::unique_ptr<WritableFile> file, WalOptions options)
    : options_(std::move(options)), file_(std::move(file)) {
  file_bytes_.store(file_->size());
  thread_ = std::thread([this] { Run(); });
}

Wal::~Wal() { (void)Close(); }

void Wal::Append(std::string record, Callback done) {
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) {
      refused = absl::UnavailableError("collection is closing");
    } else if (!failed_.ok()) {
      refused = absl::Status(
          failed_.code(),
          absl::StrCat("WAL is read-only after an earlier failure: ", failed_.message()));
    } else if (queued_bytes_ + record.size() > options_.max_pending_bytes && !queue_.empty()) {
      refused = absl::ResourceExhaustedError("too many writes waiting for the WAL; retry later");
    } else {
      queued_bytes_ += record.size();
      queue_.push_back({std::move(record), std::move(done)});
      cv_.notify_one();
      return;
    }
  }
  std::move(done)(refused);
}

void Wal::Run() {
  auto log = core::Logger("wal");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) break;  // closing and drained
    std::deque<Pending> batch;
    batch.swap(queue_);
    queued_bytes_ = 0;
    absl::Status status = failed_;
    lock.unlock();

    if (status.ok()) {
      std::string buffer;
      for (const Pending& p : batch) buffer.append(p.record);
      const auto start = std::chrono::steady_clock::now();
      status = file_->Append(buffer);
      if (status.ok()) status = file_->Sync();
      if (options_.on_sync) {
        options_.on_sync(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      if (status.ok()) {
        file_bytes_.fetch_add(buffer.size());
      } else {
        log->error("WAL write failed, collection is now read-only: {}", status.ToString());
        // Sticky before any callback runs: a writer that hears of this failure and retries
        // at once must be refused too.
        std::lock_guard<std::mutex> failed_lock(mu_);
        if (failed_.ok()) failed_ = status;
      }
    }
    for (Pending& p : batch) std::move(p.done)(status);
    lock.lock();
  }
}

absl::Status Wal::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ && !thread_.joinable()) return absl::OkStatus();
    closing_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  return file_ ? file_->Close() : absl::OkStatus();
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
