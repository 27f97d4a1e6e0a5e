#include "storage/io/file_system.h"

#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::file_system_test {
namespace {

TEST(FileSystem, AppendsReadsAndReportsSizes) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  const std::string path = dir.Sub("a.bin");
  {
    auto file = fs->NewAppendableFile(path);
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Append("hello ").ok());
    ASSERT_TRUE((*file)->Append("world").ok());
    EXPECT_EQ((*file)->size(), 11u);
    ASSERT_TRUE((*file)->Sync().ok());
    ASSERT_TRUE((*file)->Close().ok());
    ASSERT_TRUE((*file)->Close().ok());  // idempotent
  }
  {
    auto file = fs->NewAppendableFile(path);  // reopening appends
    ASSERT_TRUE(file.ok());
    EXPECT_EQ((*file)->size(), 11u);
    ASSERT_TRUE((*file)->Append("!").ok());
  }
  EXPECT_EQ(*ReadFileToString(fs, path), "hello world!");
  EXPECT_EQ(*fs->FileSize(path), 12u);
  auto reader = fs->NewRandomAccessFile(path);
  ASSERT_TRUE(reader.ok());
  char buf[16];
  EXPECT_EQ(*(*reader)->Read(6, 5, buf), 5u);
  EXPECT_EQ(std::string(buf, 5), "world");
  EXPECT_EQ(*(*reader)->Read(10, 16, buf), 2u);  // short at EOF
  ASSERT_TRUE(fs->Truncate(path, 5).ok());
  EXPECT_EQ(*ReadFileToString(fs, path), "hello");
}

TEST(FileSystem, ReadIfCachedReadsOnlyWhatCannotBlock) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  const std::string path = dir.Sub("c.bin");
  const std::string data(64 << 10, 'x');
  ASSERT_TRUE(WriteFileAtomically(fs, path, data).ok());
  auto reader = fs->NewRandomAccessFile(path);
  ASSERT_TRUE(reader.ok());
  std::string buf(100, '\0');
  ASSERT_EQ(*(*reader)->Read(1000, 100, buf.data()), 100u);  // now in the page cache
  buf.assign(100, '\0');
  EXPECT_TRUE((*reader)->ReadIfCached(1000, 100, buf.data()));
  EXPECT_EQ(buf, std::string(100, 'x'));
  EXPECT_FALSE((*reader)->ReadIfCached(data.size() - 10, 100, buf.data()));  // short: past EOF
}

TEST(FileSystem, MapsErrnoToStatusCodesWithThePath) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  auto missing = fs->NewRandomAccessFile(dir.Sub("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  EXPECT_EQ(fs->FileSize(dir.Sub("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs->Rename(dir.Sub("nope"), dir.Sub("x")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(fs->ListDir(dir.Sub("nope")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs->SyncDir(dir.Sub("nope")).ok());
  EXPECT_FALSE(fs->Truncate(dir.Sub("nope"), 0).ok());
}

TEST(FileSystem, DirectoriesListSortedAndRemoveRecursively) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  ASSERT_TRUE(fs->CreateDirs(dir.Sub("x/y/z")).ok());
  ASSERT_TRUE(WriteFileAtomically(fs, dir.Sub("x/b"), "2").ok());
  ASSERT_TRUE(WriteFileAtomically(fs, dir.Sub("x/a"), "1").ok());
  EXPECT_EQ(*fs->ListDir(dir.Sub("x")), std::vector<std::string>({"a", "b", "y"}));
  EXPECT_TRUE(fs->Exists(dir.Sub("x/y/z")));
  ASSERT_TRUE(fs->RemoveAll(dir.Sub("x")).ok());
  EXPECT_FALSE(fs->Exists(dir.Sub("x")));
  EXPECT_TRUE(fs->RemoveAll(dir.Sub("x")).ok());  // already gone is fine
}

TEST(FileSystem, WriteFileAtomicallyReplacesWholeFiles) {
  testing::TempDir dir;
  FileSystem* fs = DefaultFileSystem();
  const std::string path = dir.Sub("CURRENT");
  ASSERT_TRUE(WriteFileAtomically(fs, path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(fs, path, "second").ok());
  EXPECT_EQ(*ReadFileToString(fs, path), "second");
  EXPECT_FALSE(fs->Exists(path + ".tmp"));
}

TEST(FileSystem, PathHelpers) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(DirName("a/b/c"), "a/b");
  EXPECT_EQ(DirName("c"), ".");
  EXPECT_EQ(DirName("/c"), "/");
}

}  // namespace
}  // namespace shoal::storage::file_system_test
