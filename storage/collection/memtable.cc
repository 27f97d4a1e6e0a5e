#include "storage/collection/memtable.h"

#include <algorithm>
#include <cstring>

namespace shoal::storage {

struct Memtable::Chunk {
  Chunk(size_t rows, uint32_t dim)
      : vectors(new float[rows * dim]),
        ids(new uint64_t[rows]),
        dead(new std::atomic<uint8_t>[rows]),
        attributes(rows) {
    for (size_t i = 0; i < rows; ++i) dead[i].store(0, std::memory_order_relaxed);
  }
  std::unique_ptr<float[]> vectors;
  std::unique_ptr<uint64_t[]> ids;
  std::unique_ptr<std::atomic<uint8_t>[]> dead;
  std::vector<std::string> attributes;
};

namespace {
// About 4 MiB of vectors per chunk, at least 16 rows, at most 4096.
size_t RowsPerChunk(uint32_t dim) {
  const size_t row_bytes = size_t(dim) * sizeof(float);
  return std::clamp<size_t>((4u << 20) / std::max<size_t>(row_bytes, 1), 16, 4096);
}
}  // namespace

Memtable::Memtable(uint32_t dim, uint32_t max_indexed_fields)
    : dim_(dim), rows_per_chunk_(RowsPerChunk(dim)), columns_(max_indexed_fields) {}
Memtable::~Memtable() = default;

void Memtable::Upsert(const PointRecord& point) {
  // Rows at or past rows_ are invisible to readers, so the row is filled without the lock.
  size_t row;
  std::shared_ptr<Chunk> chunk;
  {
    absl::MutexLock lock(&mu_);
    row = rows_;
    if (row / rows_per_chunk_ >= chunks_.size()) {
      chunks_.push_back(std::make_shared<Chunk>(rows_per_chunk_, dim_));
    }
    chunk = chunks_[row / rows_per_chunk_];
  }
  const size_t slot = row % rows_per_chunk_;
  std::memcpy(chunk->vectors.get() + slot * dim_, point.vector.data(), dim_ * sizeof(float));
  chunk->ids[slot] = point.id;
  chunk->attributes[slot] = point.attributes;
  // Row `row` of the columns (they are appended in the same order); bytes that do not decode
  // (never: the server encoded them) leave the row without attributes.
  auto decoded = DecodeAttributes(point.attributes);
  columns_.Append(point.id, decoded.ok() ? *decoded : core::Attributes{});

  absl::MutexLock lock(&mu_);
  auto [it, inserted] = row_of_id_.try_emplace(point.id, row);
  if (!inserted) {
    const size_t old = it->second;
    chunks_[old / rows_per_chunk_]->dead[old % rows_per_chunk_].store(1, std::memory_order_release);
    it->second = row;
  }
  rows_ = row + 1;
}

void Memtable::ForEachLive(
    const std::function<void(uint64_t, const float*, const std::string&)>& fn) const {
  std::vector<std::shared_ptr<Chunk>> chunks;
  size_t rows;
  {
    absl::MutexLock lock(&mu_);
    chunks = chunks_;
    rows = rows_;
  }
  for (size_t r = 0; r < rows; ++r) {
    const Chunk& c = *chunks[r / rows_per_chunk_];
    const size_t slot = r % rows_per_chunk_;
    if (c.dead[slot].load(std::memory_order_acquire)) continue;
    fn(c.ids[slot], c.vectors.get() + slot * dim_, c.attributes[slot]);
  }
}

bool Memtable::Delete(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = row_of_id_.find(id);
  if (it == row_of_id_.end()) return false;
  const size_t row = it->second;
  chunks_[row / rows_per_chunk_]->dead[row % rows_per_chunk_].store(1, std::memory_order_release);
  row_of_id_.erase(it);
  return true;
}

core::FlatView Memtable::Snapshot() const {
  auto chunks = std::make_shared<std::vector<std::shared_ptr<Chunk>>>();
  size_t rows;
  {
    absl::MutexLock lock(&mu_);
    *chunks = chunks_;
    rows = rows_;
  }
  core::FlatView view;
  view.dim = dim_;
  for (const auto& chunk : *chunks) {
    const size_t n = std::min(rows, rows_per_chunk_);
    if (n == 0) break;
    view.blocks.push_back({chunk->vectors.get(), chunk->ids.get(), chunk->dead.get(), n});
    rows -= n;
  }
  view.keepalive = std::move(chunks);
  return view;
}

std::optional<StoredPoint> Memtable::Get(uint64_t id, bool include_vector) const {
  absl::MutexLock lock(&mu_);
  auto it = row_of_id_.find(id);
  if (it == row_of_id_.end()) return std::nullopt;
  const Chunk& chunk = *chunks_[it->second / rows_per_chunk_];
  const size_t slot = it->second % rows_per_chunk_;
  StoredPoint point;
  point.id = id;
  point.attributes = chunk.attributes[slot];
  if (include_vector) {
    const float* v = chunk.vectors.get() + slot * dim_;
    point.vector.assign(v, v + dim_);
  }
  return point;
}

uint64_t Memtable::live_count() const {
  absl::MutexLock lock(&mu_);
  return row_of_id_.size();
}

uint64_t Memtable::rows() const {
  absl::MutexLock lock(&mu_);
  return rows_;
}

uint64_t Memtable::memory_bytes() const {
  uint64_t chunk_bytes;
  {
    absl::MutexLock lock(&mu_);
    chunk_bytes =
        chunks_.size() * rows_per_chunk_ * (dim_ * sizeof(float) + 9 + sizeof(std::string));
  }
  return chunk_bytes + columns_.memory_bytes();
}

}  // namespace shoal::storage
