// Memtable: the vectors of a collection that are not in an IVF segment, held in memory and
// searched exactly.
//
// Rows live in fixed-size chunks that are allocated once and never move, so a search can scan
// a snapshot (a list of chunks and a row count) without holding any lock while it works (I-1).
// An upsert of an existing id appends a new row and flags the old one dead; a delete flags the
// row dead. Dead flags are atomics read during the scan, so a search running concurrently with
// a write may see it or not; every search that starts after a write was acknowledged sees it.
//
// Thread-safety: one writer at a time (Upsert/Delete: the WAL thread, or recovery), any number
// of concurrent readers (Snapshot/Get/counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/filter/filter.h"
#include "core/index/search_types.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/format/wal_format.h"

namespace shoal::storage {

struct StoredPoint {
  uint64_t id = 0;
  std::vector<float> vector;  // empty unless asked for
  std::string attributes;     // EncodeAttributes() bytes
};

class Memtable {
 public:
  // `max_indexed_fields`: the attribute fields that get value indexes (AttributeColumns).
  explicit Memtable(uint32_t dim,
                    uint32_t max_indexed_fields = AttributeColumns::kDefaultMaxIndexedFields);
  ~Memtable();

  Memtable(const Memtable&) = delete;
  Memtable& operator=(const Memtable&) = delete;

  // Writer side. REQUIRES: one caller at a time; point.vector.size() == dim.
  void Upsert(const PointRecord& point);
  // Returns whether the id was live.
  bool Delete(uint64_t id);

  // Reader side.
  core::FlatView Snapshot() const;
  std::optional<StoredPoint> Get(uint64_t id, bool include_vector) const;
  uint32_t dim() const { return dim_; }
  uint64_t live_count() const;
  uint64_t rows() const;  // every row written, dead ones too
  // Calls fn for every live row, in insertion order (a consistent prefix of the rows).
  void ForEachLive(const std::function<void(uint64_t id, const float* vector,
                                            const std::string& attributes)>& fn) const;
  uint64_t memory_bytes() const;  // vectors and attribute columns
  uint64_t attribute_memory_bytes() const { return columns_.memory_bytes(); }
  // The rows among the first `rows` (a Snapshot's rows) that `filter` selects, dead or not
  // (the scan skips dead rows by their flags).
  RowBits Select(const core::filter::Filter& filter, uint64_t rows) const {
    return columns_.Select(filter, rows);
  }

 private:
  struct Chunk;

  const uint32_t dim_;
  const size_t rows_per_chunk_;

  mutable absl::Mutex mu_;  // held only for short bookkeeping
  std::vector<std::shared_ptr<Chunk>> chunks_ ABSL_GUARDED_BY(mu_);
  size_t rows_ ABSL_GUARDED_BY(mu_) = 0;                                  // published rows
  absl::flat_hash_map<uint64_t, size_t> row_of_id_ ABSL_GUARDED_BY(mu_);  // live id -> row
  AttributeColumns columns_;  // row r is row r of the chunks
};

}  // namespace shoal::storage
