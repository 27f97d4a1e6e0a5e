// End to end on a real full disk: shoald's data directory is a loop-mounted 32 MiB ext4 image.
// Upserts fill it until writes are refused (RESOURCE_EXHAUSTED or UNAVAILABLE, never OK and
// then lost); BuildIndex and Flush on the full disk may fail but the server stays up; after a
// SIGKILL the image is grown and shoald restarts with every acknowledged write, and searches
// that probe every partition match an exact search over the acknowledged vectors.
//
// Needs root (mount). Skipped when the mount is refused, except under CI (env CI set), where
// it fails. Labelled release_only: it mounts a filesystem.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal::disk_full_test {
namespace {

using testing::ShoaldProcess;

constexpr uint32_t kDim = 64;
constexpr uint32_t kNlist = 16;
constexpr uint64_t kBatch = 2000;
const char kName[] = "full";

// Runs a shell command; returns its exit status and appends its output to `*out`.
int Shell(const std::string& command, std::string* out = nullptr) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[512];
  std::string text;
  while (fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
  const int status = pclose(pipe);
  if (out) *out += absl::StrCat("$ ", command, "\n", text);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

uint64_t FreeBytes(const std::string& path) {
  struct statvfs st;
  return statvfs(path.c_str(), &st) == 0 ? uint64_t(st.f_bavail) * st.f_frsize : 0;
}

void ExpectRefusedForDisk(const absl::Status& s) {
  EXPECT_TRUE(s.code() == absl::StatusCode::kResourceExhausted ||
              s.code() == absl::StatusCode::kUnavailable)
      << s;
}

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    image_ = dir_.Sub("disk.img");
    mount_ = dir_.Sub("mnt");  // shoald's data dir; its log and ready file go beside it
    std::string log;
    const bool made = Shell("truncate -s 32M " + image_, &log) == 0 &&
                      Shell("mkfs.ext4 -q -F " + image_, &log) == 0 &&
                      Shell("mkdir -p " + mount_, &log) == 0;
    ASSERT_TRUE(made) << log;
    if (Shell(absl::StrCat("mount -o loop ", image_, " ", mount_), &log) != 0) {
      if (std::getenv("CI") != nullptr) FAIL() << "CI must be able to loop-mount:\n" << log;
      GTEST_SKIP() << "cannot loop-mount an ext4 image here (needs root):\n" << log;
    }
    mounted_ = true;
  }

  void TearDown() override {
    server_.reset();  // SIGTERM (or nothing after a kill) before the unmount
    if (mounted_) Unmount();
  }

  void Unmount() {
    std::string log;
    for (int i = 0; i < 5 && Shell("umount " + mount_, &log) != 0; ++i) sleep(1);
    if (Shell("mountpoint -q " + mount_) == 0) {
      Shell("umount -l " + mount_, &log);
      ADD_FAILURE() << "unmount needed -l:\n" << log;
    }
    mounted_ = false;
  }

  // umount; truncate -s 128M; e2fsck -fy; resize2fs; mount.
  void Grow() {
    std::string log;
    Unmount();
    ASSERT_EQ(Shell("truncate -s 128M " + image_, &log), 0) << log;
    // e2fsck exits 1 when it fixed something; only >= 4 is an error.
    ASSERT_LT(Shell("e2fsck -fy " + image_, &log), 4) << log;
    ASSERT_EQ(Shell("resize2fs " + image_, &log), 0) << log;
    ASSERT_EQ(Shell(absl::StrCat("mount -o loop ", image_, " ", mount_), &log), 0) << log;
    mounted_ = true;
  }

  void StartServer() {
    server_ = ShoaldProcess::Start(mount_, {"--cpu-threads", "2"});
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->addr());
  }

  // One batch of fresh ids with random vectors; acknowledged ones are remembered.
  absl::Status UpsertBatch() {
    std::vector<Point> points(kBatch);
    for (Point& p : points) {
      p.id = next_id_++;
      p.vector.resize(kDim);
      for (float& x : p.vector) x = gauss_(rng_);
    }
    absl::StatusOr<uint64_t> n = client_->Upsert(kName, points);
    if (n.ok()) {
      EXPECT_EQ(*n, kBatch);
      for (Point& p : points) acked_[p.id] = std::move(p.vector);
    }
    return n.status();
  }

  void ExpectServing() {
    auto health = client_->Health();
    ASSERT_TRUE(health.ok()) << health.status() << "\n" << server_->log();
    EXPECT_EQ(*health, HealthStatus::kServing);
  }

  // Upserts until a write is refused; on the way, once what is left could not hold a segment
  // of every row, a build must fail cleanly (its segment write meets the full disk), give its
  // space back and leave the collection writable.
  void FillUntilRefused() {
    absl::Status refused;
    bool built_on_full_disk = false;
    for (int i = 0; i < 200 && refused.ok(); ++i) {
      refused = UpsertBatch();
      const uint64_t free_before = FreeBytes(mount_);
      if (!refused.ok() || built_on_full_disk || free_before >= (8u << 20)) continue;
      built_on_full_disk = true;
      absl::StatusOr<std::string> built = client_->BuildIndex(kName);
      std::printf("BuildIndex with %llu bytes free: %s\n",
                  static_cast<unsigned long long>(free_before),
                  built.ok() ? built->c_str() : built.status().ToString().c_str());
      EXPECT_FALSE(built.ok()) << "a segment of every row cannot fit in what is left";
      if (!built.ok()) {
        ExpectRefusedForDisk(built.status());
        // Its new WAL file keeps a block or two.
        EXPECT_GE(FreeBytes(mount_) + (1u << 20), free_before);
      }
      ASSERT_NO_FATAL_FAILURE(ExpectServing());
    }
    ASSERT_FALSE(refused.ok()) << "the 32 MiB disk never filled";
    std::printf("disk full after %zu acknowledged points: %s\n", acked_.size(),
                refused.ToString().c_str());
    ExpectRefusedForDisk(refused);
    EXPECT_TRUE(built_on_full_disk);
    EXPECT_GT(acked_.size(), 20000u);
  }

  // Maintenance on the full disk may fail; the server stays up, and writes after it are refused
  // or acknowledged, never lost.
  void MaintainOnFullDisk() {
    absl::StatusOr<std::string> built = client_->BuildIndex(kName);
    if (!built.ok()) ExpectRefusedForDisk(built.status());
    absl::StatusOr<std::string> flushed = client_->Flush(kName);
    if (!flushed.ok()) ExpectRefusedForDisk(flushed.status());
    std::printf("on the full disk: BuildIndex %s; Flush %s\n",
                built.ok() ? "OK" : built.status().ToString().c_str(),
                flushed.ok() ? "OK" : flushed.status().ToString().c_str());
    ASSERT_NO_FATAL_FAILURE(ExpectServing());
    for (int i = 0; i < 3; ++i) {
      absl::Status again = UpsertBatch();
      if (!again.ok()) ExpectRefusedForDisk(again);
    }
  }

  // Every acknowledged id is there with its vector, and nothing else (a refused batch is cut
  // from the WAL).
  void ExpectExactlyTheAcknowledgedPoints() {
    std::vector<uint64_t> ids;
    for (const auto& [id, v] : acked_) ids.push_back(id);
    size_t found = 0;
    for (size_t begin = 0; begin < ids.size(); begin += 20000) {
      std::vector<uint64_t> chunk(ids.begin() + long(begin),
                                  ids.begin() + long(std::min(ids.size(), begin + 20000)));
      auto got = client_->Get(kName, chunk, true);
      ASSERT_TRUE(got.ok()) << got.status();
      for (const Point& p : *got) {
        auto it = acked_.find(p.id);
        ASSERT_NE(it, acked_.end()) << p.id;
        EXPECT_EQ(p.vector, it->second) << p.id;
      }
      found += got->size();
    }
    EXPECT_EQ(found, acked_.size());
    auto info = client_->DescribeCollection(kName);
    ASSERT_TRUE(info.ok()) << info.status();
    ASSERT_EQ(info->num_vectors, acked_.size());
  }

  // Probing every partition is exact: the same top 10 as brute force over what was acked.
  void ExpectSearchesMatchExactSearch() {
    for (int q = 0; q < 5; ++q) {
      std::vector<float> query(kDim);
      for (float& x : query) x = gauss_(rng_);
      std::vector<std::pair<float, uint64_t>> exact;
      for (const auto& [id, v] : acked_) {
        float d = 0;
        for (uint32_t j = 0; j < kDim; ++j) d += (v[j] - query[j]) * (v[j] - query[j]);
        exact.push_back({d, id});
      }
      std::partial_sort(exact.begin(), exact.begin() + 10, exact.end());
      auto result = client_->Search(kName, query, {.k = 10, .nprobe = kNlist});
      ASSERT_TRUE(result.ok()) << result.status();
      ASSERT_EQ(result->hits.size(), 10u);
      for (size_t i = 0; i < 10; ++i) {
        EXPECT_EQ(result->hits[i].id, exact[i].second) << "query " << q << " rank " << i;
        EXPECT_NEAR(result->hits[i].distance, exact[i].first, 1e-3f * (1 + exact[i].first));
      }
    }
  }

  std::vector<std::string> CollectionFiles() {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(mount_ + "/collections/" + kName)) {
      files.push_back(e.path().filename().string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  testing::TempDir dir_;
  std::string image_, mount_;
  bool mounted_ = false;
  std::unique_ptr<ShoaldProcess> server_;
  std::unique_ptr<Client> client_;
  std::mt19937 rng_{42};
  std::normal_distribution<float> gauss_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::vector<float>> acked_;
};

TEST_F(DiskFullTest, AFullDiskLosesNoAcknowledgedWriteAndShoaldRestartsWithAllOfThem) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "disk full test");
  ASSERT_NO_FATAL_FAILURE(StartServer());
  ASSERT_TRUE(
      client_->CreateCollection({kName, kDim, Metric::kL2, {IndexType::kIvfFlat, kNlist}}).ok());
  // An index over the first rows, so that the full disk also meets a segment.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(UpsertBatch().ok());
  ASSERT_TRUE(client_->BuildIndex(kName).ok());

  ASSERT_NO_FATAL_FAILURE(FillUntilRefused());
  ASSERT_NO_FATAL_FAILURE(MaintainOnFullDisk());

  server_->Kill9();
  server_.reset();
  ASSERT_NO_FATAL_FAILURE(Grow());
  ASSERT_NO_FATAL_FAILURE(StartServer());

  ASSERT_NO_FATAL_FAILURE(ExpectExactlyTheAcknowledgedPoints());
  ASSERT_NO_FATAL_FAILURE(ExpectSearchesMatchExactSearch());
  // Nothing the failed builds started is left: the live manifest, its segment, the WAL.
  EXPECT_EQ(CollectionFiles(),
            std::vector<std::string>({"CURRENT", "MANIFEST-000002", "seg-1", "wal"}));
  EXPECT_TRUE(UpsertBatch().ok()) << "a restart with room makes the collection writable";
}

}  // namespace
}  // namespace shoal::disk_full_test
