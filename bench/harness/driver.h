// Driver: runs one measured point — a stream of queries against a Target in one of three ways —
// and collects latency, throughput, the answers and the target's resource use.
//
//   closed loop  `clients` threads, each sends its next request when the previous one answers
//                (throughput at a given concurrency)
//   open loop    requests arrive at `rate` per second on a fixed schedule, whatever the answers
//                do; latency is measured from the scheduled arrival, so queueing behind a slow
//                answer is counted (no coordinated omission); `clients` bounds requests in
//                flight
//   batch        `batch` queries per request (closed loop)
//
// A point ends when every query was sent and answered, or `max_seconds` after it started (no new
// request is sent after that; the ones in flight finish): a slow target costs bounded time.
//
// Thread-safety: Run() is called from one thread; it starts and joins its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/harness/dataset.h"
#include "bench/harness/latency_histogram.h"
#include "bench/harness/target.h"

namespace shoal::bench {

struct LoadSpec {
  size_t clients = 1;  // concurrent requests at most
  size_t batch = 1;    // queries per request
  double rate = 0;     // requests per second; 0 = closed loop
  size_t queries = 0;  // queries to send (cycling through the dataset's); 0 = all once
  uint32_t k = 10;
  int cpu_threads = 1;     // in-process targets: threads the whole point may use
  double max_seconds = 0;  // stop sending new requests after this long; 0 = no limit
};

struct PointResult {
  LatencyHistogram latency;  // per request
  double seconds = 0;
  size_t queries = 0;  // answered
  size_t errors = 0;   // requests that failed
  std::string first_error;
  std::vector<int64_t> ids;       // answers: queries * k, by query order sent
  std::vector<uint8_t> answered;  // per query sent: 1 when its request succeeded
  ResourceUsage before, after;
};

// Called about twice a second from the driver's own thread: (queries answered, of total).
using ProgressFn = std::function<void(size_t done, size_t total)>;

PointResult RunPoint(Target& target, const Dataset& d, const LoadSpec& spec,
                     const ProgressFn& progress = nullptr);

}  // namespace shoal::bench
