// Collection maintenance: BuildIndex, Flush and segment merges (see collection.h).
#include <atomic>
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "core/exec/run_and_wait.h"
#include "storage/collection/collection.h"
#include "storage/collection/manifest_store.h"

namespace shoal::storage {
namespace {

constexpr size_t kRowsPerTask = 4096;
constexpr size_t kTrainPointsPerCentroid = 256;

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

}  // namespace

std::string SegmentDir(const std::string& dir, uint64_t id) {
  return JoinPath(dir, absl::StrCat("seg-", id));
}

absl::StatusOr<Collection::Cut> Collection::FreezeMemtable() {
  std::lock_guard<std::mutex> lock(write_mu_);
  // Closing drains the group commit: every write appended so far is applied to the memtable
  // being frozen. Writes wait on write_mu_ meanwhile (one fsync at most).
  SHOAL_RETURN_IF_ERROR(wal_->Close());
  Cut cut;
  cut.seq = seq_;
  cut.new_wal_seq = wal_seq_ + 1;
  auto wal = Wal::Open(fs_, WalPath(dir_, cut.new_wal_seq), options_.wal);
  if (!wal.ok()) {
    // Keep accepting writes in the old file.
    auto reopened = Wal::Open(fs_, WalPath(dir_, wal_seq_), options_.wal);
    if (reopened.ok()) {
      std::lock_guard<std::mutex> wal_lock(wal_mu_);
      wal_ = *std::move(reopened);
    }
    return wal.status();
  }
  {
    std::lock_guard<std::mutex> wal_lock(wal_mu_);
    wal_ = *std::move(wal);
  }
  wal_seq_ = cut.new_wal_seq;
  auto next = std::make_shared<ReadState>(*state());
  next->frozen.push_back(next->active);
  next->active = std::make_shared<Memtable>(manifest_.dim);
  SetState(std::move(next));
  return cut;
}

absl::Status Collection::CollectRows(const ReadState& state, bool segments, bool frozen,
                                     SegmentRows* rows) const {
  auto add = [&](uint64_t id, const float* v, const std::string& attrs) {
    rows->ids.push_back(id);
    rows->vectors.insert(rows->vectors.end(), v, v + manifest_.dim);
    rows->attributes.push_back(attrs);
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
  return absl::OkStatus();
}

absl::StatusOr<core::IvfModel> Collection::Train(core::Executor& cpu, const SegmentRows& rows) {
  const size_t n = rows.size(), dim = manifest_.dim;
  core::IvfTrainOptions options;
  options.nlist = manifest_.index.nlist ? manifest_.index.nlist : core::DefaultNlist(n);
  options.nlist = uint32_t(std::min<size_t>(options.nlist, n));
  options.encoding = EncodingFor(manifest_.index.type);
  options.pq_m = manifest_.index.pq_m;
  // A deterministic sample of at most 256 vectors per centroid.
  const size_t sample_n = std::min(n, size_t(options.nlist) * kTrainPointsPerCentroid);
  std::vector<float> sample;
  const float* train = rows.vectors.data();
  if (sample_n < n) {
    std::vector<uint32_t> order(n);
    for (uint32_t i = 0; i < n; ++i) order[i] = i;
    std::mt19937_64 rng(options.seed);
    std::shuffle(order.begin(), order.end(), rng);
    sample.resize(sample_n * dim);
    for (size_t i = 0; i < sample_n; ++i) {
      std::copy_n(rows.vectors.data() + size_t(order[i]) * dim, dim, sample.data() + i * dim);
    }
    train = sample.data();
  }
  SetProgress("training", 0);
  absl::StatusOr<core::IvfModel> model = absl::UnknownError("not run");
  SHOAL_RETURN_IF_ERROR(core::RunAndWait(cpu, [&] {
    model = core::TrainIvfModel(train, sample_n, manifest_.dim, manifest_.metric, options);
    return model.status();
  }));
  return model;
}

absl::StatusOr<std::shared_ptr<Segment>> Collection::WriteAndOpenSegment(
    core::Executor& cpu, const core::IvfModel& model, const SegmentRows& rows) {
  if (!options_.scheduler || !options_.cache) {
    return absl::FailedPreconditionError("no I/O scheduler to read segments through");
  }
  const size_t n = rows.size(), code_size = model.CodeSize(), dim = model.dim;
  std::vector<uint32_t> assign(n);
  std::vector<uint8_t> codes(n * code_size);
  const size_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  std::atomic<size_t> finished{0};
  SetProgress("assigning", 0);
  SHOAL_RETURN_IF_ERROR(core::ParallelFor(cpu, tasks, [&](size_t t) -> absl::Status {
    const size_t begin = t * kRowsPerTask, count = std::min(kRowsPerTask, n - begin);
    const float* v = rows.vectors.data() + begin * dim;
    SHOAL_RETURN_IF_ERROR(core::AssignToCentroids(model, v, count, assign.data() + begin));
    SHOAL_RETURN_IF_ERROR(core::EncodeVectors(model, v, count, codes.data() + begin * code_size));
    const size_t done = finished.fetch_add(1) + 1;
    if (done % std::max<size_t>(1, tasks / 10) == 0) {
      SetProgress("assigning", uint32_t(100 * done / tasks));
    }
    return absl::OkStatus();
  }));
  SetProgress("writing", 0);
  const uint64_t id = manifest_.next_segment_id++;
  const std::string dir = SegmentDir(dir_, id);
  (void)fs_->RemoveAll(dir);  // leftovers of a build that crashed before its manifest
  SHOAL_RETURN_IF_ERROR(WriteSegment(fs_, dir, model, rows, assign, codes));
  return Segment::Open(fs_, dir, id, options_.scheduler, options_.cache);
}

absl::Status Collection::Install(CollectionManifest next, std::shared_ptr<Segment> added,
                                 const std::vector<std::shared_ptr<Segment>>& replaced,
                                 size_t consumed_frozen) {
  SetProgress("installing", 0);
  SHOAL_RETURN_IF_ERROR(InstallManifest(fs_, dir_, next, 0).status());
  const uint64_t old_first_wal = manifest_.first_wal_seq;
  manifest_ = next;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
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
    seqs.push_back(next.segments.back().seq);
    state->segments = std::move(segments);
    state->segment_seqs = std::move(seqs);
    state->frozen.erase(state->frozen.begin(), state->frozen.begin() + long(consumed_frozen));
    state_ = std::move(state);
  }
  // Old files go once nothing new refers to them; queries still reading an old segment keep
  // its files open (unlinked files stay readable).
  for (const auto& s : replaced) (void)fs_->RemoveAll(s->dir());
  for (uint64_t seq = old_first_wal; seq < next.first_wal_seq; ++seq) {
    (void)fs_->RemoveAll(WalPath(dir_, seq));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Collection::BuildIndex(core::Executor& cpu) {
  if (manifest_.index.type == core::IndexType::kFlat) {
    return absl::StrCat("collection '", manifest_.name,
                        "' uses INDEX_FLAT: every search is exact, nothing to build");
  }
  std::lock_guard<std::mutex> lock(maintenance_mu_);
  const Clock::time_point start = Clock::now();
  SetProgress("freezing", 0);
  absl::StatusOr<std::string> result = [&]() -> absl::StatusOr<std::string> {
    SHOAL_ASSIGN_OR_RETURN(Cut cut, FreezeMemtable());
    const auto frozen_state = state();
    SegmentRows rows;
    SHOAL_RETURN_IF_ERROR(CollectRows(*frozen_state, true, true, &rows));
    if (rows.size() == 0) return std::string("the collection is empty; nothing to build");
    const Clock::time_point train_start = Clock::now();
    SHOAL_ASSIGN_OR_RETURN(core::IvfModel model, Train(cpu, rows));
    const double train_s = SecondsSince(train_start);
    SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment, WriteAndOpenSegment(cpu, model, rows));
    CollectionManifest next = manifest_;
    next.segments = {{segment->id(), cut.seq, rows.size()}};
    next.tombstones.clear();
    next.write_seq = cut.seq;
    next.first_wal_seq = cut.new_wal_seq;
    SHOAL_RETURN_IF_ERROR(
        Install(std::move(next), segment, frozen_state->segments, frozen_state->frozen.size()));
    tombstones_->DropUpTo(cut.seq);
    segment_dead_ = 0;
    return absl::StrFormat(
        "built %s over %d vectors: nlist %d, 1 segment (%.1f MiB); trained in %.1f s, %.1f s in "
        "all",
        EncodingName(model.encoding), rows.size(), model.nlist(),
        double(segment->disk_bytes()) / (1 << 20), train_s, SecondsSince(start));
  }();
  SetProgress(nullptr, 0);
  if (result.ok()) core::Logger("collection")->info("{}: {}", manifest_.name, *result);
  return result;
}

absl::StatusOr<std::string> Collection::Flush(core::Executor& cpu) {
  std::lock_guard<std::mutex> lock(maintenance_mu_);
  const auto before = state();
  if (before->segments.empty()) {
    return absl::StrCat(
        "every acknowledged write is already durable in the WAL; collection '", manifest_.name,
        "' has no IVF index yet, so its vectors stay in the memtable (run BuildIndex)");
  }
  if (before->active->live_count() == 0 && before->frozen.empty()) {
    return std::string("the memtable is empty; nothing to flush");
  }
  absl::StatusOr<std::string> result = [&]() -> absl::StatusOr<std::string> {
    SetProgress("freezing", 0);
    SHOAL_ASSIGN_OR_RETURN(Cut cut, FreezeMemtable());
    const auto frozen_state = state();
    SegmentRows rows;
    SHOAL_RETURN_IF_ERROR(CollectRows(*frozen_state, false, true, &rows));
    std::string message;
    if (rows.size() > 0) {
      SHOAL_ASSIGN_OR_RETURN(
          std::shared_ptr<Segment> segment,
          WriteAndOpenSegment(cpu, *frozen_state->segments.back()->model(), rows));
      CollectionManifest next = manifest_;
      next.segments.push_back({segment->id(), cut.seq, rows.size()});
      next.tombstones = tombstones_->UpTo(cut.seq);
      next.write_seq = cut.seq;
      next.first_wal_seq = cut.new_wal_seq;
      SHOAL_RETURN_IF_ERROR(Install(std::move(next), segment, {}, frozen_state->frozen.size()));
      message = absl::StrCat("flushed ", rows.size(), " vectors into segment ", segment->id());
    }
    if (state()->segments.size() > kMaxSegments) {
      SHOAL_ASSIGN_OR_RETURN(std::string merged, Merge(cpu));
      absl::StrAppend(&message, "; ", merged);
    }
    return message.empty() ? std::string("nothing live to flush") : message;
  }();
  SetProgress(nullptr, 0);
  if (result.ok()) core::Logger("collection")->info("{}: {}", manifest_.name, *result);
  return result;
}

// Merges every segment into one with the newest model, dropping dead rows and the tombstones
// they needed. The memtable and WAL are untouched.
absl::StatusOr<std::string> Collection::Merge(core::Executor& cpu) {
  SetProgress("merging", 0);
  const auto current = state();
  SegmentRows rows;
  SHOAL_RETURN_IF_ERROR(CollectRows(*current, true, false, &rows));
  const uint64_t seq = current->segment_seqs.back();
  SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment,
                         WriteAndOpenSegment(cpu, *current->segments.back()->model(), rows));
  CollectionManifest next = manifest_;
  next.segments = {{segment->id(), seq, rows.size()}};
  next.tombstones.clear();
  SHOAL_RETURN_IF_ERROR(Install(std::move(next), segment, current->segments, 0));
  tombstones_->DropUpTo(seq);
  segment_dead_ = 0;
  return absl::StrCat("merged ", current->segments.size(), " segments into segment ", segment->id(),
                      " (", rows.size(), " live vectors)");
}

}  // namespace shoal::storage
