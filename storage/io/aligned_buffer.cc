#include "storage/io/aligned_buffer.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shoal::storage {

AlignedBuffer::AlignedBuffer(size_t capacity) {
  void* p = nullptr;
  if (capacity >= kMapThreshold) {
    p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
  } else if (capacity > 0) {
    p = std::aligned_alloc(kDirectIoAlignment, capacity);
  }
  if (p == nullptr) return;
  data_ = static_cast<char*>(p);
  capacity_ = capacity;
  live_.fetch_add(capacity_, std::memory_order_relaxed);
}

void AlignedBuffer::Release() {
  if (data_ == nullptr) return;
  live_.fetch_sub(capacity_, std::memory_order_relaxed);
  if (capacity_ >= kMapThreshold) {
    munmap(data_, capacity_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  capacity_ = 0;
}

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
