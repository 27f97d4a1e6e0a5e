// Collection: one collection's durable state — manifest, WAL, memtable, IVF segments and
// tombstones — and the operations the server runs on it.
//
// Writes (Upsert, Delete) get a sequence number, are framed into one WAL record each, made
// durable by the WAL's group commit, then applied on the WAL thread (memtable, tombstones for
// rows in segments), and only then reported done (I-5, read-after-write).
//
// Reads take a snapshot (ReadState): the segments and memtables live when the read began.
// BuildIndex / Flush / compaction build new segments beside it and swap a new snapshot in after
// the manifest naming them is durable (I-6); queries running on the old one finish on it.
//
//   BuildIndex: freeze the memtable (new WAL file), train an IVF model (FAISS) on a sample of
//               the live vectors, write one segment with all of them, install.
//   Flush:      freeze the memtable, encode it with the newest segment's IVF model as a new
//               segment — or, without one (FLAT collections, IVF never built), as an exact
//               segment scanned whole by every search — install; more than kMaxSegments
//               segments are then merged.
// Rows are streamed through a SegmentBuilder (spill files, chunks, partition groups): a
// build's extra memory is bounded by CollectionOptions::build_memory_bytes, not the row count,
// and is handed back to the kernel (malloc_trim) when it ends.
// The CPU work runs on the given executor (the arena, I-2) in tasks; these calls block the
// calling (maintenance) thread while it runs, never an arena thread.
//
// On-disk layout (DESIGN.md §5): <dir>/CURRENT, MANIFEST-<n>, wal/<seq>.log, seg-<id>/.
// Each install writes MANIFEST-<n+1>, points CURRENT at it and removes MANIFEST-<n>. Open()
// removes what a crash (or a failed build) left behind: seg-* directories the live manifest
// does not name, WAL files it retired, other MANIFEST-* files and *.tmp files.
//
// A full disk or a failed fsync loses nothing acknowledged and never blocks a restart: once a
// WAL append or fsync fails the collection is read-only until it is reopened (writes answer
// RESOURCE_EXHAUSTED "disk full", or UNAVAILABLE for other I/O errors), whatever maintenance
// runs afterwards; Close() reports the failure. A failed segment or manifest write fails its
// BuildIndex/Flush and leaves the collection as it was (still writable). Open() opens a
// collection read-only, rather than not at all, when it cannot start its WAL file.
//
// Thread-safety: every method is thread-safe. BuildIndex/Flush are serialised with each other
// and with Close(), which waits for a running one and refuses later ones.
// Close() must be the last call.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "core/exec/executor.h"
#include "core/index/ivf_search.h"
#include "core/index/search_types.h"
#include "storage/cache/partition_cache.h"
#include "storage/collection/memtable.h"
#include "storage/collection/segment.h"
#include "storage/collection/segment_builder.h"
#include "storage/collection/segment_writer.h"
#include "storage/collection/tombstones.h"
#include "storage/collection/wal.h"
#include "storage/format/manifest_format.h"
#include "storage/io/file_system.h"
#include "storage/sched/io_scheduler.h"

namespace shoal::storage {

std::string WalPath(const std::string& dir, uint64_t seq);
std::string SegmentDir(const std::string& dir, uint64_t id);

struct CollectionOptions {
  WalOptions wal;
  // Where segments are read through. Both null: the collection cannot open or build segments.
  IoScheduler* scheduler = nullptr;
  PartitionCache* cache = nullptr;
  // Extra memory of one build, flush or merge (`build.memory_bytes`, segment_builder.h).
  uint64_t build_memory_bytes = 256ull << 20;
  // Attribute fields with value indexes, per segment and memtable (`filter.max_indexed_fields`).
  uint32_t max_indexed_fields = AttributeColumns::kDefaultMaxIndexedFields;
};

struct CollectionStats {
  uint64_t num_vectors = 0;  // live
  uint64_t num_indexed = 0;  // live rows in segments
  uint32_t num_segments = 0;
  uint64_t memtable_rows = 0;
  // Every row the segments and memtables hold, dead ones too: what a filter's bitsets span.
  uint64_t stored_rows = 0;
  uint64_t disk_bytes = 0;
  uint64_t memory_bytes = 0;
  uint64_t attribute_memory_bytes = 0;  // attribute columns: segments' and memtables'
};

struct BuildProgress {
  bool running = false;
  std::string phase;  // "freezing", "training", "assigning", "writing", "installing", "merging"
  uint32_t percent = 0;
};

// What a search reads: segments (with their dead-row filters) and the memtable rows.
struct SearchSnapshot {
  std::vector<core::IvfSegmentRef> segments;  // with a filter: each with its selection
  core::FlatView memtable;
  // With a filter: the memtable's selected live rows, over memtable.blocks.
  std::shared_ptr<const core::RowSelection> memtable_selection;
};

class Collection {
 public:
  using WriteDone = absl::AnyInvocable<void(absl::StatusOr<uint64_t>) &&>;
  static constexpr size_t kMaxSegments = 4;

  static absl::StatusOr<std::unique_ptr<Collection>> Create(FileSystem* fs, const std::string& dir,
                                                            CollectionManifest manifest,
                                                            CollectionOptions options);
  // Opens an existing collection: segments, then the WAL files since the last cut.
  static absl::StatusOr<std::unique_ptr<Collection>> Open(FileSystem* fs, const std::string& dir,
                                                          CollectionOptions options);
  ~Collection();

  // The live manifest. Maintenance replaces it; a caller keeps the version it got.
  std::shared_ptr<const CollectionManifest> manifest() const;
  // The n of the live MANIFEST-<n>.
  uint64_t manifest_number() const;
  // The schema never changes after Create.
  const std::string& name() const { return name_; }
  uint32_t dim() const { return dim_; }
  core::Metric metric() const { return metric_; }
  // OK while writes are accepted; why they are refused once a WAL write or fsync failed.
  absl::Status write_health() const;

  // REQUIRES: every point's vector has dim() finite floats (the server validates).
  void Upsert(std::vector<PointRecord> points, WriteDone done);
  void Delete(std::vector<uint64_t> ids, WriteDone done);

  // The live points among `ids`, in the order asked. Rows in segments are read with blocking
  // preads: call from an admin thread, not the arena.
  std::vector<StoredPoint> Get(absl::Span<const uint64_t> ids, bool include_vectors) const;

  // What a search reads now. With a filter, each segment's and the memtable's selection of the
  // live rows it selects (evaluated on their attribute columns: CPU, no I/O).
  SearchSnapshot SearchView(const core::filter::Filter* filter = nullptr) const;
  // Live points that satisfy `filter` (null: every live point), exactly.
  uint64_t Count(const core::filter::Filter* filter) const;

  absl::StatusOr<std::string> BuildIndex(core::Executor& cpu);
  absl::StatusOr<std::string> Flush(core::Executor& cpu);

  CollectionStats Stats() const;
  BuildProgress progress() const;

  // Waits for a running build, flush or merge, refuses later ones (FAILED_PRECONDITION), then
  // drains and closes the WAL. Reports an earlier WAL failure again.
  absl::Status Close();

 private:
  struct ReadState {
    std::vector<std::shared_ptr<Segment>> segments;  // oldest first
    std::vector<uint64_t> segment_seqs;
    std::shared_ptr<Memtable> active;
    // Frozen memtables: their WAL files are closed; the next build or flush turns them into
    // a segment (a failed one leaves them here, still searched).
    std::vector<std::shared_ptr<Memtable>> frozen;
  };
  struct Cut {
    uint64_t seq = 0;          // writes up to here are in the frozen memtables or segments
    uint64_t new_wal_seq = 0;  // WAL files below this are retired once a manifest says so
  };

  Collection(FileSystem* fs, std::string dir, CollectionManifest manifest, uint64_t number,
             CollectionOptions options);
  // Removes files the live manifest does not name (see the header comment). Best effort.
  void RemoveOrphans();
  absl::Status OpenSegments();
  // `creating`: a WAL file that cannot be started fails the call; otherwise (Open) the
  // collection opens read-only.
  absl::Status ReplayAndOpenWal(bool creating);
  absl::Status ApplyRecord(WalRecordType type, std::string_view payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  uint64_t ApplyUpsert(const ReadState& state, uint64_t seq,
                       const std::vector<PointRecord>& points);
  uint64_t ApplyDelete(const ReadState& state, uint64_t seq, const std::vector<uint64_t>& ids);
  using Apply = absl::AnyInvocable<uint64_t(const ReadState& state, uint64_t seq) &&>;
  // Appends a WAL record under the next sequence number; once durable, `apply` runs on the WAL
  // thread and its result goes to `done`.
  void AppendWrite(std::string record, Apply apply, WriteDone done);
  bool LiveInSegments(const ReadState& state, uint64_t id) const;
  // Tombstones `id` at `seq`; true (and one more dead segment row) if a segment held it live.
  bool KillInSegments(uint64_t id, uint64_t seq) ABSL_LOCKS_EXCLUDED(state_mu_);
  // Dead rows among `state`'s segments, from the tombstones.
  uint64_t CountDeadRows(const ReadState& state) const;
  std::shared_ptr<const ReadState> state() const;
  void SetState(std::shared_ptr<const ReadState> state);
  // The WAL being appended to (null when the collection opened read-only).
  // wal_ changes only under write_mu_ (and wal_mu_), so write_mu_ alone is enough to read it.
  Wal* wal() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return wal_.get();
  }
  void SetWal(std::unique_ptr<Wal> wal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  absl::Status CheckOpenForMaintenance() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(maintenance_mu_);
  // Maintenance (collection_build.cc). REQUIRES: maintenance_mu_ held.
  absl::StatusOr<Cut> FreezeMemtable() ABSL_LOCKS_EXCLUDED(write_mu_);
  // Live rows of the given segments and memtables, spilled into a builder (build-<id>.tmp).
  absl::StatusOr<std::unique_ptr<SegmentBuilder>> GatherRows(const ReadState& state, bool segments,
                                                             bool frozen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(maintenance_mu_);
  absl::StatusOr<core::IvfModel> Train(core::Executor& cpu, const SegmentBuilder& rows);
  // Writes the next segment id's directory; a failed write leaves none.
  absl::StatusOr<std::shared_ptr<Segment>> WriteAndOpenSegment(core::Executor& cpu,
                                                               const core::IvfModel& model,
                                                               SegmentBuilder& rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(maintenance_mu_);
  // Makes `next` durable, then swaps in the segments it names: `replaced` segments and the
  // frozen memtables captured in `consumed` leave the read state.
  absl::Status Install(CollectionManifest next, std::shared_ptr<Segment> added,
                       const std::vector<std::shared_ptr<Segment>>& replaced,
                       size_t consumed_frozen) ABSL_EXCLUSIVE_LOCKS_REQUIRED(maintenance_mu_);
  // After a failed install of MANIFEST-<number + 1>: removes its files and `added`'s directory
  // when CURRENT still names MANIFEST-<number>.
  void RemoveFailedInstall(uint64_t number, const std::shared_ptr<Segment>& added);
  absl::StatusOr<std::string> Merge(core::Executor& cpu)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(maintenance_mu_);
  void SetProgress(const char* phase, uint32_t percent);

  FileSystem* const fs_;
  const std::string dir_;
  const CollectionOptions options_;
  const std::string name_;
  const uint32_t dim_;
  const core::Metric metric_;
  const std::shared_ptr<Tombstones> tombstones_ = std::make_shared<Tombstones>();

  // Readers (the server's FillInfo, Search) copy the pointer; Install swaps it.
  mutable absl::Mutex manifest_mu_;
  std::shared_ptr<const CollectionManifest> manifest_ ABSL_GUARDED_BY(manifest_mu_);
  uint64_t manifest_number_ ABSL_GUARDED_BY(manifest_mu_) = 0;

  mutable absl::Mutex state_mu_;
  std::shared_ptr<const ReadState> state_ ABSL_GUARDED_BY(state_mu_);

  // Orders sequence numbers with WAL appends; guards the fields below. Held across a WAL drain
  // when the memtable freezes, so nothing the WAL thread runs (write callbacks) may take it.
  mutable absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(wal_mu_);
  uint64_t seq_ ABSL_GUARDED_BY(write_mu_) = 0;
  uint64_t wal_seq_ ABSL_GUARDED_BY(write_mu_) = 0;  // the WAL file being appended to
  // Why writes are refused when there is no WAL (it could not be started at Open).
  absl::Status no_wal_ ABSL_GUARDED_BY(write_mu_);
  // Replaced under write_mu_ and wal_mu_; wal_mu_ alone lets Stats() read it without waiting
  // behind a WAL drain.
  mutable absl::Mutex wal_mu_;
  std::unique_ptr<Wal> wal_ ABSL_GUARDED_BY(wal_mu_);

  std::atomic<uint64_t> segment_dead_{0};  // dead rows in segments (for live counts)
  // One build / flush / merge at a time; taken before write_mu_.
  absl::Mutex maintenance_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);
  uint64_t next_segment_id_ ABSL_GUARDED_BY(maintenance_mu_) = 0;
  // Set by Close(): no maintenance may write into the directory any more (it may be renamed
  // away by a drop, and a new collection of the same name created in its place).
  bool closed_ ABSL_GUARDED_BY(maintenance_mu_) = false;
  mutable absl::Mutex progress_mu_;
  BuildProgress progress_ ABSL_GUARDED_BY(progress_mu_);
};

}  // namespace shoal::storage
