// Metrics: the Prometheus series shoald exports on /metrics.
//
//   shoal_rpc_requests_total{method,code}      counter
//   shoal_rpc_latency_seconds{method}          histogram
//   shoal_wal_fsync_seconds                    histogram (group commits)
//   shoal_collection_vectors{collection}       gauge, refreshed at scrape time
//   shoal_collection_disk_bytes{collection}    gauge, refreshed at scrape time
//   shoal_search_inflight                      gauge
//   shoal_search_queries_per_scan              histogram (queries one partition scan scored)
//   shoal_search_requests_per_batch            histogram (searches merged into one engine batch)
//   shoal_rpc_inflight                         gauge (every RPC from arrival to OnDone)
//   shoal_admission_refusals_total{reason}     counter (RESOURCE_EXHAUSTED at admission)
//   shoal_cpu_arena_threads, shoal_cpu_arena_busy_seconds_total, shoal_cpu_arena_queued_tasks
//   shoal_io_backend{backend}                  1 for the backend in use (uring or pread)
//   shoal_io_reads_total, shoal_io_submissions_total, shoal_io_read_bytes_total,
//   shoal_io_errors_total, shoal_io_cancelled_total, shoal_io_expired_total,
//   shoal_io_read_seconds_total
//   shoal_cache_hits_total, shoal_cache_misses_total, shoal_cache_evictions_total,
//   shoal_cache_bytes{state="used"|"pinned"}, shoal_cache_budget_bytes
//   shoal_refine_cache_hits_total, shoal_refine_cache_misses_total,
//   shoal_refine_cache_evictions_total, shoal_refine_cache_bytes{state="used"|"budget"}
//   shoal_filter_cache_hits_total, shoal_filter_cache_misses_total,
//   shoal_filter_cache_evictions_total, shoal_filter_cache_bytes{state="used"|"budget"}
//   shoal_process_heap_allocations_total       counter (shoald only: server/alloc_counter.h)
//   shoal_simd_level{level}, shoal_build_info{version}
//
// Thread-safety: every method is thread-safe (prometheus-cpp metrics are atomic; label sets
// are added under the family's own lock).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace shoal::server {

struct CollectionSample {
  std::string name;
  double vectors = 0;
  double disk_bytes = 0;
};

// One of the PartitionCache's side caches, sampled at scrape time: counters and bytes.
struct CacheTierSample {
  double hits = 0, misses = 0, evictions = 0, used = 0, budget = 0;
};

// Cumulative counters sampled at scrape time (from IoScheduler and PartitionCache stats).
struct StorageSample {
  double io_reads = 0, io_submissions = 0, io_bytes = 0, io_errors = 0, io_cancelled = 0,
         io_expired = 0;
  double cache_hits = 0, cache_misses = 0, cache_evictions = 0;
  double cache_used = 0, cache_pinned = 0, cache_budget = 0;
  CacheTierSample refine;        // the RowCache: shoal_refine_cache_*
  CacheTierSample filter;        // the SelectionCache: shoal_filter_cache_*
  double io_kernel_seconds = 0;  // kernel time of every submission, summed
};

struct ArenaSample {
  double threads = 0;
  double busy_seconds = 0;
  double queued = 0;
};

// Why a request was refused at admission with RESOURCE_EXHAUSTED (the `reason` label).
enum class Refusal {
  kServerSlots,    // search.max_inflight: every search slot of the server is taken
  kPeerSlots,      // server.max_inflight_per_peer: this connection holds its share
  kInflightBytes,  // limits.max_inflight_request_bytes: the running requests' memory estimate
};

class Metrics {
 public:
  Metrics();

  // Exports shoal_io_backend{backend=name} 1. Call once, at start-up.
  void SetIoBackend(const std::string& name);

  void ObserveRpc(const std::string& method, int code, double seconds);
  void ObserveWalFsync(double seconds) { wal_fsync_->Observe(seconds); }
  prometheus::Gauge& search_inflight() { return *search_inflight_; }
  void ObserveQueriesPerScan(size_t queries) { queries_per_scan_->Observe(double(queries)); }
  void ObserveRequestsPerBatch(size_t searches) { requests_per_batch_->Observe(double(searches)); }
  void CountRefusal(Refusal reason) { refusals_[int(reason)]->Increment(); }

  // Brackets every RPC, so shutdown can wait for the in-flight ones to finish.
  void RpcStarted() {
    rpc_inflight_count_.fetch_add(1);
    rpc_inflight_->Increment();
  }
  void RpcDone() {
    rpc_inflight_count_.fetch_sub(1);
    rpc_inflight_->Decrement();
  }
  int64_t rpcs_in_flight() const { return rpc_inflight_count_.load(); }

  // Renders the text exposition format after refreshing the sampled gauges.
  std::string Render(const std::vector<CollectionSample>& collections, const ArenaSample& arena,
                     const StorageSample& storage);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Gauge>* vectors_;
  prometheus::Family<prometheus::Gauge>* disk_bytes_;
  prometheus::Histogram* wal_fsync_;
  prometheus::Gauge* search_inflight_;
  prometheus::Histogram* queries_per_scan_;
  prometheus::Histogram* requests_per_batch_;
  prometheus::Counter* refusals_[3];  // by Refusal
  prometheus::Gauge* rpc_inflight_;
  std::atomic<int64_t> rpc_inflight_count_{0};
  prometheus::Gauge* arena_threads_;
  prometheus::Gauge* arena_queued_;
  prometheus::Counter* arena_busy_;
  // Sampled cumulative counters and gauges, by name.
  absl::Mutex mu_;  // guards the maps below and serialises Render
  std::map<std::string, prometheus::Counter*> sampled_counters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Gauge*> sampled_gauges_ ABSL_GUARDED_BY(mu_);
  void SetCounter(const std::string& name, double value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // shoal_<tier>_cache_{hits,misses,evictions}_total and shoal_<tier>_cache_bytes.
  void SetTier(const std::string& tier, const CacheTierSample& sample)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::map<std::pair<std::string, int>, prometheus::Counter*> request_counters_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, prometheus::Histogram*> latency_histograms_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<prometheus::Gauge*, prometheus::Gauge*>> collection_gauges_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace shoal::server
