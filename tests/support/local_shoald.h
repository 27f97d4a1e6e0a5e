// LocalShoald: starts the shoald binary as a child process on loopback ports the kernel picks
// (--grpc-addr 127.0.0.1:0), learns them from --ready-file, and stops it with SIGTERM. Used by
// the integration tests and by shoal-bench, which measure the real server. Its output goes to
// <data_dir>.log.
//
// Thread-safety: none; one thread owns a LocalShoald.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal {

struct LocalShoaldOptions {
  std::string binary = "build/bin/shoald";
  std::string data_dir;
  std::vector<std::string> extra_args;  // appended to shoald's command line
  std::vector<std::string> prefix;      // runs shoald under a command, e.g. {"taskset", "-c", "0"}
  // "NAME=value" set in shoald's environment only (setenv in a process with gRPC threads races
  // their getenv; this never touches the caller's environment).
  std::vector<std::string> env;
  std::chrono::seconds start_timeout{60};
};

class LocalShoald {
 public:
  // Starts shoald and waits until it serves; the error carries the tail of its log.
  static absl::StatusOr<std::unique_ptr<LocalShoald>> Start(LocalShoaldOptions options);
  // SIGTERM and wait, if still running; an exit status other than 0 is reported on stderr
  // (a destructor cannot fail the caller: tests use ShoaldProcess, which does).
  ~LocalShoald();
  LocalShoald(const LocalShoald&) = delete;
  LocalShoald& operator=(const LocalShoald&) = delete;

  std::string grpc_addr() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  std::string log_path() const { return options_.data_dir + ".log"; }
  std::string ReadLog() const;

  // SIGTERM, then wait up to `bound` (SIGKILL after it): the exit status, or -1 when the
  // process did not exit by itself (killed, signalled, or not running).
  int Terminate(std::chrono::seconds bound = std::chrono::seconds(60));
  // SIGKILL: a crash, no shutdown code runs.
  void Kill9();

 private:
  explicit LocalShoald(LocalShoaldOptions options) : options_(std::move(options)) {}
  absl::Status Launch();
  int Reap(std::chrono::seconds bound);

  const LocalShoaldOptions options_;
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

}  // namespace shoal
