// ShoaldProcess: runs the real shoald binary for integration tests, on loopback ports the
// kernel picks (--grpc-addr 127.0.0.1:0), learning them from --ready-file. Its log goes to
// <data_dir>.log and is printed when a test fails to start it.
//
// Thread-safety: none; one test thread owns it.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

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
  // become ready within 60 s.
  // `prefix` runs shoald under another command, e.g. {"taskset", "-c", "0"}.
  static std::unique_ptr<ShoaldProcess> Start(const std::string& data_dir,
                                              std::vector<std::string> extra = {},
                                              std::vector<std::string> prefix = {}) {
    auto p = std::unique_ptr<ShoaldProcess>(new ShoaldProcess(data_dir));
    if (!p->Launch(std::move(extra), std::move(prefix))) return nullptr;
    return p;
  }

  ~ShoaldProcess() {
    if (pid_ > 0) Terminate();
  }

  std::string addr() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  std::string log() const { return ReadWholeFile(log_path_); }

  // SIGTERM and wait; returns the exit status (or -1).
  int Terminate() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    return Reap(std::chrono::seconds(60));
  }

  // SIGKILL: a crash, no shutdown code runs.
  void Kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    Reap(std::chrono::seconds(60));
  }

 private:
  explicit ShoaldProcess(std::string data_dir)
      : data_dir_(std::move(data_dir)),
        ready_path_(data_dir_ + ".ready"),
        log_path_(data_dir_ + ".log") {}

  bool Launch(std::vector<std::string> extra, std::vector<std::string> prefix) {
    std::remove(ready_path_.c_str());
    std::vector<std::string> args = {BinDir() + "/shoald",
                                     "--data-dir",
                                     data_dir_,
                                     "--grpc-addr",
                                     "127.0.0.1:0",
                                     "--http-addr",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     ready_path_,
                                     "--shutdown-grace-seconds",
                                     "5"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.begin(), prefix.begin(), prefix.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* log = std::fopen(log_path_.c_str(), "a");
      if (log) {
        dup2(fileno(log), STDOUT_FILENO);
        dup2(fileno(log), STDERR_FILENO);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        ADD_FAILURE() << "shoald exited during start-up:\n" << log();
        return false;
      }
      const std::string ready = ReadWholeFile(ready_path_);
      if (std::sscanf(ready.c_str(), "{\"grpc_port\": %d, \"http_port\": %d}", &grpc_port_,
                      &http_port_) == 2) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "shoald did not become ready in 60 s:\n" << log();
    Kill9();
    return false;
  }

  int Reap(std::chrono::seconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "shoald did not exit within " << bound.count() << " s";
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string data_dir_;
  const std::string ready_path_;
  const std::string log_path_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

}  // namespace shoal::testing
