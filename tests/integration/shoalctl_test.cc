// shoalctl against the real server: the commands a user types, their output and exit codes.
#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal {
namespace {

using ::testing::HasSubstr;

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
  EXPECT_THAT(r.out, HasSubstr("id=41 "));
  EXPECT_THAT(r.out, HasSubstr("scanned=300"));
  r = Ctl(addr, "search vecs --query-file " + file + " --query-index 7 --num-queries 2 -k 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("query 7:\n  id=7 "));
  EXPECT_THAT(r.out, HasSubstr("query 8:\n  id=8 "));
  r = Ctl(addr, "describe vecs");
  EXPECT_THAT(r.out, HasSubstr("vectors=300"));
  r = Ctl(addr, "list");
  EXPECT_THAT(r.out, HasSubstr("vecs"));
  r = Ctl(addr, "get vecs 3 --vectors");
  EXPECT_THAT(r.out, HasSubstr("id=3 vector=[3,3,3,3]"));
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
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(r.out, HasSubstr("queries[0].values"));
  r = Ctl(addr, "load vecs /does/not/exist.fvecs");
  EXPECT_EQ(r.code, 1);
  r = Ctl(addr, "describe nope");
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("NOT_FOUND"));

  r = Ctl(addr, "drop vecs");
  EXPECT_EQ(r.code, 0);
  r = Ctl(addr, "list");
  EXPECT_THAT(r.out, HasSubstr("no collections"));
  r = Ctl(addr, "health vecs");
  EXPECT_EQ(r.code, 3);
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

}  // namespace
}  // namespace shoal
