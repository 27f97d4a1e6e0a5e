// PartitionSource: where the IVF query engine gets the bytes of one segment's partitions and,
// for refine, the full-precision vectors of single rows. storage/ implements it over the
// IoScheduler and the PartitionCache; tests implement it in memory with completions they
// release in any order they like.
//
// Contract: every call answers exactly once, with data or an error, on any thread — possibly
// inline, before the call returns (CancelQuery's answers run on the caller's thread). Callbacks
// must not block (they run on the I/O thread).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/base/cancel.h"

namespace shoal::core {

struct PartitionFetch {
  uint32_t partition = 0;
  uint64_t query_seq = 0;  // smaller = older; the I/O scheduler serves older queries first
  uint32_t rank = 0;       // the partition's probe rank in its query, 0 = nearest
  std::shared_ptr<const CancelToken> cancel;  // may be null
};

// One partition's rows: `count` codes of the segment's code size, then `count` ids. Valid
// while `pin` is held; dropping it unpins the partition in the cache.
struct PartitionData {
  const uint8_t* codes = nullptr;
  const uint64_t* ids = nullptr;
  size_t count = 0;
  std::shared_ptr<const void> pin;
  bool cached = false;      // answered from memory, no read
  uint64_t bytes_read = 0;  // bytes read from disk for this answer
  uint64_t queue_us = 0;    // waiting in the I/O scheduler
  uint64_t io_us = 0;       // in the kernel
};

struct RowRef {
  uint32_t partition = 0;
  uint32_t row = 0;  // index within the partition
};

// rows[i]: the full-precision vector (dim floats) of the i-th row asked for, valid while
// rows[i] is held. It may be a cache's entry or share one buffer with other rows: refine reads
// it in place, with no copy.
struct RawRows {
  std::vector<std::shared_ptr<const float>> rows;
  uint64_t bytes_read = 0;
};

class PartitionSource {
 public:
  using FetchDone = absl::AnyInvocable<void(absl::StatusOr<PartitionData>) &&>;
  using RawDone = absl::AnyInvocable<void(absl::StatusOr<RawRows>) &&>;

  virtual ~PartitionSource() = default;

  virtual void Fetch(const PartitionFetch& fetch, FetchDone done) = 0;
  // Full-precision vectors of `rows` (refine for SQ8/PQ segments).
  virtual void ReadRaw(std::vector<RowRef> rows, const PartitionFetch& priority, RawDone done) = 0;

  // Fetch() calls this thread makes between BeginBatch() and the matching EndBatch() may be
  // held back and reach the disk together at EndBatch(), in priority order (the engine issues
  // one request's fetches this way). EndBatch() never blocks. Default: nothing.
  virtual void BeginBatch() {}
  virtual void EndBatch() {}

  // The query `query_seq` stopped (cancelled, expired or failed): its fetches and raw reads
  // that have not reached the disk yet may answer now, with CANCELLED, instead of waiting for
  // their turn. Other queries' fetches must not fail because of it. Default: nothing.
  virtual void CancelQuery(uint64_t /*query_seq*/) {}
};

}  // namespace shoal::core
