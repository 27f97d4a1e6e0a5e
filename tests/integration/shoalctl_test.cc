// shoalctl against the real server: the commands a user types, their output and exit codes.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

struct CtlRun {
  int code;
  std::string out;
};

CtlRun Ctl(const std::string& addr, const std::string& args) {
  const std::string cmd = testing::BinDir() + "/shoalctl --addr " + addr + " " + args + " 2>&1";
  CtlRun r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(Shoalctl, CreateLoadSearchDescribeDrop) {
  testing::TempDir dir;
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  const std::string addr = server->addr();

  // 300 vectors of dim 4 as fvecs: vector i is (i, i, i, i).
  const std::string file = dir.Sub("v.fvecs");
  {
    std::ofstream out(file, std::ios::binary);
    for (int i = 0; i < 300; ++i) {
      int32_t d = 4;
      out.write(reinterpret_cast<const char*>(&d), 4);
      for (int j = 0; j < 4; ++j) {
        float v = float(i);
        out.write(reinterpret_cast<const char*>(&v), 4);
      }
    }
  }
  CtlRun r = Ctl(addr, "create vecs --dim 4 --metric l2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("created collection 'vecs'"));
  r = Ctl(addr, "load vecs " + file + " --batch 64");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("loaded 300 vectors"));
  r = Ctl(addr, "search vecs --vector 41,41,41,41.2 -k 3 --stats");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("\n0 +1 +41 "));
  EXPECT_THAT(r.out, HasSubstr("300 vectors scanned"));
  EXPECT_THAT(r.out, HasSubstr("partitions probed"));
  EXPECT_THAT(r.out, HasSubstr("bytes read"));
  r = Ctl(addr, "search vecs --query-file " + file + " --query-index 7 --num-queries 2 -k 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("\n7 +1 +7 "));
  EXPECT_THAT(r.out, ContainsRegex("\n8 +1 +8 "));
  r = Ctl(addr, "describe vecs");
  EXPECT_THAT(r.out, ContainsRegex("vecs +4 +l2 +flat +300 "));
  r = Ctl(addr, "list");
  EXPECT_THAT(r.out, HasSubstr("vecs"));
  r = Ctl(addr, "get vecs 3 --vectors");
  EXPECT_THAT(r.out, ContainsRegex("3 +\\[3,3,3,3\\]"));
  r = Ctl(addr, "delete vecs 3 4 1000");
  EXPECT_THAT(r.out, HasSubstr("deleted 2 of 3 ids"));
  r = Ctl(addr, "health");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
  r = Ctl(addr, "health vecs");
  EXPECT_EQ(r.code, 0);
  r = Ctl(addr, "build-index vecs");
  EXPECT_EQ(r.code, 0);
  r = Ctl(addr, "flush vecs");
  EXPECT_EQ(r.code, 0);

  r = Ctl(addr, "search vecs --vector 1,2 -k 3");
  EXPECT_EQ(r.code, 4);  // rejected request
  EXPECT_THAT(r.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.out, HasSubstr("queries[0].values"));
  r = Ctl(addr, "load vecs /does/not/exist.fvecs");
  EXPECT_EQ(r.code, 1);  // usage: an unreadable input file
  r = Ctl(addr, "describe nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.out, HasSubstr("NOT_FOUND"));

  r = Ctl(addr, "drop vecs");
  EXPECT_EQ(r.code, 0);
  r = Ctl(addr, "list");
  EXPECT_THAT(r.out, HasSubstr("no collections"));
  r = Ctl(addr, "health vecs");
  EXPECT_EQ(r.code, 5) << r.out;  // NOT_SERVING: unavailable
}

TEST(Shoalctl, LoadsTheFashionMnistIdxFile) {
  testing::TempDir dir;
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  const std::string addr = server->addr();
  ASSERT_EQ(Ctl(addr, "create fm --dim 784").code, 0);
  CtlRun r =
      Ctl(addr, "load fm /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz --limit 1000");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("loaded 1000 vectors"));
  EXPECT_THAT(r.out, HasSubstr("100%"));  // the progress line, non-TTY form
}

// Writes `n` vectors of dim 4 as fvecs: vector i is (i, i, i, i).
void WriteFvecs(const std::string& file, int n) {
  std::ofstream out(file, std::ios::binary);
  for (int i = 0; i < n; ++i) {
    int32_t d = 4;
    out.write(reinterpret_cast<const char*>(&d), 4);
    for (int j = 0; j < 4; ++j) {
      float v = float(i);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

TEST(Shoalctl, EveryReadCommandPrintsJson) {
  testing::TempDir dir;
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"));
  ASSERT_NE(server, nullptr);
  const std::string addr = server->addr();
  WriteFvecs(dir.Sub("v.fvecs"), 50);
  ASSERT_EQ(Ctl(addr, "create vecs --dim 4").code, 0);
  CtlRun r = Ctl(addr, "--output json load vecs " + dir.Sub("v.fvecs"));
  EXPECT_THAT(r.out, HasSubstr("{\"ok\": true, \"message\": \"loaded 50 vectors into 'vecs'\"}"));

  r = Ctl(addr, "list -o json");  // the global flag may follow the command
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("{\"collections\": [{\"name\": \"vecs\", \"dim\": 4, "
                               "\"metric\": \"l2\", \"index\": {\"type\": \"flat\""));
  EXPECT_THAT(r.out, HasSubstr("\"num_vectors\": 50"));
  r = Ctl(addr, "--output json describe vecs");
  EXPECT_THAT(r.out, HasSubstr("\"index_state\": \"none\""));
  r = Ctl(addr, "search vecs --vector 9,9,9,9 -k 2 --output json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("{\"results\": [{\"query\": 0, \"hits\": [{\"id\": 9, "
                               "\"distance\": 0}, {\"id\": "));
  EXPECT_THAT(r.out, HasSubstr("\"stats\": {\"partitions_probed\": "));
  EXPECT_THAT(r.out, HasSubstr("\"vectors_scanned\": 50"));
  r = Ctl(addr, "get vecs 3 --vectors -o json");
  EXPECT_THAT(r.out, HasSubstr("{\"points\": [{\"id\": 3, \"vector\": [3, 3, 3, 3], "
                               "\"attributes\": {}}]}"));
  r = Ctl(addr, "health -o json");
  EXPECT_THAT(r.out, HasSubstr("{\"status\": \"SERVING\"}"));
}

TEST(Shoalctl, HelpDocumentsExitCodesAndUsageErrorsExitOne) {
  CtlRun r = Ctl("127.0.0.1:1", "--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("Exit codes:"));
  EXPECT_THAT(r.out, HasSubstr("5  unavailable"));
  EXPECT_THAT(r.out, HasSubstr("build-index"));
  EXPECT_THAT(r.out, HasSubstr("bench"));
  r = Ctl("127.0.0.1:1", "search --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--stats"));
  EXPECT_EQ(Ctl("127.0.0.1:1", "create").code, 1);  // no name
  EXPECT_EQ(Ctl("127.0.0.1:1", "list --output yaml").code, 1);
  EXPECT_EQ(Ctl("127.0.0.1:1", "frobnicate").code, 1);
  EXPECT_EQ(Ctl("127.0.0.1:1", "create x --dim 4 --metric hamming").code, 1);
  // Nothing listens on port 1: unavailable.
  EXPECT_EQ(Ctl("127.0.0.1:1", "--timeout-ms 2000 list").code, 5);
}

TEST(Shoalctl, BenchExecsShoalBenchsQuickModeFromItsOwnDirectory) {
  CtlRun r = Ctl("127.0.0.1:1", "bench --print-command --out /tmp/q -- --queries 10");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr(testing::BinDir() + "/shoal-bench --out /tmp/q"));
  EXPECT_THAT(r.out, HasSubstr("--dataset synthetic:n=20000"));
  EXPECT_THAT(r.out, HasSubstr("--shoald " + testing::BinDir() + "/shoald"));
  // The user's arguments come last and replace the quick mode's (shoal-bench refuses a flag
  // given twice).
  EXPECT_THAT(r.out, HasSubstr("--queries 10\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("--queries 500")));

  // A shoalctl with no shoal-bench beside it nor on PATH says so.
  testing::TempDir dir;
  const std::string lone = dir.Sub("shoalctl");
  std::filesystem::copy_file(testing::BinDir() + "/shoalctl", lone);
  std::filesystem::permissions(lone, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  FILE* p = popen(("PATH=/nonexistent " + lone + " bench 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(out, HasSubstr("shoal-bench not found"));
}

}  // namespace
}  // namespace shoal
