#include "core/index/row_selection.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "core/index/bit_count.h"

namespace shoal::core {

RowSelection::RowSelection(const std::vector<uint64_t>& partition_rows)
    : first_row_(partition_rows.size()), per_partition_(partition_rows.size(), 0) {
  uint64_t rows = 0;
  for (size_t p = 0; p < partition_rows.size(); ++p) {
    first_row_[p] = rows;
    rows += partition_rows[p];
  }
  words_.assign((rows + 63) / 64, 0);
  rows_ = rows;
}

RowSelection::RowSelection(const std::vector<uint64_t>& partition_rows, std::vector<uint64_t> words)
    : RowSelection(partition_rows) {
  const size_t n = words_.size();
  words_ = std::move(words);
  words_.resize(n, 0);
  for (uint32_t p = 0; p < partition_rows.size(); ++p) {
    per_partition_[p] = CountRange(p, 0, partition_rows[p]);
    matches_ += per_partition_[p];
  }
}

void RowSelection::Select(uint32_t partition, uint32_t row) {
  const uint64_t r = first_row_[partition] + row;
  uint64_t& word = words_[r >> 6];
  const uint64_t bit = uint64_t(1) << (r & 63);
  if (word & bit) return;
  word |= bit;
  ++per_partition_[partition];
  ++matches_;
}

uint64_t RowSelection::CountRange(uint32_t partition, uint64_t begin, uint64_t end) const {
  return CountBits(words_.data(), first_row_[partition] + begin, first_row_[partition] + end);
}

uint64_t RowSelection::memory_bytes() const {
  return (first_row_.capacity() + per_partition_.capacity() + words_.capacity() +
          listed_ids_.capacity()) *
             sizeof(uint64_t) +
         listed_rows_.capacity() * sizeof(RowRef) + listed_vectors_.capacity() * sizeof(float);
}

void RowSelection::SetListedIds(std::vector<uint64_t> ids) {
  listed_ids_ = std::move(ids);
  listed_rows_ = SelectedRows();
  listed_ = true;
}

std::vector<RowRef> RowSelection::SelectedRows() const {
  std::vector<RowRef> out;
  out.reserve(matches_);
  for (uint32_t p = 0; p < per_partition_.size(); ++p) {
    if (per_partition_[p] == 0) continue;
    const uint64_t begin = first_row_[p];
    const uint64_t end = p + 1 < first_row_.size() ? first_row_[p + 1] : rows_;
    for (uint64_t r = begin; r < end;) {
      const uint64_t word = words_[r >> 6] >> (r & 63);
      if (word == 0) {
        r = (r | 63) + 1;
        continue;
      }
      r += uint64_t(std::countr_zero(word));
      if (r >= end) break;
      out.push_back({p, uint32_t(r - begin)});
      ++r;
    }
  }
  return out;
}

}  // namespace shoal::core
