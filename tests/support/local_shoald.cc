#include "tests/support/local_shoald.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace shoal {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, size_t max_chars) {
  return text.size() <= max_chars ? text : text.substr(text.size() - max_chars);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalShoald>> LocalShoald::Start(LocalShoaldOptions options) {
  auto server = std::unique_ptr<LocalShoald>(new LocalShoald(std::move(options)));
  if (absl::Status s = server->Launch(); !s.ok()) return s;
  return server;
}

LocalShoald::~LocalShoald() {
  if (pid_ <= 0) return;
  const pid_t pid = pid_;
  if (const int code = Terminate(); code != 0) {
    std::fprintf(stderr, "shoald pid %d exited with %d after SIGTERM, not 0. Log tail:\n%s\n",
                 static_cast<int>(pid), code, Tail(ReadLog(), 4000).c_str());
  }
}

std::string LocalShoald::ReadLog() const { return ReadWholeFile(log_path()); }

absl::Status LocalShoald::Launch() {
  const std::string ready_path = options_.data_dir + ".ready";
  std::remove(ready_path.c_str());
  std::vector<std::string> args = options_.prefix;
  args.insert(args.end(), {options_.binary, "--data-dir", options_.data_dir, "--grpc-addr",
                           "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--ready-file", ready_path,
                           "--shutdown-grace-seconds", "5"});
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child's environment, built before fork (the child may only exec).
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const absl::string_view var(*e);
    const bool overridden = std::any_of(options_.env.begin(), options_.env.end(), [&](auto& o) {
      return var.substr(0, var.find('=') + 1) == absl::string_view(o).substr(0, o.find('=') + 1);
    });
    if (!overridden) env.emplace_back(var);
  }
  env.insert(env.end(), options_.env.begin(), options_.env.end());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string log = log_path();

  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    if (FILE* f = std::fopen(log.c_str(), "a")) {
      dup2(fileno(f), STDOUT_FILENO);
      dup2(fileno(f), STDERR_FILENO);
    }
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.start_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::FailedPreconditionError(
          absl::StrCat("shoald exited during start-up:\n", Tail(ReadLog(), 4000)));
    }
    const std::string ready = ReadWholeFile(ready_path);
    if (std::sscanf(ready.c_str(), "{\"grpc_port\": %d, \"http_port\": %d}", &grpc_port_,
                    &http_port_) == 2) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill9();
  return absl::DeadlineExceededError(absl::StrCat("shoald did not become ready in ",
                                                  options_.start_timeout.count(), " s:\n",
                                                  Tail(ReadLog(), 4000)));
}

int LocalShoald::Terminate(std::chrono::seconds bound) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  return Reap(bound);
}

void LocalShoald::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  Reap(std::chrono::seconds(60));
}

int LocalShoald::Reap(std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  int status = 0;
  bool killed = false;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      killed = true;
      // A shoald that outlives its bound is a hang worth seeing in CI's output.
      std::fprintf(stderr, "shoald pid %d did not exit within %lld s; killed. Log tail:\n%s\n",
                   static_cast<int>(pid_), static_cast<long long>(bound.count()),
                   Tail(ReadLog(), 4000).c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  return !killed && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace shoal
