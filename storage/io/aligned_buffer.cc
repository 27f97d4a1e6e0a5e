#include "storage/io/aligned_buffer.h"

#include <bit>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shoal::storage {

size_t BufferPool::ClassOf(size_t bytes) {
  const size_t rounded = std::bit_ceil(std::max(bytes, kDirectIoAlignment));
  return size_t(std::countr_zero(rounded));
}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  idle_all_.fetch_sub(cached_, std::memory_order_relaxed);
}

AlignedBuffer BufferPool::Get(size_t bytes) {
  const size_t cls = ClassOf(bytes);
  {
    absl::MutexLock lock(&mu_);
    if (cls < free_.size() && !free_[cls].empty()) {
      AlignedBuffer b = std::move(free_[cls].back());
      free_[cls].pop_back();
      cached_ -= b.capacity();
      idle_all_.fetch_sub(b.capacity(), std::memory_order_relaxed);
      return b;
    }
  }
  return AlignedBuffer(size_t(1) << cls);
}

void BufferPool::Put(AlignedBuffer buffer) {
  if (!buffer) return;
  const size_t cls = ClassOf(buffer.capacity());
  if ((size_t(1) << cls) != buffer.capacity()) return;  // not one of ours: let it free
  absl::MutexLock lock(&mu_);
  if (cached_ + buffer.capacity() > max_cached_) return;
  if (free_.size() <= cls) free_.resize(cls + 1);
  cached_ += buffer.capacity();
  idle_all_.fetch_add(buffer.capacity(), std::memory_order_relaxed);
  free_[cls].push_back(std::move(buffer));
}

}  // namespace shoal::storage
