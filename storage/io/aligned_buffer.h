// AlignedBuffer: heap memory aligned for O_DIRECT (4 KiB), and BufferPool, which recycles them
// by power-of-two size class so the read path does not hit the allocator per partition.
//
// Thread-safety: an AlignedBuffer is a plain owned value. BufferPool is thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
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
  AlignedBuffer() = default;
  // REQUIRES: capacity is a multiple of kDirectIoAlignment.
  explicit AlignedBuffer(size_t capacity)
      : data_(static_cast<char*>(std::aligned_alloc(kDirectIoAlignment, capacity))),
        capacity_(capacity) {}

  char* data() { return data_.get(); }
  const char* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t capacity_ = 0;
};

class BufferPool {
 public:
  // Keeps at most `max_cached_bytes` of idle buffers.
  explicit BufferPool(size_t max_cached_bytes = 64u << 20) : max_cached_(max_cached_bytes) {}

  // A buffer of at least `bytes` (rounded up to a power of two, at least 4 KiB).
  AlignedBuffer Get(size_t bytes);
  void Put(AlignedBuffer buffer);

  size_t cached_bytes() const {
    absl::MutexLock lock(&mu_);
    return cached_;
  }

 private:
  static size_t ClassOf(size_t bytes);

  const size_t max_cached_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<AlignedBuffer>> free_ ABSL_GUARDED_BY(mu_);  // index = size class
  size_t cached_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shoal::storage
