// Config: shoald's settings. Sources, later ones win: built-in defaults, the YAML file
// (--config or SHOAL_CONFIG), SHOAL_* environment variables, command-line flags.
// `shoald --print-config` prints the effective values as YAML with every field's default;
// `shoald --print-config --markdown` the reference docs/configuration.md.
//
// Thread-safety: a Config is a plain value; load it once at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/container_limits.h"

namespace shoal::server {

// The largest search.max_queries_per_scan the loader accepts.
inline constexpr int kMaxQueriesPerScanLimit = 4096;

struct Config {
  // gRPC listen address. Default: 127.0.0.1:7700 (0.0.0.0:7700 in the container image).
  std::string grpc_addr = "127.0.0.1:7700";
  // HTTP listen address for /metrics, /healthz, /readyz. Default: 127.0.0.1:7701.
  std::string http_addr = "127.0.0.1:7701";
  // Where collections live. Default: ./data.
  std::string data_dir = "./data";
  // Largest gRPC message accepted or sent, bytes. Default: 64 MiB.
  int64_t max_message_bytes = 64 << 20;
  // When set, every RPC must carry `authorization: Bearer <api_key>`. On the command line it is
  // visible to other users (ps): prefer api_key_file or SHOAL_API_KEY. Default: empty (off).
  std::string api_key;
  // A file of API keys, one per line ('#' comments and blank lines ignored), accepted beside
  // api_key; re-read on SIGHUP, so keys rotate without a restart. Default: empty (none).
  std::string api_key_file;
  // /metrics also requires `Authorization: Bearer <key>` (one of the API keys). Default: false.
  bool metrics_auth = false;
  // PEM certificate chain and private key: gRPC (and the HTTP port) serve TLS only. Both or
  // neither. Default: empty (plaintext).
  std::string tls_cert;
  std::string tls_key;
  // PEM CA bundle: gRPC clients must present a certificate it signed (mutual TLS). Needs
  // tls_cert. Default: empty (no client certificate asked for).
  std::string tls_client_ca;
  // Seconds between checks of tls_cert / tls_key / tls_client_ca for renewed files: a renewal
  // that parses (and whose key is its certificate's) serves new connections without a restart.
  // SIGHUP checks at once. 0 = only on SIGHUP. Default: 60.
  int tls_reload_seconds = 60;
  // CPU reservation for search (threads in the arena). 0 = usable CPUs - 1, at least 1, where
  // usable = min(cgroup CPU quota, affinity mask) (server/container_limits.h). Default: 0.
  int cpu_threads = 0;
  // Search requests running or queued at once; past it: RESOURCE_EXHAUSTED. Default: 256.
  int max_inflight_searches = 256;
  // Searches and Gets one client connection (gRPC peer, ip:port) may have running at once;
  // past it: RESOURCE_EXHAUSTED, so one greedy client cannot take every search slot.
  // 0 = max(1, max_inflight_searches / 4). Default: 0.
  int max_inflight_per_peer = 0;
  // nprobe when neither the request nor the collection sets one. Default: 16.
  int search_default_nprobe = 16;
  // K: partitions one search task scans at most. Default: 16.
  int search_batch_partitions = 16;
  // Queries of different requests that probe the same partition share one read and one
  // scan. Default: true.
  bool search_share_scans = true;
  // Queries one shared partition scan scores at most (later ones open a new scan), 1 to
  // kMaxQueriesPerScanLimit. Default: 64.
  int search_max_queries_per_scan = 64;
  // Searches that arrive while as many engine batches run as the CPU reservation has threads
  // wait, and are merged into one batch when one answers (core/index/search_batcher.h); an
  // idle server starts a search at once. Default: true.
  bool search_batch_requests = true;
  // Queries merged into one engine batch at most; a bigger request runs alone. Default: 256.
  int search_max_batch_queries = 256;
  // Searches one SearchStream runs at once; past it the server stops reading that stream
  // (HTTP/2 flow control pushes back on the client). Default: 32.
  int search_stream_max_inflight = 32;
  // B: bytes one search task scans at most (at least one partition). Default: 8 MiB.
  int64_t search_batch_bytes = 8ll << 20;
  // Partition bytes one request may have fetched but not yet scanned (the prefetch depth).
  // Default: 64 MiB.
  int64_t search_max_pinned_bytes = 64ll << 20;
  // Memtable rows that trigger a background flush into a segment (an exact one for FLAT
  // collections and IVF ones not built yet).
  // Default: 200000.
  int64_t flush_rows = 200000;
  // Extra memory one index build, flush or merge may use (sample, chunk and partition-group
  // buffers), whatever the collection's size; at least 1 MiB. Default: 256 MiB.
  int64_t build_memory_bytes = 256ll << 20;
  // Bytes of writes waiting for the WAL per collection; past it: RESOURCE_EXHAUSTED.
  // Default: 512 MiB.
  int64_t wal_max_pending_bytes = 512ll << 20;
  // trace, debug, info, warn, error. Default: info.
  std::string log_level = "info";
  // Load the demo collection `fmnist` (Fashion-MNIST) on start if it is missing. Default: false.
  bool demo = false;
  // Where the demo reads Fashion-MNIST. Default: the dataset-fashion-mnist package's file.
  std::string demo_file = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  // Once serving, write {"grpc_port": N, "http_port": M} here (for scripts and tests).
  // Default: empty (off).
  std::string ready_file;
  // Seconds SIGTERM waits for in-flight requests before cancelling them. Default: 10.
  int shutdown_grace_seconds = 10;
  // Threads for BuildIndex, Flush and background flushes (at least 1). They are separate from
  // the two admin threads that serve Get and create/drop, so a build never starves reads; more
  // threads run builds of different collections at once (their CPU work shares the arena).
  // Default: 1.
  int maintenance_threads = 1;
  // I/O backend: auto (io_uring, falling back to pread when the kernel refuses a ring),
  // uring or pread. Default: auto.
  std::string io_backend = "auto";
  // Reads in flight at once. Default: 64.
  int io_queue_depth = 64;
  // Bytes of reads in flight at once. Default: 256 MiB.
  int64_t io_max_inflight_bytes = 256ll << 20;
  // Adjacent reads are merged up to this size. Default: 16 MiB.
  int64_t io_max_request_bytes = 16ll << 20;
  // Read segment files with O_DIRECT where the filesystem allows it. Default: true.
  bool io_direct = true;
  // Partition cache budget in bytes; 0 = 25% of the cgroup memory limit, or of physical memory
  // when there is none. Default: 0.
  int64_t cache_bytes = 0;
  // Partition bytes that queries may hold at once past a full cache (read for one query alone
  // when the cache has no room next to what is pinned); such a read waits for its bytes,
  // oldest query first, and the oldest query always gets one (storage/cache/uncached_budget.h).
  // 0 = cache.bytes as resolved (so by default 25% of the memory limit again). Default: 0.
  int64_t cache_uncached_bytes = 0;
  // Full-precision rows kept in memory for refine (storage/cache/row_cache.h), a budget of its
  // own besides cache.bytes; 0 = cache.bytes / 8 as resolved. Default: 0.
  int64_t cache_refine_bytes = 0;
  // What filters select per segment, kept so that a repeated filter is not evaluated over every
  // row again (storage/cache/selection_cache.h), a budget of its own besides cache.bytes;
  // 0 = cache.bytes / 32 as resolved. Default: 0.
  int64_t cache_filter_bytes = 0;
  // Attribute fields that get value indexes (rows per value, storage/attributes/value_index.h),
  // per segment and memtable, the first seen; later fields are filtered by scanning their
  // column. 0..65536. Default: 64.
  int64_t filter_max_indexed_fields = 64;
  // What one request may make the server hold (DESIGN I-9), estimated from its fields before
  // any work starts (server/request_limits.h). k * refine_factor of one query; past it:
  // INVALID_ARGUMENT. Default: 100000.
  int64_t max_candidates_per_query = 100000;
  // Working memory of one Search or Get (queries, candidates, per-segment tables, response);
  // past it: RESOURCE_EXHAUSTED. Default: 256 MiB.
  int64_t max_request_bytes = 256ll << 20;
  // The same estimate summed over every Search and Get running at once; past it:
  // RESOURCE_EXHAUSTED (retry with backoff). Default: 1 GiB.
  int64_t max_inflight_request_bytes = 1ll << 30;

  // cpu_threads and cache_bytes with 0 resolved against the container's limits and the
  // machine, with where each value came from (reads /proc and /sys/fs/cgroup).
  Sizing EffectiveSizing() const;

  // cache_bytes with 0 resolved against the machine.
  int64_t EffectiveCacheBytes() const;

  // cache_refine_bytes with 0 resolved (cache.bytes / 8).
  int64_t EffectiveRefineBytes() const;

  // cache_filter_bytes with 0 resolved (cache.bytes / 32).
  int64_t EffectiveFilterBytes() const;

  // cpu_threads with 0 resolved against the machine.
  int EffectiveCpuThreads() const;
};

struct LoadedConfig {
  Config config;
  bool api_key_on_command_line = false;  // --api-key: shoald warns (visible in ps)
  bool print_config = false;
  bool markdown = false;  // --print-config --markdown: docs/configuration.md
};

// Parses flags (argv), the environment and the YAML file. INVALID_ARGUMENT names the field.
absl::StatusOr<LoadedConfig> LoadConfig(int argc, char** argv);

// What start-up warns about: --api-key on the command line (other users see it in ps), and
// each listen address that is not loopback yet has no API key or no TLS. One line each.
std::vector<std::string> SecurityWarnings(const LoadedConfig& loaded);

// The effective config as commented YAML.
std::string PrintConfig(const Config& config);

// docs/configuration.md: every setting's key, environment variable, flag, default and meaning,
// from the same table the loader uses (defaults only, so the output does not depend on the
// machine or the environment). `make docs` regenerates the file; config_doc_test compares.
std::string ConfigMarkdown();

}  // namespace shoal::server
