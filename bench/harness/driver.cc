#include "bench/harness/driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t NanosSince(Clock::time_point t, Clock::time_point now) {
  return now <= t ? 0
                  : uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(now - t).count());
}

}  // namespace

PointResult RunPoint(Target& target, const Dataset& d, const LoadSpec& spec,
                     const ProgressFn& progress) {
  PointResult result;
  const size_t total = spec.queries ? spec.queries : d.nq;
  const size_t batch = std::max<size_t>(1, spec.batch);
  const size_t requests = (total + batch - 1) / batch;
  const size_t clients = std::max<size_t>(1, std::min(spec.clients, requests));
  // In-process targets share the CPU budget among the concurrent requests.
  const int threads_per_request = std::max(1, spec.cpu_threads / int(clients));
  result.ids.assign(total * spec.k, -1);
  result.answered.assign(total, 0);

  std::vector<LatencyHistogram> histograms(clients);
  std::atomic<size_t> next_request{0}, sent{0}, answered{0}, errors{0};
  std::mutex error_mu;
  result.before = target.Usage();
  const auto start = Clock::now();
  const auto interval = spec.rate > 0 ? std::chrono::duration<double>(1.0 / spec.rate)
                                      : std::chrono::duration<double>(0);
  const auto stop_sending = spec.max_seconds > 0
                                ? start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(spec.max_seconds))
                                : Clock::time_point::max();

  auto worker = [&](size_t w) {
    std::vector<float> queries(batch * d.dim);
    for (size_t r; (r = next_request.fetch_add(1)) < requests;) {
      const size_t first = r * batch;
      const size_t count = std::min(batch, total - first);
      for (size_t i = 0; i < count; ++i) {
        std::copy_n(d.query((first + i) % d.nq), d.dim, queries.begin() + long(i * d.dim));
      }
      Clock::time_point due = Clock::now();
      if (spec.rate > 0) {
        due = start + std::chrono::duration_cast<Clock::duration>(interval * double(r));
        if (due >= stop_sending) break;
        std::this_thread::sleep_until(due);
      }
      if (Clock::now() >= stop_sending) break;
      ++sent;
      const absl::Status s = target.Search(queries.data(), count, spec.k, threads_per_request,
                                           result.ids.data() + first * spec.k);
      histograms[w].Record(NanosSince(due, Clock::now()));
      if (s.ok()) {
        std::fill_n(result.answered.begin() + long(first), count, uint8_t{1});
        answered += count;
      } else if (errors++ == 0) {
        std::lock_guard lock(error_mu);
        result.first_error = s.ToString();
      }
    }
  };

  std::vector<std::thread> pool;
  for (size_t w = 0; w < clients; ++w) pool.emplace_back(worker, w);
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  std::thread reporter([&] {
    std::unique_lock lock(done_mu);
    while (!done_cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return done; })) {
      if (progress) progress(answered.load(), total);
    }
  });
  for (auto& t : pool) t.join();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  {
    std::lock_guard lock(done_mu);
    done = true;
  }
  done_cv.notify_all();
  reporter.join();
  result.after = target.Usage();
  for (const auto& h : histograms) result.latency.Merge(h);
  result.queries = answered.load();
  result.errors = errors.load();
  if (spec.rate > 0 && spec.max_seconds > 0) {
    // Open-loop arrivals that were due before the time ran out but never sent: the target did
    // not keep up with the rate. Errors, rather than silently missing from the latencies.
    const size_t due = std::min(requests, size_t(std::ceil(spec.max_seconds * spec.rate)));
    if (due > sent.load()) {
      result.errors += due - sent.load();
      if (result.first_error.empty()) {
        result.first_error =
            absl::StrCat(due - sent.load(), " arrivals not sent within the point's time limit");
      }
    }
  }
  return result;
}

}  // namespace shoal::bench
