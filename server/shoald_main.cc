// shoald: the Shoal server. See `shoald --help`, `shoald --print-config` and
// docs/configuration.md (`shoald --print-config --markdown`).
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "server/blas_env.h"
#include "server/config.h"
#include "server/server.h"
#include "storage/io/file_system.h"

namespace {

// Overwrites the value of --api-key in argv with 'x's, so `ps` and /proc/<pid>/cmdline stop
// showing it once the config is loaded (it was visible until then, and stays in shell history:
// hence the warning).
void ScrubApiKeyArgument(int argc, char** argv) {
  constexpr std::string_view kFlag = "--api-key";
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    char* value = nullptr;
    if (arg == kFlag && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.size() > kFlag.size() && arg.substr(0, kFlag.size() + 1) == "--api-key=") {
      value = argv[i] + kFlag.size() + 1;
    }
    if (value) std::memset(value, 'x', std::strlen(value));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil is built in debug mode: every Mutex operation would build a lock graph and
  // take stack traces (5-10x the cost of the lock). Tests keep the detection; the server not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  shoal::server::EnsureBlasEnvironment(argv);

  auto loaded = shoal::server::LoadConfig(argc, argv);
  if (!loaded.ok()) {
    std::cerr << "shoald: " << loaded.status().message() << "\n";
    return 2;
  }
  shoal::server::Config config = loaded->config;
  if (loaded->api_key_on_command_line) ScrubApiKeyArgument(argc, argv);
  if (loaded->print_config) {
    std::cout << (loaded->markdown ? shoal::server::ConfigMarkdown()
                                   : shoal::server::PrintConfig(config));
    return 0;
  }
  if (auto s = shoal::core::SetLogLevel(config.log_level); !s.ok()) {
    std::cerr << "shoald: " << s.message() << "\n";
    return 2;
  }

  // Signals are taken synchronously by this thread; every other thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // re-read server.api_key_file and the TLS files
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto log = shoal::core::Logger("server");
  // Resolved once, here, so the log, the gauges and every pool agree (cgroup-aware: a container
  // with --cpus 1 gets one arena thread on a 64-core host).
  const shoal::server::Sizing sizing = config.EffectiveSizing();
  config.cpu_threads = sizing.cpu_threads;
  config.cache_bytes = sizing.cache_bytes;
  log->info("cpu.threads = {} ({})", sizing.cpu_threads, sizing.cpu_source);
  log->info("cache.bytes = {} ({})", sizing.cache_bytes, sizing.cache_source);
  for (const std::string& warning : shoal::server::SecurityWarnings(*loaded)) {
    log->warn("{}", warning);
  }
  shoal::server::Server server(config);
  if (absl::Status s = server.Start(); !s.ok()) {
    log->error("cannot start: {}", s.ToString());
    return 1;
  }
  if (!config.ready_file.empty()) {
    const std::string json = absl::StrCat("{\"grpc_port\": ", server.grpc_port(),
                                          ", \"http_port\": ", server.http_port(), "}\n");
    if (auto s = shoal::storage::WriteFileAtomically(shoal::storage::DefaultFileSystem(),
                                                     config.ready_file, json);
        !s.ok()) {
      log->error("writing ready file: {}", s.ToString());
    }
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    auto keys = server.ReloadApiKeys();
    if (keys.ok()) {
      log->info("SIGHUP: API keys reloaded, {} accepted", *keys);
    } else {
      log->error("SIGHUP: keeping the old API keys: {}", keys.status().ToString());
    }
    auto tls = server.ReloadTls();
    if (!tls.ok()) {
      log->error("SIGHUP: keeping the old TLS certificate: {}", tls.status().ToString());
    } else if (*tls) {
      log->info("SIGHUP: TLS certificate reloaded");
    }
  }
  log->info("received {}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.Shutdown();
  return server.clean_shutdown() ? 0 : shoal::server::kExitShutdownLeakedState;
}
