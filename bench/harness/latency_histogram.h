// LatencyHistogram: HdrHistogram-style log-linear buckets over nanoseconds — 128 linear
// sub-buckets per power of two, so any recorded value is known to within 0.8% — in fixed memory
// (64 KiB) whatever the number of samples. Percentiles come from the buckets, not from a sorted
// vector of every sample.
//
// Thread-safety: none; one histogram per thread, Merge() them afterwards.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace shoal::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 7;
  static constexpr uint64_t kMaxTrackableNs = uint64_t(1) << 42;  // ~73 minutes; larger clamp

  void Record(uint64_t ns);
  void Merge(const LatencyHistogram& other);

  uint64_t count() const { return count_; }
  uint64_t min_ns() const { return count_ ? min_ : 0; }
  uint64_t max_ns() const { return max_; }
  double mean_ns() const { return count_ ? double(sum_) / double(count_) : 0; }
  // The value at quantile p in [0, 1] (0.5 = median), clamped to [min, max]; 0 when empty.
  double Percentile(double p) const;
  // (upper edge of a non-empty bucket in ns, fraction of samples <= it), ascending: a CDF.
  std::vector<std::pair<double, double>> Cdf() const;

  // Bucket arithmetic, exposed for tests.
  static size_t BucketOf(uint64_t ns);
  static uint64_t BucketLow(size_t bucket);   // smallest value in the bucket
  static uint64_t BucketHigh(size_t bucket);  // largest value in the bucket

 private:
  static constexpr size_t kSub = size_t(1) << kSubBucketBits;
  static constexpr size_t kBuckets = 64 * kSub;

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

}  // namespace shoal::bench
