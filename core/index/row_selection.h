// RowSelection: the rows of one segment (or of the memtable) that a filtered search may answer
// — the filter's matches, dead rows already taken out — as a dense bitset over the rows in
// partition order, with each partition's match count. The scan tests a row in O(1); the planner
// skips partitions without a match and widens a query's probes until enough matching rows were
// scanned (ivf_search.h). A segment's partitions are its IVF lists; the memtable's are the
// blocks of its FlatView.
//
// Built once per search (by the storage layer, which knows the attributes and the dead rows),
// then immutable: thread-safe to share between the search's tasks and joiners' shared scans.
#pragma once

#include <cstdint>
#include <vector>

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
  uint32_t partitions() const { return uint32_t(per_partition_.size()); }
  // What the bitset costs in memory.
  uint64_t memory_bytes() const;

 private:
  std::vector<uint64_t> first_row_;      // per partition
  std::vector<uint64_t> per_partition_;  // matches per partition
  std::vector<uint64_t> words_;          // one bit per row
  uint64_t matches_ = 0;
};

}  // namespace shoal::core
