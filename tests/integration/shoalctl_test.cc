// shoalctl against the real server: the commands a user types, their output and exit codes.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/fakes/temp_dir.h"
#include "tests/fakes/watchdog.h"
#include "tests/integration/shoald_process.h"

namespace shoal::shoalctl_test {
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

// A server whose build goes through the phases the test scripts: BuildIndex is held while
// DescribeCollection answers "training" 40%, then "writing" 80% (three times each), then it
// finishes. shoalctl build-index polls DescribeCollection meanwhile.
class ScriptedBuildService final : public v1::Shoal::CallbackService {
  grpc::ServerUnaryReactor* DescribeCollection(grpc::CallbackServerContext* ctx,
                                               const v1::DescribeCollectionRequest* req,
                                               v1::CollectionInfo* info) override {
    grpc::ServerUnaryReactor* held = nullptr;
    {
      absl::MutexLock l(&mu_);
      info->set_name(req->name());
      info->set_index_state(v1::INDEX_STATE_BUILDING);
      info->set_build_phase(describes_ < 3 ? "training" : "writing");
      info->set_build_percent(describes_ < 3 ? 40 : 80);
      if (++describes_ == 6) std::swap(held, build_);
    }
    if (held) held->Finish(grpc::Status::OK);
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* BuildIndex(grpc::CallbackServerContext* ctx,
                                       const v1::BuildIndexRequest*,
                                       v1::BuildIndexResponse* resp) override {
    resp->set_message("built");
    absl::MutexLock l(&mu_);
    build_ = ctx->DefaultReactor();
    return build_;
  }
  absl::Mutex mu_;
  int describes_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ServerUnaryReactor* build_ ABSL_GUARDED_BY(mu_) = nullptr;
};

TEST(Shoalctl, BuildIndexShowsAProgressBarPerPhase) {
  testing::Watchdog watchdog(std::chrono::seconds(60), "build-index progress");
  ScriptedBuildService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  CtlRun r = Ctl("127.0.0.1:" + std::to_string(port), "build-index c");
  server->Shutdown(std::chrono::system_clock::now());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, ContainsRegex("build-index training \\[#+\\] 100%"));
  EXPECT_THAT(r.out, ContainsRegex("build-index writing \\[#+\\] 100%"));
  EXPECT_THAT(r.out, HasSubstr("ETA"));
  EXPECT_THAT(r.out, HasSubstr("built\n"));
}

}  // namespace
}  // namespace shoal::shoalctl_test
