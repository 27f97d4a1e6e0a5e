// Segment: one opened, immutable IVF segment directory (storage/collection/segment_writer.h)
// and the PartitionSource the query engine reads it through.
//
// Fetch() answers from the PartitionCache or reads the partition through the IoScheduler
// (O_DIRECT, the query's priority and deadline), verifies its CRC32C and inserts it into the
// cache. A partition that does not fit the cache's budget next to what is pinned is read
// uncached: the bytes live exactly as long as the query's pin; the query's own pinned-bytes
// budget bounds them per request, and the cache's UncachedBudget (cache.uncached_bytes) across
// the process — such a read waits for its bytes before it is issued, oldest query first, and
// the oldest query always gets one (I-4: a full cache never stops a query, nor grows the process
// without bound); once granted it is answered from the cache instead if another query loaded
// the partition meanwhile. ReadRaw() reads single rows' full-precision vectors (for refine and
// the exact_matches plan): from memory when they are there (a FLAT-encoded segment's cached
// partition, whose codes are the vectors, or the cache's RowCache), else from the kernel's page
// cache or the disk, keeping what it read in the RowCache.
//
// Cancellation: reads carry the query's sequence number, and CancelQuery() takes the query's
// queued reads out of the IoScheduler and its waiting uncached reads out of the UncachedBudget. A
// cached load is shared by every query that asks for the partition while it loads, but carries the
// id of the query that started it: when that query is cancelled (or its deadline passes first), the
// queries still waiting retry with a read of their own instead of failing with it.
//
// Open() also loads each row's location (for Get) and the attribute columns with their value
// indexes (AttributeColumns, storage/attributes), which Select() evaluates filters on. A row's
// own attributes stay in attrs.dat (storage/attributes/attribute_file.h) until ReadPoint or
// ForEachRow reads them; a version 1 attrs.dat is read whole and kept by id instead.
//
// Thread-safety: every method is thread-safe. Reads in flight keep the Segment alive.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "core/filter/filter.h"
#include "core/index/ivf_search.h"
#include "core/index/row_selection.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/attributes/attribute_file.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/memtable.h"
#include "storage/format/manifest_format.h"
#include "storage/format/segment_format.h"
#include "storage/io/file_system.h"
#include "storage/sched/io_scheduler.h"

namespace shoal::storage {

// What the cache is charged for a partition of `length` bytes: the exact buffer it holds,
// rounded up to the 4 KiB O_DIRECT alignment.
uint64_t CachedBytes(uint64_t length);
// The bytes of a finished read as the cache should hold them: the read's own buffer when it is
// no larger than CachedBytes(size), else a CachedBytes(size) copy (the pooled or coalesced
// buffer then goes back to the I/O pool).
PartitionBytes Holdable(ReadResult read);

class Segment final : public core::PartitionSource, public std::enable_shared_from_this<Segment> {
 public:
  // REQUIRES: scheduler and cache outlive the Segment. `max_indexed_fields`: the attribute
  // fields that get value indexes (AttributeColumns).
  static absl::StatusOr<std::shared_ptr<Segment>> Open(
      FileSystem* fs, const std::string& dir, uint64_t id, IoScheduler* scheduler,
      PartitionCache* cache,
      uint32_t max_indexed_fields = AttributeColumns::kDefaultMaxIndexedFields);
  ~Segment() override;

  uint64_t id() const { return id_; }
  const IvfMeta& meta() const { return meta_; }
  const std::shared_ptr<const core::IvfModel>& model() const { return model_; }
  uint64_t disk_bytes() const { return disk_bytes_; }
  const std::string& dir() const { return dir_; }

  // The engine's view of this segment.
  core::IvfSegmentRef Ref(std::shared_ptr<const core::IdFilter> dead);

  bool Contains(uint64_t id) const { return where_.contains(id); }
  // The rows `filter` selects, less the dead ones: those `dead` says are dead, which are the
  // rows of the ids in `newer` (the tombstones newer than the segment). For a filtered
  // search's IvfSegmentRef::selection, and Count. CPU only (the columns are in memory); the
  // filter's matches come from the cache's SelectionCache when it holds them.
  std::shared_ptr<const core::RowSelection> Select(const core::filter::Filter& filter,
                                                   const core::IdFilter& dead,
                                                   absl::Span<const Tombstone> newer) const;
  uint64_t attribute_memory_bytes() const { return columns_.memory_bytes(); }
  // A row by id (blocking pread; run off the arena). NOT_FOUND if the segment has no such id.
  absl::StatusOr<StoredPoint> ReadPoint(uint64_t id, bool include_vector) const;
  // Every row with its full-precision vector (blocking reads), for merges and rebuilds. Each
  // partition's bytes are checked against its CRC first: a rebuild re-encodes rows under a
  // fresh checksum, so a flipped bit must stop it here (DATA_LOSS) rather than be laundered.
  absl::Status ForEachRow(const std::function<void(uint64_t id, const float* vector,
                                                   const std::string& attributes)>& fn) const;

  void Fetch(const core::PartitionFetch& fetch, FetchDone done) override;
  void ReadRaw(std::vector<core::RowRef> rows, const core::PartitionFetch& priority,
               RawDone done) override;
  void CancelQuery(uint64_t query_seq) override {
    scheduler_->CancelQuery(query_seq);
    cache_->uncached().CancelQuery(query_seq);
  }
  void BeginBatch() override { scheduler_->Plug(); }
  void EndBatch() override { scheduler_->Unplug(); }

 private:
  // Streams partition `p` of lists.dat through CRC32C; DATA_LOSS on a mismatch.
  absl::Status VerifyPartition(uint32_t p, std::vector<char>* buffer) const;

  struct Location {
    uint32_t partition = 0;
    uint32_t row = 0;
  };
  using PartitionRead = absl::AnyInvocable<void(absl::StatusOr<ReadResult>) &&>;

  Segment(std::string dir, uint64_t id, IvfMeta meta, IoScheduler* scheduler, PartitionCache* cache,
          uint32_t max_indexed_fields);
  absl::Status LoadIndex(FileSystem* fs);
  // `row_ids`: every row's id, in row order.
  absl::Status LoadAttributes(FileSystem* fs, std::vector<uint64_t> row_ids);
  absl::Status LoadVersion1Attributes(FileSystem* fs, std::vector<uint64_t> row_ids);
  // Fetch(), after `attempt` shared loads failed because the query that started them stopped.
  void FetchAttempt(const core::PartitionFetch& fetch, FetchDone done, int attempt);
  // The partition pinned from the cache if it is cached and loaded; nullopt otherwise.
  std::optional<core::PartitionData> TryHit(uint32_t partition) const;
  // The last partition ResidentRow() looked up, pinned when the cache held it.
  struct PinnedPartition {
    uint32_t partition = UINT32_MAX;
    std::optional<core::PartitionData> data;
  };
  // Row `row`'s full-precision vector if it is in memory already, reading nothing (null
  // otherwise): a FLAT-encoded segment's partitions are its rows' vectors, so a row of a
  // partition the cache holds is handed out from there, pinning it; else the RowCache's copy
  // (a use of it when `use`, a Peek when not). `pinned` carries one partition from call to
  // call: rows asked in partition order look each partition up once.
  std::shared_ptr<const float> ResidentRow(const core::RowRef& row, PinnedPartition* pinned,
                                           bool use) const;
  // A partition the cache has no room for: read for this query alone once the process-wide
  // UncachedBudget grants its bytes; the pin holds the bytes and the grant.
  void ReadUncached(const core::PartitionFetch& fetch, FetchDone done);
  // Reads and checks one partition through the scheduler.
  // `on_completion`: ReadRequest::dispatch_on_completion.
  void ReadPartition(uint32_t partition, const core::PartitionFetch& fetch, PartitionRead done,
                     bool on_completion = false);
  // What `filter` selects, deletes aside: from `cache` (may be null) or evaluated (then kept).
  std::shared_ptr<const core::RowSelection> Matched(const core::filter::Filter& filter,
                                                    SelectionCache* cache) const;
  // `matched` less the rows not in `live_bits`, with the vectors it keeps of the others.
  std::shared_ptr<const core::RowSelection> WithoutDead(const core::RowSelection& matched,
                                                        const RowBits& live_bits) const;
  // `bits` (rows in partition order) as a selection, listing the ids of few matches.
  std::shared_ptr<core::RowSelection> ToSelection(const RowBits& bits) const;
  RowBits CopyBits(const core::RowSelection& selection) const;
  // A copy of listed `selection` with its rows' vectors (RowSelection::listed_vectors), when
  // every one of them is in memory (ResidentRow) and they take at most `max_bytes`; else null.
  std::shared_ptr<const core::RowSelection> WithListedVectors(const core::RowSelection& selection,
                                                              uint64_t max_bytes) const;
  // The listed vectors one selection may keep: at most this fraction of the filter cache.
  static constexpr uint64_t kListedVectorsShare = 8;
  // The row's number in the segment (partition order, as raw.dat stores them): its RowCache key.
  uint64_t RowNumber(const core::RowRef& row) const;
  // Where row `row` of `partition` keeps its float32 vector: (scheduler file, offset).
  std::pair<uint64_t, uint64_t> RawLocation(uint32_t partition, uint32_t row) const;
  absl::Status ReadVector(uint32_t partition, uint32_t row, float* out) const;

  const std::string dir_;
  const uint64_t id_;
  const IvfMeta meta_;
  const std::shared_ptr<const core::IvfModel> model_;
  IoScheduler* const scheduler_;
  PartitionCache* const cache_;
  uint64_t lists_file_ = 0, raw_file_ = 0;         // scheduler handles
  std::unique_ptr<RandomAccessFile> lists_, raw_;  // for blocking point reads
  std::vector<uint64_t> raw_row_start_;            // per partition: first row's index in raw.dat
  // Per partition, as Ref() hands them out: built once, not per search.
  std::vector<uint64_t> partition_bytes_, partition_rows_;
  absl::flat_hash_map<uint64_t, Location> where_;
  std::unique_ptr<RandomAccessFile> attrs_;                // null for a version 1 attrs.dat
  std::optional<AttributeFileLayout> attrs_layout_;        // version 2
  absl::flat_hash_map<uint64_t, std::string> attributes_;  // version 1: by id
  AttributeColumns columns_;                               // every row's, in partition order
  uint64_t disk_bytes_ = 0;
  // Cache key namespace: unique in the process (segment ids repeat across collections).
  const uint64_t cache_id_;
};

}  // namespace shoal::storage
