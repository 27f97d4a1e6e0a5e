// Collection maintenance: BuildIndex, Flush and segment merges (see collection.h).
#include <malloc.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "core/exec/run_and_wait.h"
#include "storage/collection/collection.h"
#include "storage/collection/manifest_store.h"
#include "storage/collection/segment_builder.h"

namespace shoal::storage {
namespace {

constexpr size_t kTrainPointsPerCentroid = 256;
// Exact (FLAT) segments are cut into slices of about this many bytes: the unit the cache
// holds and a search task scans.
constexpr uint64_t kExactPartitionBytes = 1 << 20;
constexpr uint64_t kMaxExactPartitions = 1 << 20;  // ivf.meta's nlist limit

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

core::VectorEncoding EncodingFor(core::IndexType type) {
  switch (type) {
    case core::IndexType::kIvfSq8:
      return core::VectorEncoding::kSq8;
    case core::IndexType::kIvfPq:
      return core::VectorEncoding::kPq;
    default:
      return core::VectorEncoding::kFlat;
  }
}

const char* EncodingName(core::VectorEncoding e) {
  switch (e) {
    case core::VectorEncoding::kSq8:
      return "IVF_SQ8";
    case core::VectorEncoding::kPq:
      return "IVF_PQ";
    case core::VectorEncoding::kFlat:
      break;
  }
  return "IVF_FLAT";
}

// A file operation of a build that failed: ENOSPC reads "disk full", other I/O errors are
// UNAVAILABLE (the disk, not the request, is at fault); every other code is kept.
absl::Status IoFailure(absl::string_view what, const absl::Status& cause) {
  switch (cause.code()) {
    case absl::StatusCode::kResourceExhausted:
      return absl::ResourceExhaustedError(absl::StrCat("disk full: ", what, ": ", cause.message()));
    case absl::StatusCode::kInternal:
      return absl::UnavailableError(absl::StrCat(what, ": ", cause.message()));
    default:
      return absl::Status(cause.code(), absl::StrCat(what, ": ", cause.message()));
  }
}

// An exact model for n rows: slices of about kExactPartitionBytes.
core::IvfModel ExactModelFor(uint32_t dim, core::Metric metric, uint64_t n) {
  const uint64_t per = std::max<uint64_t>(1, kExactPartitionBytes / (8 + uint64_t(dim) * 4));
  const uint64_t nlist = std::clamp<uint64_t>((n + per - 1) / per, 1, kMaxExactPartitions);
  return core::MakeExactModel(dim, metric, uint32_t(nlist));
}

// Hands the memory a build freed back to the kernel: glibc keeps freed heap pages (and, after
// large frees, serves even big allocations from the heap) until asked.
void ReturnMemory() { malloc_trim(0); }

}  // namespace

std::string SegmentDir(const std::string& dir, uint64_t id) {
  return JoinPath(dir, absl::StrCat("seg-", id));
}

absl::StatusOr<Collection::Cut> Collection::FreezeMemtable() {
  absl::MutexLock lock(&write_mu_);
  Wal* const old = wal();
  // A WAL that failed stays failed until restart: switching to a new file would make the
  // collection writable again behind a write that was refused.
  if (old == nullptr) return no_wal_;
  SHOAL_RETURN_IF_ERROR(old->health());
  Cut cut;
  cut.new_wal_seq = wal_seq_ + 1;
  const std::string path = WalPath(dir_, cut.new_wal_seq);
  // The new file first: when it cannot be started (a full disk) the old one, untouched, keeps
  // taking writes.
  auto next = Wal::Open(fs_, path, options_.wal);
  if (!next.ok()) {
    (void)fs_->RemoveAll(path);  // a header cut short
    return IoFailure(absl::StrCat("starting WAL file ", path), next.status());
  }
  SHOAL_FAILPOINT("wal.rotate");
  // Closing drains the group commit: every write appended so far is applied to the memtable
  // being frozen. Writes wait on write_mu_ meanwhile (one fsync at most).
  if (absl::Status closed = old->Close(); !closed.ok()) {
    (void)(*next)->Close();
    (void)fs_->RemoveAll(path);
    return closed;  // the old WAL failed while draining: read-only from now on
  }
  cut.seq = seq_;
  SetWal(*std::move(next));
  wal_seq_ = cut.new_wal_seq;
  auto frozen = std::make_shared<ReadState>(*state());
  frozen->frozen.push_back(frozen->active);
  frozen->active = std::make_shared<Memtable>(dim_, options_.max_indexed_fields);
  SetState(std::move(frozen));
  return cut;
}

absl::StatusOr<std::unique_ptr<SegmentBuilder>> Collection::GatherRows(const ReadState& state,
                                                                       bool segments, bool frozen) {
  const std::string tmp = JoinPath(dir_, absl::StrCat("build-", next_segment_id_, ".tmp"));
  auto created = SegmentBuilder::Create(fs_, tmp, dim_, options_.build_memory_bytes);
  if (!created.ok()) return IoFailure(absl::StrCat("starting ", tmp), created.status());
  std::unique_ptr<SegmentBuilder> builder = *std::move(created);
  absl::Status status;
  auto add = [&](uint64_t id, const float* v, const std::string& attrs) {
    if (status.ok()) status = builder->Add(id, v, attrs);
  };
  if (segments) {
    for (size_t s = 0; s < state.segments.size(); ++s) {
      const uint64_t seg_seq = state.segment_seqs[s];
      SHOAL_RETURN_IF_ERROR(
          state.segments[s]->ForEachRow([&](uint64_t id, const float* v, const std::string& attrs) {
            if (tombstones_->Get(id) <= seg_seq) add(id, v, attrs);
          }));
    }
  }
  if (frozen) {
    for (const auto& memtable : state.frozen) memtable->ForEachLive(add);
  }
  if (status.ok()) status = builder->FinishInput();
  if (!status.ok()) return IoFailure(absl::StrCat("spilling rows into ", tmp), status);
  return builder;
}

absl::StatusOr<core::IvfModel> Collection::Train(core::Executor& cpu, const SegmentBuilder& rows) {
  const size_t n = rows.rows();
  const core::IndexSpec index = manifest()->index;
  core::IvfTrainOptions options;
  options.nlist = index.nlist ? index.nlist : core::DefaultNlist(n);
  options.nlist = uint32_t(std::min<size_t>(options.nlist, n));
  options.encoding = EncodingFor(index.type);
  options.pq_m = index.pq_m;
  options.pq_nbits = index.pq_bits == 4 ? 4 : 8;
  // A deterministic sample of at most 256 vectors per centroid (and what half the build's
  // memory budget holds).
  SHOAL_ASSIGN_OR_RETURN(
      std::vector<float> sample,
      rows.Sample(size_t(options.nlist) * kTrainPointsPerCentroid, options.seed));
  const size_t sample_n = sample.size() / dim_;
  if (sample_n < std::min<size_t>(n, size_t(options.nlist) * kTrainPointsPerCentroid)) {
    core::Logger("collection")
        ->warn("{}: build.memory_bytes allows {} training vectors for nlist {}", name_, sample_n,
               options.nlist);
  }
  options.nlist = uint32_t(std::min<size_t>(options.nlist, sample_n));
  SetProgress("training", 0);
  absl::StatusOr<core::IvfModel> model = absl::UnknownError("not run");
  SHOAL_RETURN_IF_ERROR(core::RunAndWait(cpu, [&] {
    model = core::TrainIvfModel(sample.data(), sample_n, dim_, metric_, options);
    return model.status();
  }));
  return model;
}

absl::StatusOr<std::shared_ptr<Segment>> Collection::WriteAndOpenSegment(
    core::Executor& cpu, const core::IvfModel& model, SegmentBuilder& rows) {
  if (!options_.scheduler || !options_.cache) {
    return absl::FailedPreconditionError("no I/O scheduler to read segments through");
  }
  SetProgress("assigning", 0);
  const uint64_t id = next_segment_id_++;
  const std::string dir = SegmentDir(dir_, id);
  (void)fs_->RemoveAll(dir);  // leftovers of a build that crashed before its manifest
  // No manifest names the directory yet: a failed write leaves nothing behind.
  const absl::Status written = rows.Write(
      cpu, model, dir, [this](const char* phase, uint32_t pct) { SetProgress(phase, pct); },
      options_.max_indexed_fields);
  if (!written.ok()) {
    (void)fs_->RemoveAll(dir);
    return IoFailure(absl::StrCat("writing segment ", dir), written);
  }
  auto segment =
      Segment::Open(fs_, dir, id, options_.scheduler, options_.cache, options_.max_indexed_fields);
  if (!segment.ok()) (void)fs_->RemoveAll(dir);
  return segment;
}

absl::Status Collection::Install(CollectionManifest next, std::shared_ptr<Segment> added,
                                 const std::vector<std::shared_ptr<Segment>>& replaced,
                                 size_t consumed_frozen) {
  SetProgress("installing", 0);
  next.next_segment_id = std::max(next.next_segment_id, next_segment_id_);
  const uint64_t number = manifest_number();
  auto installed = InstallManifest(fs_, dir_, next, number);
  if (!installed.ok()) {
    RemoveFailedInstall(number, added);
    return IoFailure("installing the manifest", installed.status());
  }
  const uint64_t old_first_wal = manifest()->first_wal_seq;
  const uint64_t added_seq = next.segments.back().seq;
  const uint64_t first_wal_seq = next.first_wal_seq;
  {
    absl::MutexLock lock(&manifest_mu_);
    manifest_ = std::make_shared<const CollectionManifest>(std::move(next));
    manifest_number_ = *installed;
  }
  {
    absl::MutexLock lock(&state_mu_);
    auto state = std::make_shared<ReadState>(*state_);
    std::vector<std::shared_ptr<Segment>> segments;
    std::vector<uint64_t> seqs;
    for (size_t s = 0; s < state->segments.size(); ++s) {
      if (std::find(replaced.begin(), replaced.end(), state->segments[s]) != replaced.end()) {
        continue;
      }
      segments.push_back(state->segments[s]);
      seqs.push_back(state->segment_seqs[s]);
    }
    segments.push_back(added);
    seqs.push_back(added_seq);
    state->segments = std::move(segments);
    state->segment_seqs = std::move(seqs);
    state->frozen.erase(state->frozen.begin(), state->frozen.begin() + long(consumed_frozen));
    // Rows of the new segment that writes applied during its build have already superseded
    // count as dead from now on (KillInSegments counts later ones, under this lock).
    segment_dead_ = CountDeadRows(*state);
    state_ = std::move(state);
  }
  // Old files go once nothing new refers to them; queries still reading an old segment keep
  // its files open (unlinked files stay readable).
  for (const auto& s : replaced) {
    (void)fs_->RemoveAll(s->dir());
    SHOAL_FAILPOINT("cleanup.between_deletions");
  }
  for (uint64_t seq = old_first_wal; seq < first_wal_seq; ++seq) {
    (void)fs_->RemoveAll(WalPath(dir_, seq));
    SHOAL_FAILPOINT("cleanup.between_deletions");
  }
  return absl::OkStatus();
}

void Collection::RemoveFailedInstall(uint64_t number, const std::shared_ptr<Segment>& added) {
  // CURRENT may name the new manifest even though the install failed (an fsync after the
  // rename); only while it still names MANIFEST-<number> are the new files certainly garbage.
  // Otherwise they stay, and Open() sorts them out against whatever CURRENT names then.
  auto live = LoadManifest(fs_, dir_);
  if (!live.ok() || live->number != number) return;
  for (const std::string& name :
       {ManifestFileName(number + 1), ManifestFileName(number + 1) + ".tmp",
        std::string("CURRENT.tmp")}) {
    (void)fs_->RemoveAll(JoinPath(dir_, name));
  }
  if (added) (void)fs_->RemoveAll(added->dir());
}

absl::StatusOr<std::string> Collection::BuildIndex(core::Executor& cpu) {
  if (manifest()->index.type == core::IndexType::kFlat) {
    return absl::StrCat("collection '", name_,
                        "' uses INDEX_FLAT: every search is exact, nothing to build");
  }
  absl::MutexLock lock(&maintenance_mu_);
  SHOAL_RETURN_IF_ERROR(CheckOpenForMaintenance());
  const Clock::time_point start = Clock::now();
  SetProgress("freezing", 0);
  // An exception (an allocation failing) becomes the build's status, so the progress and
  // memory are still reset below.
  absl::StatusOr<std::string> result =
      CatchExceptions("building the index", [&]() -> absl::StatusOr<std::string> {
        maintenance_mu_.AssertHeld();  // taken above; the analysis does not see into lambdas
        SHOAL_ASSIGN_OR_RETURN(Cut cut, FreezeMemtable());
        SHOAL_FAILPOINT("build.after_freeze");
        const auto frozen_state = state();
        SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuilder> rows,
                               GatherRows(*frozen_state, true, true));
        const uint64_t n = rows->rows();
        if (n == 0) return std::string("the collection is empty; nothing to build");
        const Clock::time_point train_start = Clock::now();
        SHOAL_ASSIGN_OR_RETURN(core::IvfModel model, Train(cpu, *rows));
        const double train_s = SecondsSince(train_start);
        SHOAL_FAILPOINT("build.after_train");
        SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment,
                               WriteAndOpenSegment(cpu, model, *rows));
        rows.reset();  // the spill files go before the install
        SHOAL_FAILPOINT("build.before_install");
        CollectionManifest next = *manifest();
        next.segments = {{segment->id(), cut.seq, n}};
        next.tombstones.clear();
        next.write_seq = cut.seq;
        next.first_wal_seq = cut.new_wal_seq;
        SHOAL_RETURN_IF_ERROR(
            Install(std::move(next), segment, frozen_state->segments, frozen_state->frozen.size()));
        tombstones_->DropUpTo(cut.seq);
        return absl::StrFormat(
            "built %s over %d vectors: nlist %d, 1 segment (%.1f MiB); trained in %.1f s, %.1f s "
            "in "
            "all",
            EncodingName(model.encoding), n, model.nlist(),
            double(segment->disk_bytes()) / (1 << 20), train_s, SecondsSince(start));
      });
  SetProgress(nullptr, 0);
  ReturnMemory();
  if (result.ok()) core::Logger("collection")->info("{}: {}", name_, *result);
  return result;
}

absl::Status Collection::CheckOpenForMaintenance() const {
  if (!closed_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("collection '", name_, "' is closed (dropped, or the server is shutting down)"));
}

absl::StatusOr<std::string> Collection::Flush(core::Executor& cpu) {
  absl::MutexLock lock(&maintenance_mu_);
  SHOAL_RETURN_IF_ERROR(CheckOpenForMaintenance());
  const auto before = state();
  if (before->active->live_count() == 0 && before->frozen.empty()) {
    return std::string("the memtable is empty; nothing to flush");
  }
  absl::StatusOr<std::string> result =
      CatchExceptions("flushing", [&]() -> absl::StatusOr<std::string> {
        maintenance_mu_.AssertHeld();  // taken above; the analysis does not see into lambdas
        SetProgress("freezing", 0);
        SHOAL_ASSIGN_OR_RETURN(Cut cut, FreezeMemtable());
        SHOAL_FAILPOINT("flush.after_freeze");
        const auto frozen_state = state();
        SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuilder> rows,
                               GatherRows(*frozen_state, false, true));
        const uint64_t n = rows->rows();
        std::string message;
        if (n > 0) {
          // Encoded with the newest IVF model; a collection without one (FLAT, or IVF never
          // built) gets an exact segment.
          const auto& segments = frozen_state->segments;
          const core::IvfModel model = segments.empty() || segments.back()->model()->exact
                                           ? ExactModelFor(dim_, metric_, n)
                                           : *segments.back()->model();
          SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment,
                                 WriteAndOpenSegment(cpu, model, *rows));
          rows.reset();
          SHOAL_FAILPOINT("flush.before_install");
          CollectionManifest next = *manifest();
          next.segments.push_back({segment->id(), cut.seq, n});
          next.tombstones = tombstones_->UpTo(cut.seq);
          next.write_seq = cut.seq;
          next.first_wal_seq = cut.new_wal_seq;
          SHOAL_RETURN_IF_ERROR(Install(std::move(next), segment, {}, frozen_state->frozen.size()));
          message = absl::StrCat("flushed ", n, " vectors into ", model.exact ? "exact " : "",
                                 "segment ", segment->id());
        }
        if (state()->segments.size() > kMaxSegments) {
          SHOAL_ASSIGN_OR_RETURN(std::string merged, Merge(cpu));
          absl::StrAppend(&message, "; ", merged);
        }
        return message.empty() ? std::string("nothing live to flush") : message;
      });
  SetProgress(nullptr, 0);
  ReturnMemory();
  if (result.ok()) core::Logger("collection")->info("{}: {}", name_, *result);
  return result;
}

// Merges every segment into one with the newest model, dropping dead rows and the tombstones
// they needed. The memtable and WAL are untouched.
absl::StatusOr<std::string> Collection::Merge(core::Executor& cpu) {
  SetProgress("merging", 0);
  const auto current = state();
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<SegmentBuilder> rows, GatherRows(*current, true, false));
  const uint64_t n = rows->rows();
  const uint64_t seq = current->segment_seqs.back();
  const core::IvfModel& newest = *current->segments.back()->model();
  const core::IvfModel model = newest.exact ? ExactModelFor(dim_, metric_, n) : newest;
  SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment, WriteAndOpenSegment(cpu, model, *rows));
  rows.reset();
  SHOAL_FAILPOINT("merge.before_install");
  CollectionManifest next = *manifest();
  next.segments = {{segment->id(), seq, n}};
  next.tombstones.clear();
  SHOAL_RETURN_IF_ERROR(Install(std::move(next), segment, current->segments, 0));
  SHOAL_FAILPOINT("merge.after_install");
  tombstones_->DropUpTo(seq);
  return absl::StrCat("merged ", current->segments.size(), " segments into segment ", segment->id(),
                      " (", n, " live vectors)");
}

}  // namespace shoal::storage
