// A tiny run of shoal-bench end to end (real shoald, FAISS, hnswlib; 200 queries), so the
// harness cannot rot between `make bench` runs: every output it promises must appear.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::bench_smoke_test {
namespace {

using ::testing::HasSubstr;

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) fields.push_back(f);
    if (line.ends_with(",")) fields.push_back("");
    rows.push_back(fields);
  }
  return rows;
}

TEST(BenchSmoke, HarnessRunsEveryModeAgainstShoalFaissAndHnsw) {
  testing::TempDir dir;
  const std::string out = dir.Sub("out");
  const std::string cmd =
      testing::BinDir() + "/shoal-bench --dataset synthetic:n=4000,dim=16,clusters=20,seed=2" +
      " --queries 200 --targets shoal:ivf_flat,faiss:ivf_flat,hnsw --nlist 32 --nprobe 2,32" +
      " --ef 10,100 --clients 1,4 --extra-k 100 --batch 25 --rate 400 --open-loop-seconds 0.2 "
      "--cold "
      "--cpu-threads 1" +
      " --shoald " + testing::BinDir() + "/shoald --server-arg=--cpu-threads=1" + " --data-dir " +
      dir.Sub("data") + " --cache-dir " + dir.Sub("cache") + " --out " + out + " > " +
      dir.Sub("log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_EQ(status, 0) << testing::ReadWholeFile(dir.Sub("log"));

  const auto csv = ReadCsv(out + "/results.csv");
  ASSERT_GE(csv.size(), 2u);
  const std::vector<std::string>& header = csv[0];
  auto col = [&](const std::string& name) {
    return size_t(std::find(header.begin(), header.end(), name) - header.begin());
  };
  ASSERT_LT(col("cache_hit_ratio"), header.size());
  std::map<std::string, int> points;
  for (size_t i = 1; i < csv.size(); ++i) {
    const auto& row = csv[i];
    ASSERT_EQ(row.size(), header.size()) << i;
    const std::string& target = row[col("target")];
    const std::string& mode = row[col("mode")];
    ++points[target + " " + mode];
    EXPECT_EQ(row[col("errors")], "0") << target << " " << mode;
    EXPECT_GT(std::stod(row[col("qps")]), 0);
    EXPECT_FALSE(row[col("p999_ms")].empty());
    const bool full_probe = row[col("knob")] == "32" || row[col("knob")] == "100";
    if (full_probe && mode != "open") {
      EXPECT_GE(std::stod(row[col("recall10")]), 0.98) << target << " " << mode;
    }
    if (row[col("k")] == "100") {
      ++points[target + " k100"];
      EXPECT_EQ(row[col("clients")], "4");
      if (full_probe) {
        EXPECT_GE(std::stod(row[col("recall100")]), 0.95) << target;
      }
    } else {
      EXPECT_TRUE(row[col("recall100")].empty());
    }
    if (target.starts_with("shoal")) {
      EXPECT_FALSE(row[col("cpu_s_per_1000q")].empty());
      EXPECT_FALSE(row[col("server_peak_rss_mb")].empty());
      EXPECT_FALSE(row[col("cache_hit_ratio")].empty()) << mode;
    } else {
      EXPECT_FALSE(row[col("index_heap_mb")].empty()) << target;
    }
  }
  // 2 knobs x (2 closed + 1 batch) per target, the k=100 sweep at 4 clients (hnsw: ef 100
  // only), one open-loop point each, cold + warm for Shoal.
  for (const char* t : {"shoal:ivf_flat", "faiss:ivf_flat", "hnsw"}) {
    const int k100 = std::string(t) == "hnsw" ? 1 : 2;
    EXPECT_EQ(points[std::string(t) + " k100"], k100) << t;
    EXPECT_EQ(points[std::string(t) + " closed"], 4 + k100) << t;
    EXPECT_EQ(points[std::string(t) + " batch"], 2) << t;
    EXPECT_EQ(points[std::string(t) + " open"], 1) << t;
  }
  EXPECT_EQ(points["shoal:ivf_flat cold"], 1);
  EXPECT_EQ(points["shoal:ivf_flat warm"], 1);
  EXPECT_EQ(points["hnsw cold"], 0);

  const std::string md = testing::ReadWholeFile(out + "/report.md");
  EXPECT_THAT(md, HasSubstr("best QPS at recall@10 >= threshold"));
  EXPECT_THAT(md, HasSubstr("**Shoal / FAISS**"));
  EXPECT_THAT(md, HasSubstr("**Shoal / hnswlib**"));
  EXPECT_TRUE(std::filesystem::exists(out + "/plots/plots.gp"));
  // The second run reuses the collection, the ground truth and the hnswlib graph.
  ASSERT_EQ(std::system(cmd.c_str()), 0) << testing::ReadWholeFile(dir.Sub("log"));
  const std::string log = testing::ReadWholeFile(dir.Sub("log"));
  EXPECT_THAT(log, HasSubstr("ground truth k=100: from cache"));
}

}  // namespace
}  // namespace shoal::bench_smoke_test
