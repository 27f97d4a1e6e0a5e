// ShoaldProcess: the real shoald binary for integration tests — LocalShoald (tests/support/) with
// failures reported to GoogleTest. The binary comes from $SHOAL_BIN_DIR (set by ctest).
//
// A shoald still running when its ShoaldProcess is destroyed gets SIGTERM, and the test fails
// unless it exits 0: a shutdown that hangs, crashes, or has to leave state allocated (exit code
// 3, server/server.h's kExitShutdownLeakedState: a read still at the disk) fails the test that
// caused it. A test that kills shoald on purpose uses Kill9().
//
// Thread-safety: none; one test thread owns it.
#pragma once

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/local_shoald.h"

namespace shoal::testing {

inline std::string BinDir() {
  const char* dir = std::getenv("SHOAL_BIN_DIR");
  return dir ? dir : "build/bin";
}

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ShoaldProcess {
 public:
  // Starts shoald on `data_dir` with extra flags; fails the test (returns null) if it does not
  // become ready within 60 s. `prefix` runs shoald under another command, e.g. taskset; `env`
  // ("NAME=value") is added to shoald's environment.
  static std::unique_ptr<ShoaldProcess> Start(const std::string& data_dir,
                                              std::vector<std::string> extra = {},
                                              std::vector<std::string> prefix = {},
                                              std::vector<std::string> env = {}) {
    auto server = LocalShoald::Start({.binary = BinDir() + "/shoald",
                                      .data_dir = data_dir,
                                      .extra_args = std::move(extra),
                                      .prefix = std::move(prefix),
                                      .env = std::move(env)});
    if (!server.ok()) {
      ADD_FAILURE() << server.status();
      return nullptr;
    }
    return std::unique_ptr<ShoaldProcess>(new ShoaldProcess(*std::move(server)));
  }

  ~ShoaldProcess() {
    if (!server_->running()) return;
    const int code = server_->Terminate();
    EXPECT_EQ(code, 0) << "shoald did not exit cleanly after SIGTERM (3: shutdown left state "
                          "allocated, 66: a sanitizer report, -1: killed or signalled); its log:\n"
                       << LogTail();
  }
  ShoaldProcess(const ShoaldProcess&) = delete;
  ShoaldProcess& operator=(const ShoaldProcess&) = delete;

  std::string addr() const { return server_->grpc_addr(); }
  int grpc_port() const { return server_->grpc_port(); }
  int http_port() const { return server_->http_port(); }
  pid_t pid() const { return server_->pid(); }
  std::string log() const { return server_->ReadLog(); }
  // The log's end, or, when a sanitizer reported, the start of its first report (the end of a
  // TSan report is thread-creation stacks, not the race).
  std::string LogTail() const {
    const std::string all = log();
    for (const char* marker : {"WARNING: ThreadSanitizer", "ERROR: AddressSanitizer",
                               "runtime error:", "ERROR: LeakSanitizer"}) {
      if (const size_t at = all.find(marker); at != std::string::npos) return all.substr(at, 8000);
    }
    return all.size() <= 4000 ? all : all.substr(all.size() - 4000);
  }

  // SIGTERM and wait; returns the exit status (-1 when it had to be killed). The caller checks
  // it (the destructor's check applies only to a shoald still running).
  int Terminate() { return server_->Terminate(); }
  // SIGKILL: a crash, no shutdown code runs.
  void Kill9() { server_->Kill9(); }

 private:
  explicit ShoaldProcess(std::unique_ptr<LocalShoald> server) : server_(std::move(server)) {}
  std::unique_ptr<LocalShoald> server_;
};

}  // namespace shoal::testing
