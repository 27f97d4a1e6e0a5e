#include "storage/collection/catalog.h"

#include <future>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/faulty_file_system.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::catalog_test {
namespace {

using ::testing::HasSubstr;

CollectionManifest Manifest(const std::string& name, uint32_t dim) {
  CollectionManifest m;
  m.name = name;
  m.dim = dim;
  m.metric = core::Metric::kL2;
  return m;
}

absl::StatusOr<uint64_t> Upsert(Collection& c, std::vector<PointRecord> points) {
  std::promise<absl::StatusOr<uint64_t>> done;
  c.Upsert(std::move(points), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
  return done.get_future().get();
}

// Flips one bit in the middle of a file, as a bad sector or a stray write would.
void FlipByte(const std::string& path) {
  auto bytes = ReadFileToString(DefaultFileSystem(), path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  (*bytes)[bytes->size() / 2] ^= 0x10;
  ASSERT_TRUE(WriteFileAtomically(DefaultFileSystem(), path, *bytes).ok());
}

// A file system whose directory fsyncs block, once armed, until the test releases them: a
// Create or Drop parked inside its fsync, deterministically.
class BlockingSyncFileSystem final : public FileSystemWrapper {
 public:
  BlockingSyncFileSystem() : FileSystemWrapper(DefaultFileSystem()) {}

  absl::Status SyncDir(const std::string& path) override {
    {
      absl::MutexLock lock(&mu_);
      if (armed_) {
        ++blocked_;
        mu_.Await(absl::Condition(
            +[](bool* armed) { return !*armed; }, &armed_));
      }
    }
    return target()->SyncDir(path);
  }

  void Arm() {
    absl::MutexLock lock(&mu_);
    armed_ = true;
  }
  // Returns once some SyncDir is parked.
  void WaitUntilBlocked() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* blocked) { return *blocked > 0; }, &blocked_));
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    armed_ = false;
  }

 private:
  absl::Mutex mu_;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  int blocked_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(Catalog, CreatesListsDropsAndReopens) {
  testing::TempDir dir;
  {
    auto catalog = Catalog::Open(DefaultFileSystem(), dir.path(), {});
    ASSERT_TRUE(catalog.ok());
    ASSERT_TRUE((*catalog)->Create(Manifest("b", 2)).ok());
    ASSERT_TRUE((*catalog)->Create(Manifest("a", 3)).ok());
    EXPECT_EQ((*catalog)->Create(Manifest("a", 3)).status().code(),
              absl::StatusCode::kAlreadyExists);
    auto a = (*catalog)->Find("a");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(Upsert(**a, {{5, {1, 2, 3}, ""}}).ok());
    auto list = (*catalog)->List();
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0]->name(), "a");
    ASSERT_TRUE((*catalog)->Drop("b").ok());
    EXPECT_EQ((*catalog)->Drop("b").code(), absl::StatusCode::kNotFound);
    EXPECT_EQ((*catalog)->Find("b").status().code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE((*catalog)->Close().ok());
  }
  // A crash mid-create leaves a staging directory; reopening removes it.
  ASSERT_TRUE(DefaultFileSystem()->CreateDirs(dir.Sub("collections/.creating-x/wal")).ok());
  auto catalog = Catalog::Open(DefaultFileSystem(), dir.path(), {});
  ASSERT_TRUE(catalog.ok());
  EXPECT_EQ((*catalog)->List().size(), 1u);
  EXPECT_EQ((*(*catalog)->Find("a"))->Stats().num_vectors, 1u);
  EXPECT_FALSE(DefaultFileSystem()->Exists(dir.Sub("collections/.creating-x")));
  EXPECT_FALSE(DefaultFileSystem()->Exists(dir.Sub("collections/b")));
}

TEST(Catalog, ACollectionWhoseWalFailedStillDrops) {
  testing::TempDir dir;
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto catalog = Catalog::Open(&fs, dir.path(), {});
  ASSERT_TRUE(catalog.ok());
  ASSERT_TRUE((*catalog)->Create(Manifest("a", 3)).ok());
  auto a = (*catalog)->Find("a");
  ASSERT_TRUE(a.ok());
  fs.fail_append = true;  // the disk is full: the collection turns read-only
  EXPECT_FALSE(Upsert(**a, {{5, {1, 2, 3}, ""}}).ok());
  fs.fail_append = false;
  ASSERT_TRUE((*catalog)->Drop("a").ok());
  EXPECT_EQ((*catalog)->Find("a").status().code(), absl::StatusCode::kNotFound);
  auto left = DefaultFileSystem()->ListDir(dir.Sub("collections"));
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << (*left)[0];
}

TEST(Catalog, ACorruptManifestLeavesThatCollectionBrokenAndOpensTheOthers) {
  testing::TempDir dir;
  {
    auto catalog = Catalog::Open(DefaultFileSystem(), dir.path(), {});
    ASSERT_TRUE((*catalog)->Create(Manifest("good", 2)).ok());
    ASSERT_TRUE((*catalog)->Create(Manifest("bad", 2)).ok());
  }
  const std::string manifest = dir.Sub("collections/bad/MANIFEST-000001");
  FlipByte(manifest);

  auto catalog = Catalog::Open(DefaultFileSystem(), dir.path(), {});
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  ASSERT_TRUE((*catalog)->Find("good").ok());
  auto bad = (*catalog)->Find("bad");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(manifest));
  ASSERT_EQ((*catalog)->List().size(), 1u);
  auto broken = (*catalog)->Broken();
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(broken[0].name, "bad");
  EXPECT_THAT(std::string(broken[0].error.message()), HasSubstr(manifest));
  EXPECT_FALSE(broken[0].manifest.has_value());  // the manifest is what is corrupt

  // The name stays taken until the broken collection is dropped; Drop removes its files.
  EXPECT_EQ((*catalog)->Create(Manifest("bad", 2)).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE((*catalog)->Drop("bad").ok());
  EXPECT_FALSE(DefaultFileSystem()->Exists(dir.Sub("collections/bad")));
  EXPECT_EQ((*catalog)->Find("bad").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*catalog)->Broken().empty());
  EXPECT_TRUE((*catalog)->Create(Manifest("bad", 2)).ok());
}

TEST(Catalog, FindAnswersWhileACreateWaitsInsideFsync) {
  testing::TempDir dir;
  BlockingSyncFileSystem fs;
  auto catalog = Catalog::Open(&fs, dir.path(), {});
  ASSERT_TRUE(catalog.ok());
  ASSERT_TRUE((*catalog)->Create(Manifest("a", 2)).ok());
  fs.Arm();
  auto creating =
      std::async(std::launch::async, [&] { return (*catalog)->Create(Manifest("b", 2)); });
  {
    testing::Watchdog watchdog(std::chrono::seconds(60), "SyncDir parked");
    fs.WaitUntilBlocked();
  }
  {
    // Before: the catalog mutex was held across the fsync, so these waited for it.
    testing::Watchdog watchdog(std::chrono::seconds(60), "lookups during a blocked Create");
    EXPECT_TRUE((*catalog)->Find("a").ok());
    EXPECT_EQ((*catalog)->Find("b").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ((*catalog)->List().size(), 1u);
    // The name is reserved: a second Create of it fails at once, never twice successful.
    EXPECT_EQ((*catalog)->Create(Manifest("b", 2)).status().code(),
              absl::StatusCode::kAlreadyExists);
  }
  fs.Release();
  ASSERT_TRUE(creating.get().ok());
  EXPECT_TRUE((*catalog)->Find("b").ok());
}

TEST(Catalog, FindAnswersWhileADropWaitsInsideFsync) {
  testing::TempDir dir;
  BlockingSyncFileSystem fs;
  auto catalog = Catalog::Open(&fs, dir.path(), {});
  ASSERT_TRUE(catalog.ok());
  ASSERT_TRUE((*catalog)->Create(Manifest("a", 2)).ok());
  ASSERT_TRUE((*catalog)->Create(Manifest("b", 2)).ok());
  fs.Arm();
  auto dropping = std::async(std::launch::async, [&] { return (*catalog)->Drop("a"); });
  {
    testing::Watchdog watchdog(std::chrono::seconds(60), "SyncDir parked");
    fs.WaitUntilBlocked();
  }
  {
    testing::Watchdog watchdog(std::chrono::seconds(60), "lookups during a blocked Drop");
    EXPECT_TRUE((*catalog)->Find("b").ok());
    EXPECT_EQ((*catalog)->Find("a").status().code(), absl::StatusCode::kNotFound);
    // Its directory is still being renamed away: a Create of the name must wait and retry.
    EXPECT_EQ((*catalog)->Create(Manifest("a", 2)).status().code(), absl::StatusCode::kUnavailable);
  }
  fs.Release();
  ASSERT_TRUE(dropping.get().ok());
  EXPECT_FALSE(fs.Exists(dir.Sub("collections/a")));
  EXPECT_TRUE((*catalog)->Create(Manifest("a", 2)).ok());
}

TEST(Catalog, ConcurrentCreatesOfOneNameGiveExactlyOneSuccess) {
  testing::TempDir dir;
  auto catalog = Catalog::Open(DefaultFileSystem(), dir.path(), {});
  ASSERT_TRUE(catalog.ok());
  testing::Watchdog watchdog(std::chrono::seconds(120), "concurrent creates");
  std::vector<std::future<absl::StatusOr<std::shared_ptr<Collection>>>> creates;
  for (int i = 0; i < 8; ++i) {
    creates.push_back(
        std::async(std::launch::async, [&] { return (*catalog)->Create(Manifest("x", 2)); }));
  }
  int ok = 0;
  for (auto& c : creates) {
    auto created = c.get();
    if (created.ok()) {
      ++ok;
    } else {
      EXPECT_EQ(created.status().code(), absl::StatusCode::kAlreadyExists) << created.status();
    }
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ((*catalog)->List().size(), 1u);
}

}  // namespace
}  // namespace shoal::storage::catalog_test
