#include "storage/collection/collection.h"

#include <future>

#include "gtest/gtest.h"
#include "storage/collection/manifest_store.h"
#include "tests/fakes/faulty_file_system.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::collection_test {
namespace {

CollectionManifest Manifest(const std::string& name, uint32_t dim,
                            core::Metric metric = core::Metric::kL2) {
  CollectionManifest m;
  m.name = name;
  m.dim = dim;
  m.metric = metric;
  return m;
}

absl::StatusOr<uint64_t> Upsert(Collection& c, std::vector<PointRecord> points) {
  std::promise<absl::StatusOr<uint64_t>> done;
  c.Upsert(std::move(points), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
  return done.get_future().get();
}

absl::StatusOr<uint64_t> Delete(Collection& c, std::vector<uint64_t> ids) {
  std::promise<absl::StatusOr<uint64_t>> done;
  c.Delete(std::move(ids), [&](absl::StatusOr<uint64_t> n) { done.set_value(n); });
  return done.get_future().get();
}

TEST(Collection, WritesAreVisibleWhenAcknowledgedAndSurviveReopen) {
  testing::TempDir dir;
  const std::string path = dir.Sub("c");
  {
    auto c = Collection::Create(DefaultFileSystem(), path, Manifest("c", 2), {});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(*Upsert(**c, {{1, {1, 1}, ""}, {2, {2, 2}, "a"}, {3, {3, 3}, ""}}), 3u);
    EXPECT_EQ((*c)->SearchView().memtable.rows(), 3u);  // read-after-write
    EXPECT_EQ(*Delete(**c, {2, 42}), 1u);
    EXPECT_EQ(*Upsert(**c, {{1, {9, 9}, ""}}), 1u);
    auto got = (*c)->Get(std::vector<uint64_t>{3, 2, 1}, true);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].id, 3u);
    EXPECT_EQ(got[1].vector, std::vector<float>({9, 9}));
    EXPECT_EQ((*c)->Stats().num_vectors, 2u);
    EXPECT_EQ((*c)->Stats().stored_rows, 4u);  // the deleted and the overwritten rows too
    EXPECT_GT((*c)->Stats().disk_bytes, 0u);
    ASSERT_TRUE((*c)->Close().ok());
  }
  auto c = Collection::Open(DefaultFileSystem(), path, {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Stats().num_vectors, 2u);
  EXPECT_EQ((*c)->Get(std::vector<uint64_t>{1}, true)[0].vector, std::vector<float>({9, 9}));
  EXPECT_TRUE((*c)->Get(std::vector<uint64_t>{2}, false).empty());
  EXPECT_EQ((*c)->manifest()->dim, 2u);
}

TEST(Collection, CosineVectorsAreNormalisedAtInsert) {
  testing::TempDir dir;
  auto c = Collection::Create(DefaultFileSystem(), dir.Sub("c"),
                              Manifest("c", 2, core::Metric::kCosine), {});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(Upsert(**c, {{1, {3, 4}, ""}}).ok());
  auto v = (*c)->Get(std::vector<uint64_t>{1}, true)[0].vector;
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
}

TEST(Collection, AFailedFsyncIsReportedAndNothingIsApplied) {
  testing::TempDir dir;
  testing::FaultyFileSystem fs(DefaultFileSystem());
  auto c = Collection::Create(&fs, dir.Sub("c"), Manifest("c", 2), {});
  ASSERT_TRUE(c.ok());
  fs.fail_sync = true;
  EXPECT_FALSE(Upsert(**c, {{1, {1, 1}, ""}}).ok());
  EXPECT_FALSE(Delete(**c, {1}).ok());
  EXPECT_EQ((*c)->Stats().num_vectors, 0u);
}

TEST(Collection, CreateRefusesAnExistingDirectoryAndOpenNeedsAManifest) {
  testing::TempDir dir;
  ASSERT_TRUE(DefaultFileSystem()->CreateDirs(dir.Sub("c")).ok());
  EXPECT_EQ(
      Collection::Create(DefaultFileSystem(), dir.Sub("c"), Manifest("c", 2), {}).status().code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Collection::Open(DefaultFileSystem(), dir.Sub("c"), {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ManifestStore, InstallsNewVersionsAndRemovesTheOld) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  auto n1 = InstallManifest(fs, dir.path(), Manifest("a", 3), 0);
  ASSERT_TRUE(n1.ok());
  auto m = Manifest("a", 3);
  m.first_wal_seq = 2;
  auto n2 = InstallManifest(fs, dir.path(), m, *n1);
  ASSERT_TRUE(n2.ok());
  auto loaded = LoadManifest(fs, dir.path());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->number, 2u);
  EXPECT_EQ(loaded->manifest.first_wal_seq, 2u);
  EXPECT_FALSE(fs->Exists(dir.Sub("MANIFEST-000001")));
  ASSERT_TRUE(WriteFileAtomically(fs, dir.Sub("CURRENT"), "garbage\n").ok());
  EXPECT_EQ(LoadManifest(fs, dir.path()).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shoal::storage::collection_test
