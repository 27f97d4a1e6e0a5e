#include "server/config.h"

#include <cstdlib>
#include <sstream>
#include <variant>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "yaml-cpp/yaml.h"

namespace shoal::server {
namespace {

using Member =
    std::variant<std::string Config::*, int Config::*, int64_t Config::*, bool Config::*>;

// One row per setting: its YAML key (dotted = nested), environment variable, flag and doc.
struct Field {
  const char* key;
  const char* env;
  const char* flag;
  Member member;
  const char* doc;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      {"server.grpc_addr", "SHOAL_GRPC_ADDR", "--grpc-addr", &Config::grpc_addr,
       "gRPC listen address"},
      {"server.http_addr", "SHOAL_HTTP_ADDR", "--http-addr", &Config::http_addr,
       "HTTP listen address (/metrics, /healthz, /readyz)"},
      {"server.data_dir", "SHOAL_DATA_DIR", "--data-dir", &Config::data_dir,
       "where collections live"},
      {"server.max_message_bytes", "SHOAL_MAX_MESSAGE_BYTES", "--max-message-bytes",
       &Config::max_message_bytes, "largest gRPC message, bytes"},
      {"server.api_key", "SHOAL_API_KEY", "--api-key", &Config::api_key,
       "require 'authorization: Bearer <key>' when set (prefer the file or env: a flag shows in "
       "ps)"},
      {"server.api_key_file", "SHOAL_API_KEY_FILE", "--api-key-file", &Config::api_key_file,
       "file of API keys, one per line (# comments); re-read on SIGHUP"},
      {"server.metrics_auth", "SHOAL_METRICS_AUTH", "--metrics-auth", &Config::metrics_auth,
       "/metrics requires 'Authorization: Bearer <key>' too (needs an API key)"},
      {"server.tls_cert", "SHOAL_TLS_CERT", "--tls-cert", &Config::tls_cert,
       "PEM certificate chain: gRPC and HTTP serve TLS (with tls_key)"},
      {"server.tls_key", "SHOAL_TLS_KEY", "--tls-key", &Config::tls_key,
       "PEM private key of tls_cert"},
      {"server.tls_client_ca", "SHOAL_TLS_CLIENT_CA", "--tls-client-ca", &Config::tls_client_ca,
       "PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS)"},
      {"server.tls_reload_seconds", "SHOAL_TLS_RELOAD_SECONDS", "--tls-reload-seconds",
       &Config::tls_reload_seconds,
       "seconds between checks for renewed TLS files (SIGHUP checks at once); 0 = SIGHUP only"},
      {"server.ready_file", "SHOAL_READY_FILE", "--ready-file", &Config::ready_file,
       "write the bound ports here as JSON once serving"},
      {"server.shutdown_grace_seconds", "SHOAL_SHUTDOWN_GRACE_SECONDS", "--shutdown-grace-seconds",
       &Config::shutdown_grace_seconds, "seconds SIGTERM waits for in-flight requests"},
      {"server.max_inflight_per_peer", "SHOAL_MAX_INFLIGHT_PER_PEER", "--max-inflight-per-peer",
       &Config::max_inflight_per_peer,
       "Searches and Gets one client connection may run at once; more get RESOURCE_EXHAUSTED; "
       "0 = a share of max(1, search.max_inflight / 4), exceeded only while that many slots "
       "stay free"},
      {"server.maintenance_threads", "SHOAL_MAINTENANCE_THREADS", "--maintenance-threads",
       &Config::maintenance_threads,
       "threads for BuildIndex / Flush, apart from the ones serving Get and create/drop"},
      {"cpu.threads", "SHOAL_CPU_THREADS", "--cpu-threads", &Config::cpu_threads,
       "search CPU reservation; 0 = usable CPUs - 1, at least 1 (usable = min(cgroup quota, "
       "affinity))"},
      {"search.max_inflight", "SHOAL_MAX_INFLIGHT_SEARCHES", "--max-inflight-searches",
       &Config::max_inflight_searches, "searches running or queued; more get RESOURCE_EXHAUSTED"},
      {"search.default_nprobe", "SHOAL_DEFAULT_NPROBE", "--default-nprobe",
       &Config::search_default_nprobe, "nprobe when neither request nor collection sets one"},
      {"search.batch_partitions", "SHOAL_BATCH_PARTITIONS", "--batch-partitions",
       &Config::search_batch_partitions, "K: partitions one search task scans at most"},
      {"search.share_scans", "SHOAL_SHARE_SCANS", "--share-scans", &Config::search_share_scans,
       "queries of different requests probing the same partition share its read and scan"},
      {"search.max_queries_per_scan", "SHOAL_MAX_QUERIES_PER_SCAN", "--max-queries-per-scan",
       &Config::search_max_queries_per_scan,
       "queries one shared partition scan scores at most (later ones start a new scan; 1-4096)"},
      {"search.batch_requests", "SHOAL_BATCH_REQUESTS", "--batch-requests",
       &Config::search_batch_requests,
       "searches that arrive while the CPU reservation is busy are merged into one engine batch"},
      {"search.max_batch_queries", "SHOAL_MAX_BATCH_QUERIES", "--max-batch-queries",
       &Config::search_max_batch_queries,
       "queries merged into one engine batch at most (a bigger request runs alone; >= 1)"},
      {"search.stream_max_inflight", "SHOAL_STREAM_MAX_INFLIGHT", "--stream-max-inflight",
       &Config::search_stream_max_inflight,
       "searches one SearchStream runs at once (past it the server stops reading the stream)"},
      {"search.batch_bytes", "SHOAL_BATCH_BYTES", "--batch-bytes", &Config::search_batch_bytes,
       "B: bytes one search task scans at most (at least one partition)"},
      {"search.max_pinned_bytes_per_query", "SHOAL_MAX_PINNED_BYTES", "--max-pinned-bytes",
       &Config::search_max_pinned_bytes,
       "partition bytes a request may hold fetched but unscanned (prefetch depth)"},
      {"collection.flush_rows", "SHOAL_FLUSH_ROWS", "--flush-rows", &Config::flush_rows,
       "memtable rows that trigger a background flush into a segment"},
      {"build.memory_bytes", "SHOAL_BUILD_MEMORY_BYTES", "--build-memory-bytes",
       &Config::build_memory_bytes, "extra memory of one index build, flush or merge"},
      {"wal.max_pending_bytes", "SHOAL_WAL_MAX_PENDING_BYTES", "--wal-max-pending-bytes",
       &Config::wal_max_pending_bytes, "bytes waiting for the WAL per collection"},
      {"io.backend", "SHOAL_IO_BACKEND", "--io-backend", &Config::io_backend,
       "auto, uring or pread"},
      {"io.queue_depth", "SHOAL_IO_QUEUE_DEPTH", "--io-queue-depth", &Config::io_queue_depth,
       "reads in flight at once"},
      {"io.max_inflight_bytes", "SHOAL_IO_MAX_INFLIGHT_BYTES", "--io-max-inflight-bytes",
       &Config::io_max_inflight_bytes, "bytes of reads in flight at once"},
      {"io.max_request_bytes", "SHOAL_IO_MAX_REQUEST_BYTES", "--io-max-request-bytes",
       &Config::io_max_request_bytes, "adjacent reads are merged up to this size"},
      {"io.direct", "SHOAL_IO_DIRECT", "--io-direct", &Config::io_direct,
       "O_DIRECT reads where the filesystem allows"},
      {"cache.bytes", "SHOAL_CACHE_BYTES", "--cache-bytes", &Config::cache_bytes,
       "partition cache budget; 0 = 25% of the cgroup memory limit, else of RAM"},
      {"cache.uncached_bytes", "SHOAL_CACHE_UNCACHED_BYTES", "--cache-uncached-bytes",
       &Config::cache_uncached_bytes,
       "partition bytes queries hold past a full cache, process-wide (reads wait, oldest query "
       "first); 0 = cache.bytes"},
      {"cache.refine_bytes", "SHOAL_CACHE_REFINE_BYTES", "--cache-refine-bytes",
       &Config::cache_refine_bytes,
       "full-precision rows kept in memory for refine (SQ8/PQ segments), besides cache.bytes; "
       "0 = cache.bytes / 8"},
      {"cache.filter_bytes", "SHOAL_CACHE_FILTER_BYTES", "--cache-filter-bytes",
       &Config::cache_filter_bytes,
       "what filters select per segment, kept for repeated filters (with the vectors of a "
       "few-match selection, up to an eighth of this each), besides cache.bytes; "
       "0 = cache.bytes / 32"},
      {"filter.max_indexed_fields", "SHOAL_FILTER_MAX_INDEXED_FIELDS",
       "--filter-max-indexed-fields", &Config::filter_max_indexed_fields,
       "attribute fields with value indexes per segment (the first seen); later ones are "
       "filtered by scanning their column"},
      {"limits.max_candidates_per_query", "SHOAL_MAX_CANDIDATES_PER_QUERY",
       "--max-candidates-per-query", &Config::max_candidates_per_query,
       "k * refine_factor of one query; more get INVALID_ARGUMENT"},
      {"limits.max_request_bytes", "SHOAL_MAX_REQUEST_BYTES", "--max-request-bytes",
       &Config::max_request_bytes,
       "estimated memory of one Search or Get; more get RESOURCE_EXHAUSTED"},
      {"limits.max_inflight_request_bytes", "SHOAL_MAX_INFLIGHT_REQUEST_BYTES",
       "--max-inflight-request-bytes", &Config::max_inflight_request_bytes,
       "estimated memory of every Search and Get running at once"},
      {"log.level", "SHOAL_LOG_LEVEL", "--log-level", &Config::log_level,
       "trace, debug, info, warn or error"},
      {"demo.enabled", "SHOAL_DEMO", "--demo", &Config::demo,
       "load the demo collection fmnist on start if missing"},
      {"demo.file", "SHOAL_DEMO_FILE", "--demo-file", &Config::demo_file,
       "Fashion-MNIST images file for the demo"},
  };
  return fields;
}

absl::Status Set(Config& config, const Field& field, const std::string& value,
                 const std::string& source) {
  auto bad = [&](const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat(field.key, ": '", value, "' from ", source, " is not ", want));
  };
  return std::visit(
      [&](auto member) -> absl::Status {
        using T = std::remove_reference_t<decltype(config.*member)>;
        if constexpr (std::is_same_v<T, std::string>) {
          config.*member = value;
        } else if constexpr (std::is_same_v<T, bool>) {
          std::string v = absl::AsciiStrToLower(value);
          if (v == "true" || v == "1" || v == "yes" || v == "on") {
            config.*member = true;
          } else if (v == "false" || v == "0" || v == "no" || v == "off") {
            config.*member = false;
          } else {
            return bad("a boolean");
          }
        } else {
          int64_t n;
          if (!absl::SimpleAtoi(value, &n) || n < 0) return bad("a non-negative integer");
          config.*member = T(n);
        }
        return absl::OkStatus();
      },
      field.member);
}

std::string Get(const Config& config, const Field& field) {
  return std::visit(
      [&](auto member) -> std::string {
        using T = std::remove_cv_t<std::remove_reference_t<decltype(config.*member)>>;
        if constexpr (std::is_same_v<T, std::string>) {
          return config.*member;
        } else if constexpr (std::is_same_v<T, bool>) {
          return config.*member ? "true" : "false";
        } else {
          return absl::StrCat(config.*member);
        }
      },
      field.member);
}

absl::Status ApplyYaml(Config& config, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, ": ", e.what()));
  }
  for (const Field& field : Fields()) {
    std::vector<std::string> parts = absl::StrSplit(field.key, '.');
    YAML::Node node = YAML::Clone(root);
    bool found = true;
    for (const std::string& part : parts) {
      if (!node.IsMap() || !node[part]) {
        found = false;
        break;
      }
      node = node[part];
    }
    if (!found) continue;
    if (!node.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(field.key, ": expected a scalar in ", path));
    }
    absl::Status s = Set(config, field, node.Scalar(), path);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckSecurity(const Config& c) {
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return absl::InvalidArgumentError("server.tls_cert and server.tls_key: set both or neither");
  }
  if (!c.tls_client_ca.empty() && c.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "server.tls_client_ca: mutual TLS needs server.tls_cert and server.tls_key");
  }
  if (c.metrics_auth && c.api_key.empty() && c.api_key_file.empty()) {
    return absl::InvalidArgumentError(
        "server.metrics_auth: needs server.api_key or server.api_key_file");
  }
  return absl::OkStatus();
}

}  // namespace

Sizing Config::EffectiveSizing() const {
  return ResolveSizing(cpu_threads, cache_bytes, ReadContainerLimits(), AffinityCpus(),
                       PhysicalMemoryBytes());
}

int Config::EffectiveCpuThreads() const { return EffectiveSizing().cpu_threads; }

int64_t Config::EffectiveCacheBytes() const { return EffectiveSizing().cache_bytes; }

int64_t Config::EffectiveRefineBytes() const {
  return cache_refine_bytes > 0 ? cache_refine_bytes : EffectiveCacheBytes() / 8;
}

int64_t Config::EffectiveFilterBytes() const {
  return cache_filter_bytes > 0 ? cache_filter_bytes : EffectiveCacheBytes() / 32;
}

absl::StatusOr<LoadedConfig> LoadConfig(int argc, char** argv) {
  LoadedConfig loaded;
  CLI::App app{"shoald: the Shoal vector search server"};
  std::string config_path;
  app.add_option("--config", config_path, "YAML config file (also SHOAL_CONFIG)");
  auto* print = app.add_flag("--print-config", loaded.print_config,
                             "print the effective config (YAML) and exit");
  app.add_flag("--markdown", loaded.markdown,
               "with --print-config: every setting as docs/configuration.md (defaults)")
      ->needs(print);
  std::vector<std::string> flag_values(Fields().size());
  std::vector<CLI::Option*> options;
  for (size_t i = 0; i < Fields().size(); ++i) {
    const Field& f = Fields()[i];
    if (std::holds_alternative<bool Config::*>(f.member)) {
      options.push_back(app.add_flag(f.flag, flag_values[i], f.doc));
    } else {
      options.push_back(app.add_option(f.flag, flag_values[i], f.doc));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }

  if (config_path.empty()) {
    if (const char* env = std::getenv("SHOAL_CONFIG")) config_path = env;
  }
  if (!config_path.empty()) {
    absl::Status s = ApplyYaml(loaded.config, config_path);
    if (!s.ok()) return s;
  }
  for (const Field& f : Fields()) {
    if (const char* env = std::getenv(f.env)) {
      absl::Status s = Set(loaded.config, f, env, f.env);
      if (!s.ok()) return s;
    }
  }
  for (size_t i = 0; i < Fields().size(); ++i) {
    if (options[i]->count() == 0) continue;
    const Field& f = Fields()[i];
    std::string value = flag_values[i];
    if (std::holds_alternative<bool Config::*>(f.member) && value.empty()) value = "true";
    absl::Status s = Set(loaded.config, f, value, f.flag);
    if (!s.ok()) return s;
  }
  for (size_t i = 0; i < Fields().size(); ++i) {
    if (Fields()[i].member == Member(&Config::api_key) && options[i]->count() > 0) {
      loaded.api_key_on_command_line = true;
    }
  }
  if (absl::Status s = CheckSecurity(loaded.config); !s.ok()) return s;
  if (loaded.config.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("server.max_message_bytes: must be at least 1024");
  }
  const std::string& backend = loaded.config.io_backend;
  if (backend != "auto" && backend != "uring" && backend != "pread") {
    return absl::InvalidArgumentError(
        absl::StrCat("io.backend: '", backend, "' is not auto, uring or pread"));
  }
  if (loaded.config.io_queue_depth < 1) {
    return absl::InvalidArgumentError("io.queue_depth: must be at least 1");
  }
  if (loaded.config.search_default_nprobe < 1) {
    return absl::InvalidArgumentError("search.default_nprobe: must be at least 1");
  }
  // A shared scan scores all its queries' keys in one task (chunked, but its CPU time grows
  // with them): the cap bounds the scan an older query may wait for.
  if (loaded.config.search_max_batch_queries < 1) {
    return absl::InvalidArgumentError("search.max_batch_queries: must be at least 1");
  }
  if (loaded.config.search_stream_max_inflight < 1) {
    return absl::InvalidArgumentError("search.stream_max_inflight: must be at least 1");
  }
  if (loaded.config.search_max_queries_per_scan < 1 ||
      loaded.config.search_max_queries_per_scan > kMaxQueriesPerScanLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("search.max_queries_per_scan: must be between 1 and ", kMaxQueriesPerScanLimit,
                     ", got ", loaded.config.search_max_queries_per_scan));
  }
  if (loaded.config.search_batch_partitions < 1) {
    return absl::InvalidArgumentError("search.batch_partitions: must be at least 1");
  }
  if (loaded.config.search_batch_bytes < 1 || loaded.config.search_max_pinned_bytes < 1) {
    return absl::InvalidArgumentError(
        "search.batch_bytes / search.max_pinned_bytes_per_query: must be at least 1");
  }
  // The upper bound keeps the cost arithmetic (queries x candidates x bytes) far from overflow.
  if (loaded.config.max_candidates_per_query < 1 ||
      loaded.config.max_candidates_per_query > 10000000) {
    return absl::InvalidArgumentError(
        "limits.max_candidates_per_query: must be between 1 and 10000000");
  }
  if (loaded.config.max_request_bytes < 1 ||
      loaded.config.max_inflight_request_bytes < loaded.config.max_request_bytes) {
    return absl::InvalidArgumentError(
        "limits: max_request_bytes must be at least 1, and max_inflight_request_bytes at least "
        "max_request_bytes");
  }
  if (loaded.config.filter_max_indexed_fields < 0 ||
      loaded.config.filter_max_indexed_fields > 65536) {
    return absl::InvalidArgumentError("filter.max_indexed_fields: must be between 0 and 65536");
  }
  if (loaded.config.build_memory_bytes < (1 << 20)) {
    return absl::InvalidArgumentError("build.memory_bytes: must be at least 1 MiB (1048576)");
  }
  if (loaded.config.maintenance_threads < 1) {
    return absl::InvalidArgumentError("server.maintenance_threads: must be at least 1");
  }
  if (loaded.config.max_inflight_searches < 1) {
    return absl::InvalidArgumentError("search.max_inflight: must be at least 1");
  }
  if (loaded.config.max_inflight_per_peer < 0) {
    return absl::InvalidArgumentError(
        "server.max_inflight_per_peer: must be 0 (a quarter of search.max_inflight) or more");
  }
  return loaded;
}

std::vector<std::string> SecurityWarnings(const LoadedConfig& loaded) {
  const Config& c = loaded.config;
  std::vector<std::string> out;
  if (loaded.api_key_on_command_line) {
    out.push_back(
        "--api-key on the command line is visible to other users of this machine (ps, "
        "/proc/<pid>/cmdline until shoald overwrites it at start-up, shell history); use "
        "--api-key-file or SHOAL_API_KEY instead");
  }
  const bool keyed = !c.api_key.empty() || !c.api_key_file.empty();
  const bool tls = !c.tls_cert.empty();
  if (!IsLoopbackAddress(c.grpc_addr)) {
    if (!keyed) {
      out.push_back(absl::StrCat(
          "listening on ", c.grpc_addr,
          " (not loopback) without an API key: anyone who reaches it can read and write every "
          "collection; set SHOAL_API_KEY / --api-key-file"));
    }
    if (!tls) {
      out.push_back(absl::StrCat(
          "gRPC on ", c.grpc_addr,
          " (not loopback) without TLS: vectors and API keys cross the network in plaintext; "
          "set --tls-cert / --tls-key"));
    }
  }
  if (!IsLoopbackAddress(c.http_addr)) {
    if (!c.metrics_auth) {
      out.push_back(absl::StrCat(
          "listening on ", c.http_addr,
          " (not loopback) without an API key for /metrics: anyone who reaches it can read "
          "the metrics (collection names, sizes); set server.metrics_auth"));
    }
    if (!tls) {
      out.push_back(absl::StrCat("HTTP on ", c.http_addr,
                                 " (not loopback) without TLS: /metrics and its bearer key "
                                 "cross the network in plaintext; set --tls-cert / --tls-key"));
    }
  }
  return out;
}

std::string PrintConfig(const Config& config) {
  const Config defaults;
  std::ostringstream out;
  out << "# shoald effective config (YAML file < SHOAL_* env < flags)\n";
  std::string section;
  for (const Field& f : Fields()) {
    std::vector<std::string> parts = absl::StrSplit(f.key, '.');
    if (parts[0] != section) {
      section = parts[0];
      out << section << ":\n";
    }
    std::string value = Get(config, f);
    if (std::holds_alternative<std::string Config::*>(f.member)) value = "\"" + value + "\"";
    std::string def = Get(defaults, f);
    out << "  " << parts[1] << ": " << value << "  # " << f.doc
        << ". Default: " << (def.empty() ? "\"\"" : def) << ". Env " << f.env << ", flag " << f.flag
        << "\n";
  }
  return out.str();
}

namespace {

std::string MarkdownCell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// "67108864 (64 MiB)" for byte sizes that are whole MiB or GiB.
std::string MarkdownDefault(const Field& f, const std::string& value) {
  if (value.empty()) return "(empty)";
  int64_t n;
  if (absl::StrContains(f.key, "bytes") && absl::SimpleAtoi(value, &n) && n > 0) {
    if (n % (int64_t(1) << 30) == 0) return absl::StrCat("`", value, "` (", n >> 30, " GiB)");
    if (n % (int64_t(1) << 20) == 0) return absl::StrCat("`", value, "` (", n >> 20, " MiB)");
  }
  return absl::StrCat("`", value, "`");
}

}  // namespace

std::string ConfigMarkdown() {
  const Config defaults;
  std::ostringstream out;
  out << "# Configuration\n\n"
      << "<!-- Generated by `shoald --print-config --markdown` (`make docs`): do not edit.\n"
      << "     config_doc_test fails when this file and the binary disagree. -->\n\n"
      << "shoald reads its settings from, later ones winning: built-in defaults, a YAML file\n"
      << "(`--config <file>` or `SHOAL_CONFIG`), `SHOAL_*` environment variables, command-line\n"
      << "flags. A dotted key is nested YAML (`server.grpc_addr` is `grpc_addr:` under\n"
      << "`server:`). `shoald --print-config` prints the effective values as YAML.\n";
  std::string section;
  for (const Field& f : Fields()) {
    const std::string key = f.key;
    const std::string head = key.substr(0, key.find('.'));
    if (head != section) {
      section = head;
      out << "\n## " << section << "\n\n"
          << "| Key | Environment | Flag | Default | Meaning |\n"
          << "|---|---|---|---|---|\n";
    }
    out << "| `" << key << "` | `" << f.env << "` | `" << f.flag << "` | "
        << MarkdownCell(MarkdownDefault(f, Get(defaults, f))) << " | " << MarkdownCell(f.doc)
        << " |\n";
  }
  return out.str();
}

}  // namespace shoal::server
