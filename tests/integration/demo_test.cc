// The `make run` demo: shoald --demo loads its file into `fmnist` and builds the IVF index, so
// the first searches run on the IVF engine. A small file stands in for Fashion-MNIST.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal::demo_test {
namespace {

constexpr int kRows = 2000;
constexpr int32_t kDim = 8;

void WriteFvecs(const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < kRows; ++i) {
    out.write(reinterpret_cast<const char*>(&kDim), 4);
    for (int j = 0; j < kDim; ++j) {
      const float v = float((i * 7 + j * 13) % 101);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

// The files a restart must leave alone, path (under the collection's directory) -> bytes: the
// manifest (CURRENT and the MANIFEST it names) and every file of every segment. A reload or a
// rebuild writes a new segment and a new manifest. (The WAL directory may change on a start.)
std::map<std::string, std::string> ManifestAndSegmentFiles(const std::string& collection_dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(collection_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = std::filesystem::relative(e.path(), collection_dir).string();
    if (rel == "CURRENT" || rel.rfind("MANIFEST-", 0) == 0 || rel.rfind("seg-", 0) == 0) {
      files[rel] = testing::ReadWholeFile(e.path().string());
    }
  }
  return files;
}

// Waits until `log` (from `from` on) has one of `lines`; returns which (or npos).
size_t WaitForLogLine(const testing::ShoaldProcess& server, size_t from,
                      const std::vector<std::string>& lines) {
  for (int i = 0; i < 1200; ++i) {
    const std::string log = server.log().substr(from);
    for (size_t l = 0; l < lines.size(); ++l) {
      if (log.find(lines[l]) != std::string::npos) return l;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return std::string::npos;
}

// The demo reports SERVING on the health service once it is loaded and indexed.
bool WaitUntilServing(Client& client) {
  for (int i = 0; i < 1200; ++i) {
    auto health = client.Health("fmnist");
    if (health.ok() && *health == HealthStatus::kServing) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(Demo, LoadsThenBuildsTheIvfIndexSoSearchesProbePartitions) {
  testing::Watchdog watchdog(std::chrono::seconds(240), "demo");
  testing::TempDir dir;
  WriteFvecs(dir.Sub("demo.fvecs"));
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"),
                                              {"--demo", "--demo-file", dir.Sub("demo.fvecs")});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  ASSERT_TRUE(WaitUntilServing(client)) << server->log();

  auto info = client.DescribeCollection("fmnist");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_vectors, uint64_t(kRows));
  EXPECT_EQ(info->num_indexed, uint64_t(kRows));
  EXPECT_EQ(info->index_state, "ready");
  auto result = client.Search("fmnist", std::vector<float>(kDim, 50.0f), {.k = 5});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->hits.size(), 5u);
  EXPECT_GT(result->stats.partitions_probed, 0u);  // the IVF engine, not an exact scan
  EXPECT_LT(result->stats.vectors_scanned, uint64_t(kRows));
  EXPECT_NE(server->log().find("demo collection 'fmnist' ready"), std::string::npos);

  // A restart finds it loaded and indexed: serving at once, nothing reloaded or rebuilt. The
  // demo loader says which it did (its log lines), and the manifest and segment files are
  // byte for byte the ones the first run left.
  ASSERT_EQ(server->Terminate(), 0);
  const std::string collection_dir = dir.Sub("data") + "/collections/fmnist";
  const auto files = ManifestAndSegmentFiles(collection_dir);
  ASSERT_TRUE(files.count("CURRENT")) << "no manifest under " << collection_dir;
  const size_t first_log = server->log().size();
  server = testing::ShoaldProcess::Start(dir.Sub("data"),
                                         {"--demo", "--demo-file", dir.Sub("demo.fvecs")});
  ASSERT_NE(server, nullptr);
  Client again(server->addr());
  ASSERT_TRUE(WaitUntilServing(again));
  // The loader's decision: "nothing to rebuild", or (the bug) a load and a build to the end.
  const size_t said = WaitForLogLine(
      *server, first_log, {"already loaded and indexed", "demo collection 'fmnist' ready"});
  const std::string restart_log = server->log().substr(first_log);
  EXPECT_EQ(said, 0u) << "the restarted demo did not find its collection ready:\n" << restart_log;
  EXPECT_EQ(restart_log.find("building the IVF index"), std::string::npos) << restart_log;
  EXPECT_EQ(restart_log.find("vectors of dim"), std::string::npos) << restart_log;  // a reload
  info = again.DescribeCollection("fmnist");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_vectors, uint64_t(kRows));
  EXPECT_EQ(info->num_indexed, uint64_t(kRows));
  EXPECT_EQ(info->index_state, "ready");
  const auto after = ManifestAndSegmentFiles(collection_dir);
  EXPECT_EQ(after.size(), files.size());
  for (const auto& [path, bytes] : files) {
    auto it = after.find(path);
    EXPECT_TRUE(it != after.end() && it->second == bytes) << path << " changed on restart";
  }
  for (const auto& [path, bytes] : after) {
    EXPECT_TRUE(files.count(path)) << path << " appeared on restart";
  }
}

}  // namespace
}  // namespace shoal::demo_test
