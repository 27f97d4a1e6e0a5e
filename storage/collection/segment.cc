#include "storage/collection/segment.h"

#include <atomic>
#include <cstring>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status.h"
#include "storage/attributes/attribute_file.h"
#include "storage/collection/segment_writer.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/wal_format.h"

namespace shoal::storage {
namespace {
std::atomic<uint64_t> g_next_cache_id{1};

// Retries of a fetch whose shared cache load another query's cancellation or deadline ended.
// Each retry needs yet another query to stop first, so this only bounds a pathological chain.
constexpr int kMaxSharedLoadRetries = 8;

// A shared load failed because of the query that started it, not because of this fetch.
bool StoppedByAnotherQuery(const absl::Status& status, const core::PartitionFetch& fetch) {
  if (!absl::IsCancelled(status) && !absl::IsDeadlineExceeded(status)) return false;
  return !fetch.cancel || fetch.cancel->Check().ok();
}
}  // namespace

uint64_t CachedBytes(uint64_t length) { return AlignUp(std::max<uint64_t>(length, 1)); }

// An uncached partition's pin: its bytes, then its share of the UncachedBudget, which is
// returned only after the bytes are freed (members are destroyed in reverse order).
struct UncachedPin {
  UncachedBudget::Grant grant;
  std::shared_ptr<const void> bytes;
};

PartitionBytes Holdable(ReadResult read) {
  // A read lands in a pooled power-of-two buffer, or in one coalesced buffer shared with its
  // neighbours (up to io.max_request_bytes): holding it would keep up to twice the bytes, or
  // every neighbour's. The cache keeps an exact copy instead, CachedBytes() long.
  const uint64_t held = CachedBytes(read.size);
  if (read.buffer && read.buffer->capacity() <= held) {
    return PartitionBytes{read.buffer, read.data, read.size};
  }
  auto copy = std::make_shared<AlignedBuffer>(held);
  if (!*copy) return PartitionBytes{read.buffer, read.data, read.size};  // keep the original
  std::memcpy(copy->data(), read.data, read.size);
  const char* data = copy->data();
  return PartitionBytes{std::shared_ptr<const void>(std::move(copy)), data, read.size};
}

Segment::Segment(std::string dir, uint64_t id, IvfMeta meta, IoScheduler* scheduler,
                 PartitionCache* cache, uint32_t max_indexed_fields)
    : dir_(std::move(dir)),
      id_(id),
      meta_(std::move(meta)),
      model_(std::make_shared<const core::IvfModel>(meta_.model)),
      scheduler_(scheduler),
      cache_(cache),
      columns_(max_indexed_fields),
      cache_id_(g_next_cache_id.fetch_add(1)) {}

Segment::~Segment() {
  scheduler_->CloseFile(lists_file_);
  if (raw_) scheduler_->CloseFile(raw_file_);
}

absl::StatusOr<std::shared_ptr<Segment>> Segment::Open(FileSystem* fs, const std::string& dir,
                                                       uint64_t id, IoScheduler* scheduler,
                                                       PartitionCache* cache,
                                                       uint32_t max_indexed_fields) {
  const std::string meta_path = JoinPath(dir, "ivf.meta");
  SHOAL_ASSIGN_OR_RETURN(std::string meta_bytes, ReadFileToString(fs, meta_path));
  auto meta = DecodeIvfMeta(meta_bytes);
  if (!meta.ok()) {
    // The decoder knows only "ivf.meta": name the file, so an operator knows which segment.
    return absl::Status(meta.status().code(), absl::StrCat(dir, "/", meta.status().message()));
  }
  std::shared_ptr<Segment> s(
      new Segment(dir, id, *std::move(meta), scheduler, cache, max_indexed_fields));
  SHOAL_RETURN_IF_ERROR(s->LoadIndex(fs));
  s->disk_bytes_ += meta_bytes.size();
  return s;
}

absl::Status Segment::LoadIndex(FileSystem* fs) {
  const std::string lists_path = JoinPath(dir_, "lists.dat");
  SHOAL_ASSIGN_OR_RETURN(lists_, fs->NewRandomAccessFile(lists_path));
  SHOAL_ASSIGN_OR_RETURN(lists_file_, scheduler_->OpenFile(lists_path));
  disk_bytes_ += lists_->size();
  if (meta_.model.encoding != core::VectorEncoding::kFlat) {
    const std::string raw_path = JoinPath(dir_, "raw.dat");
    SHOAL_ASSIGN_OR_RETURN(raw_, fs->NewRandomAccessFile(raw_path));
    // Refine reads single rows at random: through the page cache, not one device read each.
    SHOAL_ASSIGN_OR_RETURN(raw_file_, scheduler_->OpenFile(raw_path, ReadMode::kBuffered));
    disk_bytes_ += raw_->size();
    if (raw_->size() != meta_.num_vectors * meta_.model.dim * sizeof(float)) {
      return absl::DataLossError(absl::StrCat(dir_, "/raw.dat: size does not match ivf.meta"));
    }
  }
  // Row locations, from the id section of every partition.
  uint64_t row_start = 0;
  std::vector<uint64_t> ids, row_ids;  // row_ids: every row's, in partition order
  for (uint32_t p = 0; p < meta_.nlist(); ++p) {
    const PartitionExtent& e = meta_.partitions[p];
    raw_row_start_.push_back(row_start);
    partition_bytes_.push_back(e.length);
    partition_rows_.push_back(e.count);
    row_start += e.count;
    if (e.offset + e.length > lists_->size()) {
      return absl::DataLossError(
          absl::StrCat(dir_, "/lists.dat: partition ", p, " extends past the end of the file"));
    }
    ids.resize(e.count);
    SHOAL_ASSIGN_OR_RETURN(
        size_t got, lists_->Read(e.offset, e.count * 8, reinterpret_cast<char*>(ids.data())));
    if (got != e.count * 8) return absl::DataLossError(absl::StrCat(dir_, ": short read"));
    for (uint32_t r = 0; r < e.count; ++r) where_[ids[r]] = {p, r};
    row_ids.insert(row_ids.end(), ids.begin(), ids.end());
  }
  return LoadAttributes(fs, std::move(row_ids));
}

absl::Status Segment::LoadAttributes(FileSystem* fs, std::vector<uint64_t> row_ids) {
  // Attributes: a version 2 file's columns (its rows' own attributes stay on disk), or a
  // version 1 file whole.
  const std::string attrs_path = JoinPath(dir_, "attrs.dat");
  SHOAL_ASSIGN_OR_RETURN(attrs_, fs->NewRandomAccessFile(attrs_path));
  disk_bytes_ += attrs_->size();
  auto named = [this](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(dir_, "/", s.message()));
  };
  std::string header(kAttributeFileHeaderBytes, '\0');
  SHOAL_ASSIGN_OR_RETURN(size_t got, attrs_->Read(0, header.size(), header.data()));
  header.resize(got);
  auto version = AttributeFileVersion(header);
  if (!version.ok()) return named(version.status());
  if (*version == 1) return LoadVersion1Attributes(fs, std::move(row_ids));
  auto layout = ReadAttributeLayout(*attrs_);
  if (!layout.ok()) return named(layout.status());
  if (layout->version != kAttributeFileVersion) {  // its header and directory agree: newer
    return absl::FailedPreconditionError(absl::StrCat(
        attrs_path, ": unknown version ", layout->version, " (written by a newer shoald?)"));
  }
  if (layout->rows != row_ids.size()) {
    return absl::DataLossError(
        absl::StrCat(attrs_path, ": ", layout->rows, " rows, ivf.meta has ", row_ids.size()));
  }
  std::vector<std::pair<std::string, FieldColumn>> columns;
  columns.reserve(layout->fields.size());
  for (size_t f = 0; f < layout->fields.size(); ++f) {
    auto column = ReadAttributeColumn(*attrs_, *layout, f);
    if (!column.ok()) return named(column.status());
    columns.emplace_back(layout->fields[f].key, *std::move(column));
  }
  columns_.Restore(std::move(row_ids), std::move(columns));
  attrs_layout_ = *std::move(layout);
  return absl::OkStatus();
}

absl::Status Segment::LoadVersion1Attributes(FileSystem* fs, std::vector<uint64_t> row_ids) {
  const std::string attrs_path = JoinPath(dir_, "attrs.dat");
  SHOAL_ASSIGN_OR_RETURN(std::string attrs, ReadFileToString(fs, attrs_path));
  attrs_.reset();
  if (attrs.size() < kAttributeFileHeaderBytes + 4 ||
      UnmaskCrc(DecodeFixed32(attrs.data() + attrs.size() - 4)) !=
          Crc32c(std::string_view(attrs).substr(0, attrs.size() - 4))) {
    return absl::DataLossError(absl::StrCat(attrs_path, ": bad checksum"));
  }
  Decoder in(std::string_view(attrs).substr(kAttributeFileHeaderBytes,
                                            attrs.size() - kAttributeFileHeaderBytes - 4));
  uint64_t n = 0;
  if (!in.GetVarint64(&n)) return absl::DataLossError(absl::StrCat(attrs_path, ": bad header"));
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id = 0;
    std::string_view bytes;
    if (!in.GetFixed64(&id) || !in.GetBytes(&bytes)) {
      return absl::DataLossError(absl::StrCat(attrs_path, ": truncated"));
    }
    attributes_[id] = std::string(bytes);
  }
  // The columns filters are evaluated on, in row (partition) order.
  static const std::string kNone;
  for (uint64_t id : row_ids) {
    auto a = attributes_.find(id);
    auto decoded = DecodeAttributes(a == attributes_.end() ? kNone : a->second);
    if (!decoded.ok()) {
      return absl::DataLossError(absl::StrCat(attrs_path, ": ", decoded.status().message()));
    }
    columns_.Append(id, *decoded);
  }
  columns_.Seal();
  return absl::OkStatus();
}

std::shared_ptr<const core::RowSelection> Segment::Select(const core::filter::Filter& filter,
                                                          const core::IdFilter& dead,
                                                          absl::Span<const Tombstone> newer) const {
  SelectionCache* cache = cache_ ? &cache_->selections() : nullptr;
  const std::shared_ptr<const core::RowSelection> matched = Matched(filter, cache);
  // Dead rows out: through the tombstones newer than the segment when they are fewer than the
  // selected rows (one lookup each), else by asking about every selected row. Without a dead
  // selected row the matches are the answer as they are, shared.
  RowBits bits(0);
  uint64_t cleared = 0;
  if (newer.size() < matched->matches()) {
    for (const Tombstone& t : newer) {
      auto it = where_.find(t.id);
      if (it == where_.end() || !matched->Selected(it->second.partition, it->second.row)) continue;
      if (cleared++ == 0) bits = CopyBits(*matched);
      bits.Clear(raw_row_start_[it->second.partition] + it->second.row);
    }
  } else if (!newer.empty()) {
    bits = CopyBits(*matched);
    cleared = columns_.ClearDead(&bits, dead);
  }
  if (cleared == 0) return matched;
  // Deletes hit selected rows: the live selection is cached too, under these deletes, so it is
  // built once per new delete, not once per search.
  SelectionCache::Deletes deletes{newer.size(), 0};
  for (const Tombstone& t : newer) deletes.last_seq = std::max(deletes.last_seq, t.seq);
  if (cache) {
    if (auto hit = cache->Lookup(cache_id_, filter.text(), deletes)) return hit;
  }
  std::shared_ptr<const core::RowSelection> live = WithoutDead(*matched, bits);
  if (cache) cache->Insert(cache_id_, filter.text(), live, deletes);
  return live;
}

std::shared_ptr<const core::RowSelection> Segment::Matched(const core::filter::Filter& filter,
                                                           SelectionCache* cache) const {
  std::shared_ptr<const core::RowSelection> matched =
      cache ? cache->Lookup(cache_id_, filter.text()) : nullptr;
  if (!matched) {
    matched = ToSelection(columns_.Select(filter, columns_.rows()));
    if (cache) cache->Insert(cache_id_, filter.text(), matched);
  } else if (matched->listed() && matched->matches() > 0 && !matched->listed_vectors()) {
    // Repeated, with few matches: their vectors are kept with the selection once the row cache
    // holds them all (the first search read them), so later searches score them in place.
    if (auto with = WithListedVectors(*matched, cache->budget() / kListedVectorsShare)) {
      cache->Replace(cache_id_, filter.text(), with);
      matched = std::move(with);
    }
  }
  return matched;
}

std::shared_ptr<const core::RowSelection> Segment::WithoutDead(const core::RowSelection& matched,
                                                               const RowBits& live_bits) const {
  std::shared_ptr<core::RowSelection> live = ToSelection(live_bits);
  if (!matched.listed_vectors() || !live->listed()) return live;
  // The kept vectors of the rows still selected (both lists are in row order).
  const size_t dim = meta_.model.dim;
  std::vector<float> vectors;
  vectors.reserve(live->matches() * dim);
  for (size_t i = 0; i < matched.listed_rows().size(); ++i) {
    if (!live_bits.Test(RowNumber(matched.listed_rows()[i]))) continue;
    const float* v = matched.listed_vectors() + i * dim;
    vectors.insert(vectors.end(), v, v + dim);
  }
  live->SetListedVectors(std::move(vectors));
  return live;
}

std::shared_ptr<const core::RowSelection> Segment::WithListedVectors(
    const core::RowSelection& selection, uint64_t max_bytes) const {
  const size_t dim = meta_.model.dim, bytes = dim * sizeof(float);
  if (selection.matches() * bytes > max_bytes) return nullptr;
  std::vector<std::shared_ptr<const float>> rows;
  rows.reserve(selection.listed_rows().size());
  PinnedPartition pinned;
  for (const core::RowRef& r : selection.listed_rows()) {
    rows.push_back(ResidentRow(r, &pinned, /*use=*/false));
    if (!rows.back()) return nullptr;
  }
  std::vector<float> vectors(rows.size() * dim);
  for (size_t i = 0; i < rows.size(); ++i) std::copy_n(rows[i].get(), dim, &vectors[i * dim]);
  auto copy = std::make_shared<core::RowSelection>(selection);
  copy->SetListedVectors(std::move(vectors));
  return copy;
}

RowBits Segment::CopyBits(const core::RowSelection& selection) const {
  RowBits bits(0);
  bits.rows = columns_.rows();
  bits.words = selection.words();
  return bits;
}

std::shared_ptr<core::RowSelection> Segment::ToSelection(const RowBits& bits) const {
  auto selection = std::make_shared<core::RowSelection>(partition_rows_, bits.words);
  if (selection->matches() <= core::RowSelection::kMaxListed) {
    selection->SetListedIds(columns_.IdsOf(bits));
  }
  return selection;
}

core::IvfSegmentRef Segment::Ref(std::shared_ptr<const core::IdFilter> dead) {
  core::IvfSegmentRef ref;
  ref.model = model_;
  ref.partition_bytes = partition_bytes_;  // one allocation each, no per-partition loop
  ref.partition_rows = partition_rows_;
  ref.source = shared_from_this();
  ref.dead = std::move(dead);
  return ref;
}

uint64_t Segment::RowNumber(const core::RowRef& row) const {
  return raw_row_start_[row.partition] + row.row;
}

std::pair<uint64_t, uint64_t> Segment::RawLocation(uint32_t partition, uint32_t row) const {
  const uint64_t vector_bytes = uint64_t(meta_.model.dim) * sizeof(float);
  if (raw_) return {raw_file_, (raw_row_start_[partition] + row) * vector_bytes};
  const PartitionExtent& e = meta_.partitions[partition];
  return {lists_file_, e.offset + e.count * 8 + row * vector_bytes};
}

absl::Status Segment::ReadVector(uint32_t partition, uint32_t row, float* out) const {
  const auto [file, offset] = RawLocation(partition, row);
  const size_t bytes = size_t(meta_.model.dim) * sizeof(float);
  const RandomAccessFile* f = file == lists_file_ ? lists_.get() : raw_.get();
  SHOAL_ASSIGN_OR_RETURN(size_t got, f->Read(offset, bytes, reinterpret_cast<char*>(out)));
  if (got != bytes) return absl::DataLossError(absl::StrCat(dir_, ": short vector read"));
  return absl::OkStatus();
}

absl::StatusOr<StoredPoint> Segment::ReadPoint(uint64_t id, bool include_vector) const {
  auto it = where_.find(id);
  if (it == where_.end()) return absl::NotFoundError(absl::StrCat("id ", id));
  StoredPoint p;
  p.id = id;
  if (attrs_layout_) {
    const uint64_t row = raw_row_start_[it->second.partition] + it->second.row;
    auto attributes = ReadRowAttributes(*attrs_, *attrs_layout_, row, 1);
    if (!attributes.ok()) {
      return absl::Status(attributes.status().code(),
                          absl::StrCat(dir_, "/", attributes.status().message()));
    }
    p.attributes = std::move(attributes->front());
  } else if (auto a = attributes_.find(id); a != attributes_.end()) {
    p.attributes = a->second;
  }
  if (include_vector) {
    p.vector.resize(meta_.model.dim);
    SHOAL_RETURN_IF_ERROR(ReadVector(it->second.partition, it->second.row, p.vector.data()));
  }
  return p;
}

absl::Status Segment::ForEachRow(
    const std::function<void(uint64_t, const float*, const std::string&)>& fn) const {
  static const std::string kNone;
  // Rows of a partition are read in runs of kRowsPerRead (their vectors are contiguous in
  // lists.dat or raw.dat), so memory stays bounded whatever the partition's size.
  constexpr uint32_t kRowsPerRead = 1024;
  const size_t dim = meta_.model.dim, vector_bytes = dim * sizeof(float);
  std::vector<float> vectors(kRowsPerRead * dim);
  std::vector<uint64_t> ids(kRowsPerRead);
  std::vector<char> buffer;
  for (uint32_t p = 0; p < meta_.nlist(); ++p) {
    const PartitionExtent& e = meta_.partitions[p];
    SHOAL_RETURN_IF_ERROR(VerifyPartition(p, &buffer));
    for (uint32_t r0 = 0; r0 < e.count; r0 += kRowsPerRead) {
      const uint32_t n = uint32_t(std::min<uint64_t>(kRowsPerRead, e.count - r0));
      SHOAL_ASSIGN_OR_RETURN(size_t got, lists_->Read(e.offset + uint64_t(r0) * 8, n * 8,
                                                      reinterpret_cast<char*>(ids.data())));
      if (got != n * 8) return absl::DataLossError(absl::StrCat(dir_, ": short read"));
      const uint64_t offset = RawLocation(p, r0).second;
      const RandomAccessFile* f = raw_ ? raw_.get() : lists_.get();
      SHOAL_ASSIGN_OR_RETURN(
          got, f->Read(offset, n * vector_bytes, reinterpret_cast<char*>(vectors.data())));
      if (got != n * vector_bytes) {
        return absl::DataLossError(absl::StrCat(dir_, ": short vector read"));
      }
      if (attrs_layout_) {
        auto attributes = ReadRowAttributes(*attrs_, *attrs_layout_, raw_row_start_[p] + r0, n);
        if (!attributes.ok()) {
          return absl::Status(attributes.status().code(),
                              absl::StrCat(dir_, "/", attributes.status().message()));
        }
        for (uint32_t r = 0; r < n; ++r) fn(ids[r], vectors.data() + r * dim, (*attributes)[r]);
        continue;
      }
      for (uint32_t r = 0; r < n; ++r) {
        auto a = attributes_.find(ids[r]);
        fn(ids[r], vectors.data() + r * dim, a == attributes_.end() ? kNone : a->second);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Segment::VerifyPartition(uint32_t p, std::vector<char>* buffer) const {
  constexpr uint64_t kChunk = 1 << 20;
  const PartitionExtent& e = meta_.partitions[p];
  buffer->resize(size_t(std::min(kChunk, e.length)));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < e.length;) {
    const size_t n = size_t(std::min<uint64_t>(kChunk, e.length - done));
    SHOAL_ASSIGN_OR_RETURN(size_t got, lists_->Read(e.offset + done, n, buffer->data()));
    if (got != n) return absl::DataLossError(absl::StrCat(dir_, ": short read of partition ", p));
    crc = Crc32c(std::string_view(buffer->data(), n), crc);
    done += n;
  }
  if (crc != e.crc32c) {
    return absl::DataLossError(
        absl::StrCat(dir_, "/lists.dat: partition ", p, " does not match its checksum"));
  }
  return absl::OkStatus();
}

void Segment::ReadPartition(uint32_t partition, const core::PartitionFetch& fetch,
                            PartitionRead done, bool on_completion) {
  const PartitionExtent& e = meta_.partitions[partition];
  ReadRequest r;
  r.dispatch_on_completion = on_completion;
  r.file = lists_file_;
  r.offset = e.offset;
  r.length = uint32_t(e.length);
  r.query = fetch.query_seq;
  r.rank = fetch.rank;
  if (fetch.cancel) r.deadline = fetch.cancel->deadline();
  scheduler_->Read(r, [self = shared_from_this(), partition, crc = e.crc32c,
                       done = std::move(done)](absl::StatusOr<ReadResult> result) mutable {
    if (result.ok() && Crc32c(std::string_view(result->data, result->size)) != crc) {
      result = absl::DataLossError(
          absl::StrCat(self->dir_, "/lists.dat: partition ", partition, " fails its checksum"));
    }
    std::move(done)(std::move(result));
  });
}

void Segment::Fetch(const core::PartitionFetch& fetch, FetchDone done) {
  FetchAttempt(fetch, std::move(done), 0);
}

std::optional<core::PartitionData> Segment::TryHit(uint32_t partition) const {
  std::optional<PartitionHandle> hit = cache_->TryGetHit({cache_id_, partition});
  if (!hit) return std::nullopt;
  auto pinned = std::make_shared<PartitionHandle>(*std::move(hit));
  core::PartitionData data;
  data.ids = reinterpret_cast<const uint64_t*>(pinned->data());
  data.codes = reinterpret_cast<const uint8_t*>(pinned->data() + partition_rows_[partition] * 8);
  data.count = partition_rows_[partition];
  data.cached = true;
  data.pin = std::move(pinned);
  return data;
}

std::shared_ptr<const float> Segment::ResidentRow(const core::RowRef& row, PinnedPartition* pinned,
                                                  bool use) const {
  const size_t bytes = size_t(meta_.model.dim) * sizeof(float);
  if (!raw_) {  // FLAT encoding: a partition's codes are its rows' float32 vectors
    if (pinned->partition != row.partition) {
      pinned->partition = row.partition;
      pinned->data = TryHit(row.partition);
    }
    if (pinned->data) {
      const uint8_t* v = pinned->data->codes + size_t(row.row) * bytes;
      return std::shared_ptr<const float>(pinned->data->pin, reinterpret_cast<const float*>(v));
    }
  }
  RowCache& cached = cache_->rows();
  return use ? cached.Lookup(cache_id_, RowNumber(row), bytes)
             : cached.Peek(cache_id_, RowNumber(row), bytes);
}

void Segment::FetchAttempt(const core::PartitionFetch& fetch, FetchDone done, int attempt) {
  if (fetch.cancel) {
    if (absl::Status s = fetch.cancel->Check(); !s.ok()) return std::move(done)(s);
  }
  const uint32_t partition = fetch.partition;
  const PartitionExtent& e = meta_.partitions[partition];
  if (std::optional<core::PartitionData> hit = TryHit(partition)) {
    // The common warm case: no loader, timing or callback objects to build.
    return std::move(done)(*std::move(hit));
  }
  struct Timing {
    uint64_t queue_us = 0, io_us = 0;
  };
  auto timing = std::make_shared<Timing>();
  auto to_data = [count = e.count](const char* bytes) {  // ids, then codes
    core::PartitionData data;
    data.ids = reinterpret_cast<const uint64_t*>(bytes);
    data.codes = reinterpret_cast<const uint8_t*>(bytes + count * 8);
    data.count = count;
    return data;
  };
  PartitionCache::Loader loader = [self = shared_from_this(), partition, fetch,
                                   timing](PartitionCache::LoadDone loaded) mutable {
    self->ReadPartition(partition, fetch,
                        [timing, loaded = std::move(loaded)](absl::StatusOr<ReadResult> r) mutable {
                          if (!r.ok()) return std::move(loaded)(r.status());
                          timing->queue_us = r->queue_us;
                          timing->io_us = r->kernel_us;
                          std::move(loaded)(Holdable(*std::move(r)));
                        });
  };
  cache_->Get(PartitionKey{cache_id_, partition}, CachedBytes(e.length),
              PartitionCache::Admission::kIfRoom, std::move(loader),
              [self = shared_from_this(), fetch, timing, to_data, length = e.length, attempt,
               done = std::move(done)](absl::StatusOr<PartitionHandle> handle) mutable {
                if (handle.status().code() == absl::StatusCode::kResourceExhausted) {
                  // No room next to what is pinned: read it for this query only.
                  return self->ReadUncached(fetch, std::move(done));
                }
                if (!handle.ok() && attempt < kMaxSharedLoadRetries &&
                    StoppedByAnotherQuery(handle.status(), fetch)) {
                  return self->FetchAttempt(fetch, std::move(done), attempt + 1);
                }
                if (!handle.ok()) return std::move(done)(handle.status());
                auto pinned = std::make_shared<PartitionHandle>(*std::move(handle));
                core::PartitionData data = to_data(pinned->data());
                data.cached = pinned->hit();
                data.bytes_read = pinned->hit() ? 0 : length;
                data.queue_us = timing->queue_us;
                data.io_us = timing->io_us;
                data.pin = std::move(pinned);
                std::move(done)(std::move(data));
              });
}

void Segment::ReadUncached(const core::PartitionFetch& fetch, FetchDone done) {
  const uint32_t partition = fetch.partition;
  // Charged what it will hold: Holdable() keeps at most CachedBytes(length) per partition.
  const uint64_t held = CachedBytes(meta_.partitions[partition].length);
  cache_->uncached().Acquire(
      fetch.query_seq, held,
      [self = shared_from_this(), fetch,
       done = std::move(done)](absl::StatusOr<UncachedBudget::Grant> grant) mutable {
        if (!grant.ok()) return std::move(done)(grant.status());
        if (fetch.cancel) {  // it may have waited: the query may be gone (the grant returns)
          if (absl::Status s = fetch.cancel->Check(); !s.ok()) return std::move(done)(s);
        }
        // While it waited another query may have loaded the partition into the cache.
        if (std::optional<core::PartitionData> hit = self->TryHit(fetch.partition)) {
          return std::move(done)(*std::move(hit));  // the grant returns unused
        }
        // Granted on whichever thread returned bytes, typically an arena task that just
        // scanned a partition: let the I/O thread submit the read when it is busy anyway.
        self->ReadPartition(
            fetch.partition, fetch,
            [count = self->meta_.partitions[fetch.partition].count, grant = *std::move(grant),
             done = std::move(done)](absl::StatusOr<ReadResult> r) mutable {
              if (!r.ok()) return std::move(done)(r.status());
              const uint32_t size = r->size;
              const uint64_t queue_us = r->queue_us, io_us = r->kernel_us;
              // A coalesced read shares one buffer with its neighbours: copy this partition
              // out, so the pin holds what the grant was charged and no more.
              PartitionBytes bytes = Holdable(*std::move(r));
              core::PartitionData data;
              data.ids = reinterpret_cast<const uint64_t*>(bytes.data);
              data.codes = reinterpret_cast<const uint8_t*>(bytes.data + count * 8);
              data.count = count;
              data.bytes_read = size;
              data.queue_us = queue_us;
              data.io_us = io_us;
              data.pin = std::make_shared<const UncachedPin>(
                  UncachedPin{std::move(grant), std::move(bytes.owner)});
              std::move(done)(std::move(data));
            },
            /*on_completion=*/true);
      });
}

void Segment::ReadRaw(std::vector<core::RowRef> rows, const core::PartitionFetch& priority,
                      RawDone done) {
  if (priority.cancel) {
    if (absl::Status s = priority.cancel->Check(); !s.ok()) return std::move(done)(s);
  }
  struct State {
    absl::Mutex mu;
    core::RawRows out ABSL_GUARDED_BY(mu);
    size_t remaining ABSL_GUARDED_BY(mu) = 0;
    absl::Status error ABSL_GUARDED_BY(mu);
    RawDone done;
  };
  const size_t dim = meta_.model.dim, bytes = dim * sizeof(float);
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  // Rows in memory (ResidentRow) are handed over as they are (no copy); rows in the kernel's
  // page cache are copied now (one RWF_NOWAIT read each, never blocking) and kept in the
  // RowCache; the rest are read asynchronously through the scheduler and kept once they arrive.
  RowCache& row_cache = cache_->rows();
  std::vector<size_t> missing;
  PinnedPartition pinned;
  absl::ReleasableMutexLock lock(&state->mu);  // uncontended: no read is issued yet
  state->out.rows.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t row = RowNumber(rows[i]);
    if (std::shared_ptr<const float> hit = ResidentRow(rows[i], &pinned, /*use=*/true)) {
      state->out.rows[i] = std::move(hit);
      continue;
    }
    const uint64_t offset = RawLocation(rows[i].partition, rows[i].row).second;
    std::shared_ptr<float[]> buffer = std::make_shared_for_overwrite<float[]>(dim);
    if (raw_ && raw_->ReadIfCached(offset, bytes, reinterpret_cast<char*>(buffer.get()))) {
      state->out.bytes_read += bytes;
      std::shared_ptr<const float> read(buffer, buffer.get());
      row_cache.Insert(cache_id_, row, read, bytes);
      state->out.rows[i] = std::move(read);
    } else {
      missing.push_back(i);
    }
  }
  state->remaining = missing.size();
  if (missing.empty()) {
    core::RawRows out = std::move(state->out);
    lock.Release();
    return std::move(state->done)(std::move(out));
  }
  lock.Release();
  IoScheduler::ScopedPlug plug(scheduler_);  // the rows reach the disk together, coalesced
  for (size_t i : missing) {
    const auto [file, offset] = RawLocation(rows[i].partition, rows[i].row);
    ReadRequest r;
    r.file = file;
    r.offset = offset;
    r.length = uint32_t(bytes);
    r.query = priority.query_seq;
    r.rank = 0;
    if (priority.cancel) r.deadline = priority.cancel->deadline();
    scheduler_->Read(r, [self = shared_from_this(), state, i, dim, bytes,
                         row = RowNumber(rows[i])](absl::StatusOr<ReadResult> result) {
      absl::Status error;
      core::RawRows out;
      std::shared_ptr<const float> read;
      if (result.ok() && result->size == bytes) {
        std::shared_ptr<float[]> buffer = std::make_shared_for_overwrite<float[]>(dim);
        std::memcpy(buffer.get(), result->data, bytes);
        read = std::shared_ptr<const float>(buffer, buffer.get());
        self->cache_->rows().Insert(self->cache_id_, row, read, bytes);
      }
      {
        absl::MutexLock lock(&state->mu);
        if (!result.ok()) {
          if (state->error.ok()) state->error = result.status();
        } else if (!read) {
          state->error = absl::DataLossError(absl::StrCat(self->dir_, ": short raw read"));
        } else {
          state->out.rows[i] = std::move(read);
          state->out.bytes_read += bytes;
        }
        if (--state->remaining != 0) return;
        error = state->error;
        out = std::move(state->out);
      }
      if (!error.ok()) return std::move(state->done)(std::move(error));
      std::move(state->done)(std::move(out));
    });
  }
}

}  // namespace shoal::storage
