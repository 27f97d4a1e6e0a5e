#include "storage/io/io_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "gtest/gtest.h"
#include "storage/io/aligned_buffer.h"
#include "tests/fakes/io_backend_skip.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"

namespace shoal::storage::io_backend_test {
namespace {

// Collects completions and lets the test wait for a count.
class Collector {
 public:
  IoCallback callback() {
    return [this](IoResult r) {
      std::lock_guard<std::mutex> lock(mu_);
      results_[r.tag] = std::move(r);
      cv_.notify_all();
    };
  }
  std::map<uint64_t, IoResult> Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return results_.size() >= n; });
    return results_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, IoResult> results_;
};

std::string MakeFile(const std::string& path, size_t size) {
  std::string data(size, '\0');
  std::mt19937 rng(11);
  for (char& c : data) c = char(rng());
  std::ofstream(path, std::ios::binary).write(data.data(), std::streamsize(size));
  return data;
}

std::vector<IoBackendKind> Kinds() { return {IoBackendKind::kPread, IoBackendKind::kUring}; }

absl::StatusOr<std::unique_ptr<IoBackend>> Make(IoBackendKind kind, IoCallback cb) {
  return NewIoBackend(kind, std::move(cb), 32);
}

class IoBackendTest : public ::testing::TestWithParam<IoBackendKind> {};

TEST_P(IoBackendTest, RandomReadsMatchTheFileByteForByte) {
  testing::Watchdog watchdog(std::chrono::seconds(120), "random reads");
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 8 << 20);
  const int fd = ::open(dir.Sub("f").c_str(), O_RDONLY);
  Collector collector;
  auto made = Make(GetParam(), collector.callback());
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), made.status());
  std::unique_ptr<IoBackend> backend = *std::move(made);
  std::mt19937 rng(5);
  std::vector<std::unique_ptr<char[]>> buffers;
  std::vector<IoRead> reads;
  for (uint64_t i = 0; i < 10000; ++i) {
    const uint32_t length = 1 + rng() % 20000;
    const uint64_t offset = rng() % (data.size() - length);
    buffers.emplace_back(new char[length]);
    reads.push_back({fd, offset, length, buffers.back().get(), i});
  }
  for (size_t i = 0; i < reads.size(); i += 100) {
    backend->Submit({reads.begin() + long(i), reads.begin() + long(i + 100)});
  }
  auto results = collector.Wait(reads.size());
  ASSERT_EQ(results.size(), reads.size());
  for (const IoRead& r : reads) {
    const IoResult& res = results.at(r.tag);
    ASSERT_TRUE(res.status.ok()) << res.status;
    ASSERT_EQ(res.bytes, r.length);
    ASSERT_EQ(std::memcmp(r.buffer, data.data() + r.offset, r.length), 0) << r.tag;
  }
  backend.reset();
  ::close(fd);
}

TEST_P(IoBackendTest, ReadsPastEndOfFileReturnWhatThereIs) {
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 10000);
  const int fd = ::open(dir.Sub("f").c_str(), O_RDONLY);
  Collector collector;
  auto made = Make(GetParam(), collector.callback());
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), made.status());
  std::unique_ptr<IoBackend> backend = *std::move(made);
  char buf[8192];
  char buf2[16];
  backend->Submit({{fd, 9000, 8192, buf, 1}, {fd, 20000, 16, buf2, 2}});
  auto results = collector.Wait(2);
  ASSERT_TRUE(results[1].status.ok());
  EXPECT_EQ(results[1].bytes, 1000u);
  EXPECT_EQ(std::memcmp(buf, data.data() + 9000, 1000), 0);
  EXPECT_EQ(results[2].bytes, 0u);
  ::close(fd);
}

TEST_P(IoBackendTest, ErrorsAreReportedPerReadWithoutFailingOthers) {
  testing::TempDir dir;
  MakeFile(dir.Sub("f"), 4096);
  const int fd = ::open(dir.Sub("f").c_str(), O_RDONLY);
  const int dir_fd = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  Collector collector;
  auto made = Make(GetParam(), collector.callback());
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), made.status());
  std::unique_ptr<IoBackend> backend = *std::move(made);
  char a[100], b[100], c[100];
  backend->Submit({{fd, 0, 100, a, 1}, {dir_fd, 0, 100, b, 2}, {-1, 0, 100, c, 3}});
  auto results = collector.Wait(3);
  EXPECT_TRUE(results[1].status.ok());
  EXPECT_FALSE(results[2].status.ok());  // EISDIR
  EXPECT_NE(results[2].status.message().find("Is a directory"), std::string::npos);
  EXPECT_FALSE(results[3].status.ok());  // EBADF
  ::close(fd);
  ::close(dir_fd);
}

TEST_P(IoBackendTest, DirectIoReadsWithAlignedBuffers) {
  testing::TempDir dir;
  const std::string data = MakeFile(dir.Sub("f"), 1 << 20);
  const int fd = ::open(dir.Sub("f").c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0) GTEST_SKIP() << "this filesystem does not support O_DIRECT";
  Collector collector;
  auto made = Make(GetParam(), collector.callback());
  SHOAL_SKIP_ONLY_IF_URING_REFUSED(GetParam(), made.status());
  std::unique_ptr<IoBackend> backend = *std::move(made);
  BufferPool pool;
  AlignedBuffer buf = pool.Get(64 << 10);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % kDirectIoAlignment, 0u);
  backend->Submit({{fd, 256 << 10, 64 << 10, buf.data(), 7}});
  auto results = collector.Wait(1);
  ASSERT_TRUE(results[7].status.ok()) << results[7].status;
  EXPECT_EQ(results[7].bytes, 64u << 10);
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + (256 << 10), 64 << 10), 0);
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoBackendTest, ::testing::ValuesIn(Kinds()),
                         [](const auto& info) {
                           return info.param == IoBackendKind::kUring ? "Uring" : "Pread";
                         });

TEST(IoBackend, AutoPicksARealBackendAndPreadCanBeForced) {
  Collector collector;
  auto forced = NewIoBackend(IoBackendKind::kPread, collector.callback(), 8);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ((*forced)->name(), "pread");
  auto automatic = NewIoBackend(IoBackendKind::kAuto, collector.callback(), 8);
  ASSERT_TRUE(automatic.ok());
  const bool uring_works = NewUringBackend(collector.callback(), 8).ok();
  EXPECT_EQ((*automatic)->name(), uring_works ? "uring" : "pread");
}

TEST(BufferPool, RecyclesBySizeClassWithinItsCap) {
  BufferPool pool(1 << 20);
  AlignedBuffer a = pool.Get(5000);
  EXPECT_EQ(a.capacity(), 8192u);
  char* p = a.data();
  pool.Put(std::move(a));
  EXPECT_EQ(pool.cached_bytes(), 8192u);
  AlignedBuffer b = pool.Get(6000);
  EXPECT_EQ(b.data(), p);  // reused
  EXPECT_EQ(pool.cached_bytes(), 0u);
  pool.Put(pool.Get(2 << 20));  // over the cap: freed, not kept
  EXPECT_EQ(pool.cached_bytes(), 0u);
  EXPECT_EQ(AlignUp(1), 4096u);
  EXPECT_EQ(AlignDown(8191), 4096u);
}

}  // namespace
}  // namespace shoal::storage::io_backend_test
