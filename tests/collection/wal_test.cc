#include "storage/collection/wal.h"

#include <future>

#include "gtest/gtest.h"
#include "storage/format/coding.h"
#include "tests/fakes/faulty_file_system.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::wal_test {
namespace {

std::string Record(uint64_t id) {
  return EncodeWalRecord(WalRecordType::kDeleteBatch, EncodeDeleteBatch({{id}}));
}

absl::Status AppendAndWait(Wal& wal, std::string record) {
  std::promise<absl::Status> done;
  wal.Append(std::move(record), [&](absl::Status s) { done.set_value(s); });
  return done.get_future().get();
}

std::vector<uint64_t> Replay(FileSystem* fs, const std::string& path, absl::Status* status,
                             uint64_t* truncated) {
  std::vector<uint64_t> ids;
  *status = ReplayWal(
      fs, path,
      [&](WalRecordType type, std::string_view payload) {
        EXPECT_EQ(type, WalRecordType::kDeleteBatch);
        auto batch = DecodeDeleteBatch(payload);
        if (!batch.ok()) return batch.status();
        ids.insert(ids.end(), batch->ids.begin(), batch->ids.end());
        return absl::OkStatus();
      },
      truncated);
  return ids;
}

TEST(Wal, CallbacksRunInAppendOrderAfterDurabilityAndReplayReadsThemBack) {
  testing::TempDir dir;
  const std::string path = dir.Sub("000001.log");
  testing::FaultyFileSystem fs(DefaultFileSystem());
  {
    auto wal = Wal::Open(&fs, path, {});
    ASSERT_TRUE(wal.ok());
    std::vector<uint64_t> order;
    std::mutex mu;
    std::vector<std::future<void>> waits;
    for (uint64_t i = 0; i < 500; ++i) {
      auto p = std::make_shared<std::promise<void>>();
      waits.push_back(p->get_future());
      (*wal)->Append(Record(i), [&, i, p](absl::Status s) {
        EXPECT_TRUE(s.ok());
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
        p->set_value();
      });
    }
    for (auto& w : waits) w.wait();
    for (uint64_t i = 0; i < 500; ++i) ASSERT_EQ(order[i], i);
    // Group commit: far fewer fsyncs than records.
    EXPECT_LT(fs.syncs.load(), 500);
    ASSERT_TRUE((*wal)->Close().ok());
  }
  absl::Status status;
  uint64_t truncated = 1;
  auto ids = Replay(&fs, path, &status, &truncated);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(truncated, 0u);
  ASSERT_EQ(ids.size(), 500u);
  EXPECT_EQ(ids[499], 499u);
}

TEST(Wal, TornTailIsTruncatedAtEveryCutPoint) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.log");
  {
    auto wal = Wal::Open(DefaultFileSystem(), path, {});
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE(AppendAndWait(**wal, Record(1)).ok());
    ASSERT_TRUE(AppendAndWait(**wal, Record(2)).ok());
  }
  const std::string full = *ReadFileToString(DefaultFileSystem(), path);
  const size_t one_record = Record(1).size();
  for (size_t cut = full.size() - one_record + 1; cut < full.size(); ++cut) {
    ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, full.substr(0, cut)).ok());
    absl::Status status;
    uint64_t truncated = 0;
    auto ids = Replay(DefaultFileSystem(), path, &status, &truncated);
    ASSERT_TRUE(status.ok()) << "cut " << cut << ": " << status;
    EXPECT_EQ(ids, std::vector<uint64_t>({1})) << "cut " << cut;
    EXPECT_EQ(truncated, cut - (full.size() - one_record));
    EXPECT_EQ(*DefaultFileSystem()->FileSize(path), full.size() - one_record);
  }
}

TEST(Wal, CorruptTailRecordIsTruncatedButCorruptionBeforeMoreDataIsDataLoss) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.log");
  {
    auto wal = Wal::Open(DefaultFileSystem(), path, {});
    ASSERT_TRUE(wal.ok());
    for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(AppendAndWait(**wal, Record(i)).ok());
  }
  std::string full = *ReadFileToString(DefaultFileSystem(), path);
  const size_t rec = Record(1).size();

  std::string bad_tail = full;
  bad_tail[bad_tail.size() - 1] ^= 0x55;  // last record's payload
  ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, bad_tail).ok());
  absl::Status status;
  uint64_t truncated = 0;
  auto ids = Replay(DefaultFileSystem(), path, &status, &truncated);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(ids, std::vector<uint64_t>({1, 2}));
  EXPECT_EQ(truncated, rec);

  std::string bad_middle = full;
  bad_middle[kWalFileHeaderSize + rec + rec - 1] ^= 0x55;  // second record's payload
  ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, bad_middle).ok());
  Replay(DefaultFileSystem(), path, &status, &truncated);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(*DefaultFileSystem()->FileSize(path), full.size());  // nothing was cut

  ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, "NOTAWAL!00000000").ok());
  Replay(DefaultFileSystem(), path, &status, &truncated);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
}

TEST(Wal, AFailedFsyncFailsTheBatchAndEveryLaterAppend) {
  testing::TempDir dir;
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto wal = Wal::Open(&fs, dir.Sub("w.log"), {});
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE(AppendAndWait(**wal, Record(1)).ok());
  fs.fail_sync = true;
  EXPECT_FALSE(AppendAndWait(**wal, Record(2)).ok());
  fs.fail_sync = false;
  absl::Status later = AppendAndWait(**wal, Record(3));
  EXPECT_FALSE(later.ok());
  EXPECT_NE(later.message().find("read-only"), std::string::npos);
}

TEST(Wal, FullDiskFailsTheAppend) {
  testing::TempDir dir;
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto wal = Wal::Open(&fs, dir.Sub("w.log"), {});
  ASSERT_TRUE(wal.ok());
  fs.fail_append = true;
  EXPECT_EQ(AppendAndWait(**wal, Record(1)).code(), absl::StatusCode::kResourceExhausted);
}

TEST(Wal, AppendAfterCloseIsUnavailableAndPendingBytesAreBounded) {
  testing::TempDir dir;
  WalOptions options;
  options.max_pending_bytes = 1;  // the first record is always accepted
  std::atomic<int> syncs{0};
  options.on_sync = [&](double) { syncs.fetch_add(1); };
  auto wal = Wal::Open(DefaultFileSystem(), dir.Sub("w.log"), options);
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE(AppendAndWait(**wal, Record(1)).ok());
  EXPECT_GE(syncs.load(), 1);
  ASSERT_TRUE((*wal)->Close().ok());
  EXPECT_EQ(AppendAndWait(**wal, Record(2)).code(), absl::StatusCode::kUnavailable);
}

TEST(Wal, TornWriteFromACrashIsRecoveredAsATornTail) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.log");
  testing::FaultyFileSystem fs(DefaultFileSystem());
  {
    auto wal = Wal::Open(&fs, path, {});
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE(AppendAndWait(**wal, Record(1)).ok());
    fs.torn_append_bytes = 5;
    fs.fail_truncate = true;  // the process dies before it can cut the torn bytes
    EXPECT_FALSE(AppendAndWait(**wal, Record(2)).ok());  // never acknowledged
  }
  absl::Status status;
  uint64_t truncated = 0;
  auto ids = Replay(DefaultFileSystem(), path, &status, &truncated);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(ids, std::vector<uint64_t>({1}));
  EXPECT_EQ(truncated, 5u);
}

TEST(Wal, AFailedAppendCutsItsBytesSoTheFileEndsOnTheLastDurableRecord) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.log");
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto wal = Wal::Open(&fs, path, {});
  ASSERT_TRUE(wal.ok());
  ASSERT_TRUE(AppendAndWait(**wal, Record(1)).ok());
  const uint64_t durable = *fs.FileSize(path);
  EXPECT_EQ((*wal)->file_bytes(), durable);
  fs.Inject({.op = testing::FaultyFileSystem::Op::kAppend, .torn_bytes = 7});
  EXPECT_EQ(AppendAndWait(**wal, Record(2)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*fs.FileSize(path), durable);
}

TEST(Wal, AFullDiskAnswersDiskFullAndOtherIoErrorsUnavailableForEveryLaterAppend) {
  struct Case {
    testing::FaultyFileSystem::Fault fault;
    absl::StatusCode code;
    const char* text;
  };
  using Op = testing::FaultyFileSystem::Op;
  for (const Case& c : {Case{{.op = Op::kAppend, .error = testing::Enospc()},
                             absl::StatusCode::kResourceExhausted,
                             "disk full"},
                        Case{{.op = Op::kSync, .error = testing::Eio()},
                             absl::StatusCode::kUnavailable,
                             "read-only until restart"},
                        Case{{.op = Op::kAppend, .error = testing::Eio()},
                             absl::StatusCode::kUnavailable,
                             "read-only until restart"}}) {
    testing::TempDir dir;
    testing::FaultyFileSystem fs(DefaultFileSystem());
    auto wal = Wal::Open(&fs, dir.Sub("w.log"), {});
    ASSERT_TRUE(wal.ok());
    testing::FaultyFileSystem::Fault fault = c.fault;
    fault.times = 1;  // the disk recovers at once; the WAL must not
    fs.Inject(fault);
    for (uint64_t id : {1, 2}) {
      absl::Status s = AppendAndWait(**wal, Record(id));
      EXPECT_EQ(s.code(), c.code) << s;
      EXPECT_NE(s.message().find(c.text), std::string::npos) << s;
    }
    EXPECT_EQ((*wal)->health().code(), c.code);
  }
}

TEST(Wal, CloseReportsAnEarlierWriteFailure) {
  testing::TempDir dir;
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto wal = Wal::Open(&fs, dir.Sub("w.log"), {});
  ASSERT_TRUE(wal.ok());
  fs.Inject({.op = testing::FaultyFileSystem::Op::kAppend, .times = 1});
  EXPECT_FALSE(AppendAndWait(**wal, Record(1)).ok());
  EXPECT_EQ((*wal)->Close().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*wal)->Close().code(), absl::StatusCode::kResourceExhausted);  // idempotent
}

TEST(Wal, AFileWhoseHeaderWasCutShortIsStartedAfresh) {
  testing::TempDir dir;
  const std::string path = dir.Sub("w.log");
  // A full disk while a new WAL file got its header: 5 of its 16 bytes made it.
  {
    auto file = DefaultFileSystem()->NewAppendableFile(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append(EncodeWalFileHeader().substr(0, 5)).ok());
  }
  {
    auto wal = Wal::Open(DefaultFileSystem(), path, {});
    ASSERT_TRUE(wal.ok());
    ASSERT_TRUE(AppendAndWait(**wal, Record(7)).ok());
    ASSERT_TRUE((*wal)->Close().ok());
  }
  absl::Status status;
  uint64_t truncated = 0;
  auto ids = Replay(DefaultFileSystem(), path, &status, &truncated);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ids, std::vector<uint64_t>({7}));
}

}  // namespace
}  // namespace shoal::storage::wal_test
