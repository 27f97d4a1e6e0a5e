// A full disk and failed fsyncs at every write site of a collection (WAL append, WAL rotation,
// segment write, manifest install), and the leftovers of crashes: nothing acknowledged is
// lost, a failed WAL keeps the collection read-only until restart, and Collection::Open on the
// real file system always succeeds afterwards.
#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/exec/manual_executor.h"
#include "core/exec/tbb_executor.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "storage/collection/manifest_store.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/faulty_file_system.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::collection_disk_test {
namespace {

using testing::DeleteAndWait;
using testing::UpsertAndWait;

using Fault = testing::FaultyFileSystem::Fault;
using Op = testing::FaultyFileSystem::Op;

constexpr uint32_t kDim = 4;

std::vector<PointRecord> Points(uint64_t first, uint64_t n) {
  std::vector<PointRecord> points;
  for (uint64_t id = first; id < first + n; ++id) {
    points.push_back({id, {float(id % 7), float(id % 11), float(id % 13), float(id)}, ""});
  }
  return points;
}

class CollectionDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto scheduler = testing::BufferedPreadScheduler();
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    io_ = *std::move(scheduler);
  }

  CollectionOptions Options() {
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = &cache_;
    return options;
  }

  std::unique_ptr<Collection> Create() {
    CollectionManifest m;
    m.name = "c";
    m.dim = kDim;
    m.index.type = core::IndexType::kIvfFlat;
    m.index.nlist = 4;
    auto c = Collection::Create(&fs_, path_, m, Options());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Upserts [first, first + n); on success the ids count as acknowledged.
  absl::Status Write(Collection& c, uint64_t first, uint64_t n) {
    absl::Status s = UpsertAndWait(c, Points(first, n));
    if (s.ok()) {
      for (uint64_t id = first; id < first + n; ++id) acked_.insert(id);
    }
    return s;
  }

  // Opens the collection on the real file system and checks that every acknowledged id is
  // there with its vector, and nothing else.
  std::unique_ptr<Collection> ReopenAndCheck() {
    auto c = Collection::Open(DefaultFileSystem(), path_, Options());
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    std::vector<uint64_t> ids(acked_.begin(), acked_.end());
    auto got = (*c)->Get(ids, true);
    EXPECT_EQ(got.size(), ids.size());
    for (const StoredPoint& p : got) {
      EXPECT_TRUE(acked_.count(p.id)) << p.id;
      EXPECT_EQ(p.vector, Points(p.id, 1)[0].vector) << p.id;
    }
    EXPECT_EQ((*c)->Stats().num_vectors, acked_.size());
    return *std::move(c);
  }

  std::vector<std::string> Entries(const std::string& sub = "") {
    auto names = DefaultFileSystem()->ListDir(sub.empty() ? path_ : path_ + "/" + sub);
    return names.ok() ? *names : std::vector<std::string>{};
  }
  size_t SegmentDirs() {
    auto names = Entries();
    return size_t(std::count_if(names.begin(), names.end(),
                                [](const std::string& n) { return n.rfind("seg-", 0) == 0; }));
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.Sub("c");
  testing::FaultyFileSystem fs_{DefaultFileSystem()};
  std::unique_ptr<IoScheduler> io_;
  PartitionCache cache_{64 << 20};
  core::TbbExecutor cpu_{1};
  std::set<uint64_t> acked_;
};

struct WalFault {
  const char* name;
  Fault fault;
  absl::StatusCode code;
};

class WalAppendFaultTest : public CollectionDiskTest,
                           public ::testing::WithParamInterface<WalFault> {};

TEST_P(WalAppendFaultTest, AFailedWalWriteKeepsTheCollectionReadOnlyWhateverMaintenanceRuns) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 50).ok());
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());
  ASSERT_TRUE(Write(*c, 51, 10).ok());

  Fault fault = GetParam().fault;
  fault.path_part = "/wal/";
  fault.times = 1;  // the disk has room again right after: only the WAL remembers
  fs_.Inject(fault);
  absl::Status failed = Write(*c, 61, 10);
  EXPECT_EQ(failed.code(), GetParam().code) << failed;
  EXPECT_EQ(fs_.injected(), 1);

  EXPECT_EQ(Write(*c, 71, 1).code(), GetParam().code);
  EXPECT_FALSE(c->BuildIndex(cpu_).ok());
  EXPECT_FALSE(c->Flush(cpu_).ok());
  EXPECT_EQ(Write(*c, 72, 1).code(), GetParam().code);
  EXPECT_EQ(DeleteAndWait(*c, {1}).code(), GetParam().code);
  EXPECT_EQ(c->write_health().code(), GetParam().code);
  EXPECT_EQ(c->Close().code(), GetParam().code);
  c.reset();

  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(reopened->Get(std::vector<uint64_t>{61, 71, 72}, false).empty());
  EXPECT_TRUE(Write(*reopened, 100, 5).ok());  // a restart with room makes it writable
}

INSTANTIATE_TEST_SUITE_P(
    Faults, WalAppendFaultTest,
    ::testing::Values(WalFault{"EnospcTorn",
                               {.op = Op::kAppend, .error = testing::Enospc(), .torn_bytes = 9},
                               absl::StatusCode::kResourceExhausted},
                      WalFault{"FsyncEio",
                               {.op = Op::kSync, .error = testing::Eio()},
                               absl::StatusCode::kUnavailable}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CollectionDiskTest, ATornWalWriteFollowedByAFailedRotationNeverCorruptsTheWal) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 10).ok());
  // The failed write leaves torn bytes that cannot be cut (the disk is failing), and the
  // rotation a build starts cannot create its file either.
  fs_.fail_truncate = true;
  fs_.Inject({.op = Op::kAppend, .path_part = "wal/000001.log", .torn_bytes = 9, .times = 1});
  fs_.Inject({.op = Op::kAppend, .path_part = "wal/000002.log", .times = 1});
  EXPECT_EQ(Write(*c, 11, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(c->BuildIndex(cpu_).ok());
  // Nothing may be appended after the torn bytes.
  EXPECT_EQ(Write(*c, 12, 1).code(), absl::StatusCode::kResourceExhausted);
  c.reset();
  fs_.fail_truncate = false;
  ReopenAndCheck();
}

class WalRotateFaultTest : public CollectionDiskTest,
                           public ::testing::WithParamInterface<WalFault> {};

TEST_P(WalRotateFaultTest, AFailedWalRotationFailsTheBuildAndTheOldWalKeepsTakingWrites) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 50).ok());
  Fault fault = GetParam().fault;
  fault.path_part = "wal/000002.log";
  fault.times = 1;
  fs_.Inject(fault);
  absl::StatusOr<std::string> built = c->BuildIndex(cpu_);
  EXPECT_EQ(built.status().code(), GetParam().code) << built.status();
  EXPECT_EQ(fs_.injected(), 1);
  EXPECT_EQ(Entries("wal"), std::vector<std::string>({"000001.log"}));  // no half-made file
  ASSERT_TRUE(Write(*c, 51, 10).ok());
  // The disk has room again: the next build rotates into a clean file.
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());
  ASSERT_TRUE(Write(*c, 61, 10).ok());
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->Stats().num_indexed, 60u);
}

INSTANTIATE_TEST_SUITE_P(
    Faults, WalRotateFaultTest,
    ::testing::Values(WalFault{"EnospcTornHeader",
                               {.op = Op::kAppend, .error = testing::Enospc(), .torn_bytes = 5},
                               absl::StatusCode::kResourceExhausted},
                      WalFault{"FsyncEio",
                               {.op = Op::kSync, .error = testing::Eio()},
                               absl::StatusCode::kUnavailable}),
    [](const auto& info) { return std::string(info.param.name); });

// Walks one fault through every matching operation of a build in turn (the 1st, the 2nd, ...
// until a build goes through untouched): each failed build reports the disk error, leaves no
// segment directory or manifest behind and the collection writable; at the end a reopen finds
// every acknowledged write.
class BuildFaultTest : public CollectionDiskTest, public ::testing::WithParamInterface<WalFault> {};

TEST_P(BuildFaultTest, EveryFailedWriteSiteOfABuildLosesNothingAndLeavesNothingBehind) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());  // seg-1, MANIFEST-000002
  uint64_t next = 41;
  int sites = 0;
  for (int after = 0; after < 50; ++after) {
    SCOPED_TRACE(absl::StrCat("failing matching operation #", after + 1));
    ASSERT_TRUE(Write(*c, next, 10).ok());
    next += 10;
    Fault fault = GetParam().fault;
    fault.after = after;
    fault.times = 1;
    fs_.ClearFaults();
    const int injected = fs_.injected();
    fs_.Inject(fault);
    // Alternate the two kinds of build: Flush writes a segment from the memtable, BuildIndex
    // retrains over everything.
    absl::StatusOr<std::string> built = after % 2 ? c->Flush(cpu_) : c->BuildIndex(cpu_);
    if (fs_.injected() == injected) {
      ASSERT_TRUE(built.ok()) << built.status();
      break;  // every matching operation of a build has failed once
    }
    ++sites;
    EXPECT_EQ(built.status().code(), GetParam().code) << built.status();
    EXPECT_EQ(SegmentDirs(), 1u) << "a failed build left its segment directory";
    const uint64_t number = c->manifest_number();
    EXPECT_EQ(Entries().size(), 4u) << "CURRENT, MANIFEST-" << number << ", wal, seg-*";
    EXPECT_TRUE(DefaultFileSystem()->Exists(path_ + "/" + ManifestFileName(number)));
    ASSERT_TRUE(Write(*c, next, 10).ok()) << "a failed build must not make it read-only";
    next += 10;
  }
  EXPECT_GE(sites, 1);
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  ReopenAndCheck();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, BuildFaultTest,
    ::testing::Values(
        WalFault{"SegmentEnospc",
                 {.op = Op::kAppend,
                  .path_part = "/seg-",
                  .error = testing::Enospc(),
                  .torn_bytes = 100},
                 absl::StatusCode::kResourceExhausted},
        WalFault{"SegmentFsyncEio",
                 {.op = Op::kSync, .path_part = "/seg-", .error = testing::Eio()},
                 absl::StatusCode::kUnavailable},
        WalFault{"ManifestEnospc",
                 {.op = Op::kAppend, .path_part = "/MANIFEST-", .error = testing::Enospc()},
                 absl::StatusCode::kResourceExhausted},
        WalFault{"ManifestFsyncEio",
                 {.op = Op::kSync, .path_part = "/MANIFEST-", .error = testing::Eio()},
                 absl::StatusCode::kUnavailable},
        WalFault{"CurrentEnospc",
                 {.op = Op::kAppend, .path_part = "/CURRENT", .error = testing::Enospc()},
                 absl::StatusCode::kResourceExhausted},
        WalFault{"CurrentRenameEio",
                 {.op = Op::kRename, .path_part = "/CURRENT", .error = testing::Eio()},
                 absl::StatusCode::kUnavailable}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(CollectionDiskTest, AFailedFsyncAfterCurrentIsRenamedStillReopensWithEverything) {
  // The one ambiguous failure: CURRENT already names the new manifest when the directory fsync
  // fails, so the build reports an error yet its files must stay.
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  // Directory fsyncs of the collection directory during a build: MANIFEST-000002, CURRENT.
  fs_.Inject({.op = Op::kSyncDir,
              .path_part = path_,
              .exact_path = true,
              .after = 1,
              .error = testing::Eio(),
              .times = 1});
  EXPECT_EQ(c->BuildIndex(cpu_).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(fs_.injected(), 1);
  ASSERT_TRUE(Write(*c, 41, 10).ok());
  c.reset();
  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->Stats().num_indexed, 40u);
  EXPECT_EQ(reopened->manifest_number(), 2u);
}

TEST_F(CollectionDiskTest, EachInstallWritesTheNextManifestAndReopenKeepsCounting) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->manifest_number(), 1u);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());
  EXPECT_EQ(c->manifest_number(), 2u);
  ASSERT_TRUE(Write(*c, 41, 10).ok());
  ASSERT_TRUE(c->Flush(cpu_).ok());
  EXPECT_EQ(c->manifest_number(), 3u);
  EXPECT_EQ(Entries(),
            std::vector<std::string>({"CURRENT", "MANIFEST-000003", "seg-1", "seg-2", "wal"}));
  EXPECT_EQ(*ReadFileToString(DefaultFileSystem(), path_ + "/CURRENT"), "MANIFEST-000003\n");
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->manifest_number(), 3u);
  ASSERT_TRUE(Write(*reopened, 51, 10).ok());
  ASSERT_TRUE(reopened->Flush(cpu_).ok());
  EXPECT_EQ(reopened->manifest_number(), 4u);
  EXPECT_FALSE(DefaultFileSystem()->Exists(path_ + "/MANIFEST-000003"));
}

TEST_F(CollectionDiskTest, OpenRemovesWhatACrashBetweenInstallAndCleanupLeftBehind) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());  // seg-1, wal 2
  ASSERT_TRUE(Write(*c, 41, 10).ok());
  ASSERT_TRUE(c->Flush(cpu_).ok());  // seg-2, wal 3, MANIFEST-000003
  ASSERT_TRUE(Write(*c, 51, 10).ok());
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  const std::vector<std::string> live = Entries();
  const std::vector<std::string> live_wal = Entries("wal");
  // What a crash leaves: a replaced segment and retired WAL files not yet removed, the old
  // manifest, a build's unfinished segment, a manifest written but never named, temp files.
  FileSystem* fs = DefaultFileSystem();
  auto plant = [&](const std::string& name, const std::string& data) {
    ASSERT_TRUE(fs->CreateDirs(DirName(path_ + "/" + name)).ok());
    ASSERT_TRUE(WriteFileAtomically(fs, path_ + "/" + name, data).ok());
  };
  plant("seg-0/ivf.meta", "replaced segment");
  plant("seg-7/lists.dat", "unfinished build");
  plant("wal/000001.log", "retired WAL");
  plant("wal/000002.log", "retired WAL");
  plant("MANIFEST-000002", "old manifest");
  plant("MANIFEST-000004", "never named");
  plant("MANIFEST-000004.tmp", "half a manifest");
  plant("CURRENT.tmp", "MANIFEST-0000");
  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(Entries(), live);
  EXPECT_EQ(Entries("wal"), live_wal);
  EXPECT_EQ(reopened->manifest_number(), 3u);
  EXPECT_EQ(reopened->Stats().num_indexed, 50u);
}

TEST_F(CollectionDiskTest, OpenServesReadOnlyWhenItCannotStartTheWalFile) {
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 10).ok());
  ASSERT_TRUE(c->Close().ok());
  c.reset();
  // A crash right after a rotation created its (empty) WAL file; the disk is still full.
  ASSERT_TRUE(DefaultFileSystem()->NewAppendableFile(path_ + "/wal/000002.log").ok());
  fs_.Inject({.op = Op::kAppend, .path_part = "/wal/"});
  auto opened = Collection::Open(&fs_, path_, Options());
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->Get(std::vector<uint64_t>{1, 10}, false).size(), 2u);
  EXPECT_EQ(Write(**opened, 11, 1).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*opened)->write_health().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE((*opened)->BuildIndex(cpu_).ok());
  opened->reset();
  fs_.ClearFaults();
  auto reopened = ReopenAndCheck();
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(Write(*reopened, 11, 1).ok());
}

TEST_F(CollectionDiskTest, ManifestReadersNeverRaceAnInstall) {
  // Run under TSan: the server reads manifest() while builds install new versions.
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    uint64_t seen = 0;
    while (!stop.load()) {
      auto m = c->manifest();
      seen = std::max<uint64_t>(seen, m->segments.size() + m->first_wal_seq);
      EXPECT_EQ(m->dim, kDim);
    }
    EXPECT_GT(seen, 0u);
  });
  for (uint64_t round = 0; round < 6; ++round) {
    // EXPECT and break, not ASSERT: the reader thread must be joined on every path.
    const bool ok = Write(*c, 100 + round * 10, 10).ok() &&
                    (round % 2 ? c->Flush(cpu_).ok() : c->BuildIndex(cpu_).ok());
    EXPECT_TRUE(ok) << "round " << round;
    if (!ok) break;
  }
  stop = true;
  reader.join();
  EXPECT_EQ(c->manifest_number(), 7u);
}

}  // namespace
}  // namespace shoal::storage::collection_disk_test

namespace shoal::storage::collection_disk_test {
namespace {

// A drop renames the directory away and a new collection of the name may take it: Close must
// wait for a build that is running and refuse later ones, or the build writes into whatever is
// at the path by then.
TEST_F(CollectionDiskTest, CloseWaitsForARunningBuildAndRefusesLaterOnes) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "Close and a running build");
  auto c = Create();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(Write(*c, 1, 40).ok());
  core::ManualExecutor cpu;  // the build's CPU work runs only when the test says so
  auto build = std::async(std::launch::async, [&] { return c->BuildIndex(cpu); });
  while (cpu.queued() == 0) std::this_thread::yield();  // parked in training, lock held
  auto close = std::async(std::launch::async, [&] { return c->Close(); });
  // It cannot finish while the build holds the collection (never a false failure; without the
  // wait it returns at once).
  EXPECT_EQ(close.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  while (build.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) cpu.RunAll();
  ASSERT_TRUE(build.get().ok());
  ASSERT_TRUE(close.get().ok());
  EXPECT_EQ(SegmentDirs(), 1u);  // installed before Close returned

  absl::StatusOr<std::string> again = c->BuildIndex(cpu);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(again.status().message()).find("closed"), std::string::npos);
  EXPECT_EQ(c->Flush(cpu).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shoal::storage::collection_disk_test
