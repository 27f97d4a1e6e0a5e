// AlignedBuffer: heap memory aligned for O_DIRECT (4 KiB), and BufferPool, which recycles them
// by power-of-two size class so the read path does not hit the allocator per partition.
//
// Buffers of kMapThreshold bytes or more are mapped from the kernel directly (mmap), not taken
// from malloc's heap: freeing one returns its pages at once, so the RSS of cached partitions
// follows the cache's charge instead of the heap's fragmentation.
//
// Accounting: AlignedBuffer::live_bytes() is the capacity of every buffer alive in the process
// and BufferPool::idle_bytes_all() what pools hold idle, so that what the partition cache
// charges can be checked against what is really allocated (tests; the cache's bytes gauge).
//
// Thread-safety: an AlignedBuffer is a plain owned value. BufferPool is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shoal::storage {

inline constexpr size_t kDirectIoAlignment = 4096;

// Rounds n up to a multiple of the O_DIRECT alignment.
constexpr uint64_t AlignUp(uint64_t n) {
  return (n + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}
constexpr uint64_t AlignDown(uint64_t n) { return n / kDirectIoAlignment * kDirectIoAlignment; }

class AlignedBuffer {
 public:
  static constexpr size_t kMapThreshold = 64 << 10;

  AlignedBuffer() = default;
  // REQUIRES: capacity is a multiple of kDirectIoAlignment.
  explicit AlignedBuffer(size_t capacity);
  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { Release(); }

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }

  // Capacity of every AlignedBuffer alive in the process.
  static uint64_t live_bytes() { return live_.load(std::memory_order_relaxed); }

 private:
  void Release();
  static inline std::atomic<uint64_t> live_{0};
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  // Keeps at most `max_cached_bytes` of idle buffers (memory outside cache.bytes: part of the
  // documented overhead, so kept small).
  explicit BufferPool(size_t max_cached_bytes = 8u << 20) : max_cached_(max_cached_bytes) {}
  ~BufferPool();

  // A buffer of at least `bytes` (rounded up to a power of two, at least 4 KiB).
  AlignedBuffer Get(size_t bytes);
  void Put(AlignedBuffer buffer);

  size_t cached_bytes() const {
    absl::MutexLock lock(&mu_);
    return cached_;
  }
  // Idle bytes of every pool in the process.
  static uint64_t idle_bytes_all() { return idle_all_.load(std::memory_order_relaxed); }

 private:
  static size_t ClassOf(size_t bytes);

  const size_t max_cached_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<AlignedBuffer>> free_ ABSL_GUARDED_BY(mu_);  // index = size class
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
  static inline std::atomic<uint64_t> idle_all_{0};
};

}  // namespace shoal::storage
