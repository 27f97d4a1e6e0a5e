// RowSelection: the rows of one segment (or of the memtable) that a filtered search may answer
// — the filter's matches, dead rows already taken out — as a dense bitset over the rows in
// partition order, with each partition's match count. The scan tests a row in O(1); the planner
// skips partitions without a match and widens a query's probes until enough matching rows were
// scanned (ivf_search.h). A segment's partitions are its IVF lists; the memtable's are the
// blocks of its FlatView.
//
// Built by the storage layer (which knows the attributes and the dead rows) once per search,
// or taken from its SelectionCache (storage/cache/selection_cache.h), then immutable:
// thread-safe to share between searches, their tasks and joiners' shared scans.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "core/index/partition_source.h"

namespace shoal::core {

class RowSelection {
 public:
  // partition_rows[p]: rows in partition p. Nothing is selected yet.
  explicit RowSelection(const std::vector<uint64_t>& partition_rows);

  // The rows set in `words` (one bit per row, in partition order). REQUIRES: words cover the
  // rows of partition_rows.
  RowSelection(const std::vector<uint64_t>& partition_rows, std::vector<uint64_t> words);

  // Building. REQUIRES: row < partition_rows[partition]; not shared yet.
  void Select(uint32_t partition, uint32_t row);

  bool Selected(uint32_t partition, uint32_t row) const {
    const uint64_t r = first_row_[partition] + row;
    return (words_[r >> 6] >> (r & 63)) & 1;
  }
  uint64_t matches() const { return matches_; }
  uint64_t matches_in(uint32_t partition) const { return per_partition_[partition]; }
  // Selected rows among rows [begin, end) of `partition`.
  uint64_t CountRange(uint32_t partition, uint64_t begin, uint64_t end) const;
  // Calls fn(row) for each selected row of `partition` in [begin, end), ascending.
  template <typename Fn>
  void ForEachSelected(uint32_t partition, uint64_t begin, uint64_t end, Fn fn) const {
    const uint64_t base = first_row_[partition];
    for (uint64_t r = base + begin, e = base + end; r < e;) {
      uint64_t bits = words_[r >> 6] >> (r & 63);
      const uint64_t take = std::min<uint64_t>(64 - (r & 63), e - r);
      if (take < 64) bits &= (uint64_t(1) << take) - 1;
      for (; bits != 0; bits &= bits - 1) fn(uint32_t(r - base + uint64_t(std::countr_zero(bits))));
      r += take;
    }
  }
  uint32_t partitions() const { return uint32_t(per_partition_.size()); }
  // What the bitset (and the listed ids) cost in memory.
  uint64_t memory_bytes() const;

  // Few matches (at most kMaxListed): the storage layer may also list the selected rows' ids,
  // in row order, so the engine can read just those rows' vectors (the exact_matches plan).
  static constexpr uint64_t kMaxListed = 16384;
  // REQUIRES: ids.size() == matches() <= kMaxListed; not shared yet.
  void SetListedIds(std::vector<uint64_t> ids);
  bool listed() const { return listed_; }
  const std::vector<uint64_t>& listed_ids() const { return listed_ids_; }
  // Listed: where the selected rows are, in row order (listed_ids()[i] is listed_rows()[i]'s).
  const std::vector<RowRef>& listed_rows() const { return listed_rows_; }
  // Where the selected rows are, in row order.
  std::vector<RowRef> SelectedRows() const;
  // Listed, as the filter cache may keep it: the listed rows' full-precision vectors, `dim`
  // floats each, contiguous in listed order, so a search scores them in place with no read;
  // null when not kept. REQUIRES (setting): listed(); vectors.size() == matches() * dim; not
  // shared yet.
  void SetListedVectors(std::vector<float> vectors) { listed_vectors_ = std::move(vectors); }
  const float* listed_vectors() const {
    return listed_vectors_.empty() ? nullptr : listed_vectors_.data();
  }
  // The bitset: bit r of words()[r / 64] is row r (partition order).
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> first_row_;      // per partition
  std::vector<uint64_t> per_partition_;  // matches per partition
  std::vector<uint64_t> words_;          // one bit per row
  uint64_t rows_ = 0;
  uint64_t matches_ = 0;
  bool listed_ = false;
  std::vector<uint64_t> listed_ids_;
  std::vector<RowRef> listed_rows_;
  std::vector<float> listed_vectors_;
};

}  // namespace shoal::core
