#include "bench/harness/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace shoal::bench {

size_t LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < 2 * kSub) return size_t(ns);  // exact below 256 ns
  const int msb = 63 - __builtin_clzll(ns);
  const int shift = msb - kSubBucketBits;  // >= 1
  return size_t(shift + 1) * kSub + size_t((ns >> shift) - kSub);
}

uint64_t LatencyHistogram::BucketLow(size_t bucket) {
  if (bucket < 2 * kSub) return bucket;
  const int shift = int(bucket / kSub) - 1;
  return (uint64_t(bucket % kSub) + kSub) << shift;
}

uint64_t LatencyHistogram::BucketHigh(size_t bucket) {
  if (bucket < 2 * kSub) return bucket;
  const int shift = int(bucket / kSub) - 1;
  return BucketLow(bucket) + (uint64_t(1) << shift) - 1;
}

void LatencyHistogram::Record(uint64_t ns) {
  ns = std::min(ns, kMaxTrackableNs);
  ++counts_[BucketOf(ns)];
  ++count_;
  sum_ += ns;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

double LatencyHistogram::Percentile(double p) const {
  if (count_ == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, uint64_t(std::ceil(std::clamp(p, 0.0, 1.0) * double(count_))));
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) {
      // The bucket's midpoint, within the values actually seen.
      const double mid = (double(BucketLow(i)) + double(BucketHigh(i))) / 2;
      return std::clamp(mid, double(min_), double(max_));
    }
  }
  return double(max_);
}

std::vector<std::pair<double, double>> LatencyHistogram::Cdf() const {
  std::vector<std::pair<double, double>> cdf;
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets && seen < count_; ++i) {
    if (counts_[i] == 0) continue;
    seen += counts_[i];
    cdf.emplace_back(std::min(double(BucketHigh(i)), double(max_)), double(seen) / double(count_));
  }
  return cdf;
}

}  // namespace shoal::bench
