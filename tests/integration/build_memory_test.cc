// A build's memory follows build.memory_bytes, not the collection's size (issue #11 §1): the
// real shoald builds 300,000 x 64 vectors with a 16 MiB build budget; its peak-RSS increase
// during the build (VmHWM reset through /proc/<pid>/clear_refs) stays within the budget plus
// kBuildOverhead, RSS afterwards is back within cache.bytes plus kServingOverhead of the empty
// server's, and the index answers exactly as one built with an unbounded budget. Release pass
// only (label release_only): a sanitizer's allocator would make the figures meaningless.
#include <fstream>
#include <iostream>
#include <random>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::build_memory_test {
namespace {

using testing::ShoaldProcess;

constexpr uint32_t kDim = 64;
constexpr size_t kRows = 300000;
constexpr size_t kQueries = 50;
constexpr uint64_t kCacheBytes = 32ull << 20;
constexpr uint64_t kBudget = 16ull << 20;
// What a build holds beyond build.memory_bytes (docs/NOTES.md, "Build memory"): FAISS's
// k-means scratch (4 MiB distance block, 12 bytes per training vector), OpenBLAS's packing
// buffers per thread, the new segment's id index and the allocator's slack.
constexpr uint64_t kBuildOverhead = 32ull << 20;
// What a serving process holds beyond the empty server's RSS and cache.bytes: the segment's
// in-memory id index (~32 bytes per row), the I/O buffer pool (16 MiB at most), gRPC buffers.
constexpr uint64_t kServingOverhead = 48ull << 20;

// A "kB" field of /proc/<pid>/status, in bytes. When /proc cannot be read (or has no such
// field) the test fails and this returns 0; a silent 0 would pass every bound.
uint64_t StatusField(pid_t pid, const std::string& field) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  if (!status) {
    ADD_FAILURE() << "cannot read " << path;
    return 0;
  }
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  ADD_FAILURE() << path << " has no " << field << " line";
  return 0;
}

// Clustered data: 200 Gaussian blobs, so that IVF recall means something.
std::vector<float> Data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> centers(200 * kDim);
  for (float& x : centers) x = 4 * g(rng);
  std::vector<float> v(n * kDim);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = rng() % 200;
    for (uint32_t j = 0; j < kDim; ++j) v[i * kDim + j] = centers[c * kDim + j] + g(rng);
  }
  return v;
}

struct Built {
  uint64_t build_peak_increase = 0;
  uint64_t rss_empty = 0, rss_after = 0;
  std::vector<std::vector<uint64_t>> hits;
};

class BuildMemoryTest : public ::testing::Test {
 protected:
  Built BuildWith(uint64_t budget, const std::string& name) {
    Built out;
    auto server = ShoaldProcess::Start(
        dir_.Sub(name), {"--cache-bytes", std::to_string(kCacheBytes), "--build-memory-bytes",
                         std::to_string(budget), "--flush-rows", "100000000"});
    if (server == nullptr) return out;
    out.rss_empty = StatusField(server->pid(), "VmRSS");
    if (HasFailure()) return out;
    Client client(server->addr());
    EXPECT_TRUE(
        client
            .CreateCollection(
                {.name = "v", .dim = kDim, .index = {.type = IndexType::kIvfFlat, .nlist = 128}})
            .ok());
    // Unary upserts, one after the other: the rows' order (and so the training sample) is the
    // same in both servers. (An UpsertStream may apply two messages in either order.)
    std::vector<Point> batch;
    for (size_t i = 0; i < kRows; ++i) {
      batch.push_back({i, {data_.begin() + long(i * kDim), data_.begin() + long((i + 1) * kDim)}});
      if (batch.size() == 5000) {
        EXPECT_TRUE(client.Upsert("v", batch).ok());
        batch.clear();
      }
    }
    const uint64_t before = StatusField(server->pid(), "VmRSS");
    std::ofstream("/proc/" + std::to_string(server->pid()) + "/clear_refs") << "5";
    auto built = client.BuildIndex("v");
    EXPECT_TRUE(built.ok()) << built.status();
    const uint64_t peak = StatusField(server->pid(), "VmHWM");
    const uint64_t built_rss = StatusField(server->pid(), "VmRSS");
    out.build_peak_increase = peak > before ? peak - before : 0;
    for (size_t q = 0; q < kQueries; ++q) {
      auto r = client.Search(
          "v", {queries_.begin() + long(q * kDim), queries_.begin() + long((q + 1) * kDim)},
          {.k = 10, .nprobe = 16});
      EXPECT_TRUE(r.ok()) << r.status();
      std::vector<uint64_t> ids;
      for (const Hit& h : r.ok() ? r->hits : std::vector<Hit>{}) ids.push_back(h.id);
      out.hits.push_back(ids);
    }
    out.rss_after = StatusField(server->pid(), "VmRSS");
    std::cout << name << ": RSS empty " << (out.rss_empty >> 20) << " MiB, loaded "
              << (before >> 20) << " MiB, build peak " << (peak >> 20) << " MiB (+"
              << (out.build_peak_increase >> 20) << "), after it " << (built_rss >> 20)
              << " MiB, after searches " << (out.rss_after >> 20) << " MiB; "
              << (built.ok() ? *built : "") << std::endl;
    if (HasFailure()) std::cerr << server->log();
    return out;
  }

  double Recall(const std::vector<std::vector<uint64_t>>& hits) {
    size_t found = 0;
    for (size_t q = 0; q < kQueries; ++q) {
      std::vector<std::pair<float, uint64_t>> d(kRows);
      for (size_t i = 0; i < kRows; ++i) {
        float s = 0;
        for (uint32_t j = 0; j < kDim; ++j) {
          const float x = data_[i * kDim + j] - queries_[q * kDim + j];
          s += x * x;
        }
        d[i] = {s, i};
      }
      std::partial_sort(d.begin(), d.begin() + 10, d.end());
      for (size_t i = 0; i < 10; ++i) {
        found += std::count(hits[q].begin(), hits[q].end(), d[i].second);
      }
    }
    return double(found) / double(kQueries * 10);
  }

  testing::TempDir dir_;
  const std::vector<float> data_ = Data(kRows, 11);
  const std::vector<float> queries_ = Data(kQueries, 12);
};

TEST_F(BuildMemoryTest, ABuildStaysWithinItsBudgetAndAnswersLikeAnUnboundedOne) {
  const Built bounded = BuildWith(kBudget, "bounded");
  ASSERT_FALSE(HasFailure());
  EXPECT_LE(bounded.build_peak_increase, kBudget + kBuildOverhead);
  EXPECT_LE(bounded.rss_after, bounded.rss_empty + kCacheBytes + kServingOverhead);
  const Built unbounded = BuildWith(4ull << 30, "unbounded");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(bounded.hits, unbounded.hits);
  const double recall = Recall(bounded.hits);
  std::cout << "recall@10 at nprobe 16: " << recall << std::endl;
  EXPECT_EQ(recall, Recall(unbounded.hits));
  EXPECT_GT(recall, 0.8);
}

}  // namespace
}  // namespace shoal::build_memory_test
