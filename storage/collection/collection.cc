#include "storage/collection/collection.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/base/failpoint.h"
#include "core/base/logging.h"
#include "core/base/status.h"
#include "storage/collection/manifest_store.h"

namespace shoal::storage {
std::string WalPath(const std::string& dir, uint64_t seq) {
  return JoinPath(JoinPath(dir, "wal"), absl::StrFormat("%06d.log", seq));
}

Collection::Collection(FileSystem* fs, std::string dir, CollectionManifest manifest,
                       uint64_t number, CollectionOptions options)
    : fs_(fs),
      dir_(std::move(dir)),
      options_(std::move(options)),
      name_(manifest.name),
      dim_(manifest.dim),
      metric_(manifest.metric) {
  auto state = std::make_shared<ReadState>();
  state->active = std::make_shared<Memtable>(dim_, options_.max_indexed_fields);
  state_ = std::move(state);
  seq_ = manifest.write_seq;
  wal_seq_ = manifest.first_wal_seq;
  next_segment_id_ = manifest.next_segment_id;
  manifest_ = std::make_shared<const CollectionManifest>(std::move(manifest));
  manifest_number_ = number;
}

Collection::~Collection() { (void)Close(); }

absl::StatusOr<std::unique_ptr<Collection>> Collection::Create(FileSystem* fs,
                                                               const std::string& dir,
                                                               CollectionManifest manifest,
                                                               CollectionOptions options) {
  if (fs->Exists(dir)) return absl::AlreadyExistsError(absl::StrCat(dir, " already exists"));
  SHOAL_RETURN_IF_ERROR(fs->CreateDirs(JoinPath(dir, "wal")));
  SHOAL_ASSIGN_OR_RETURN(uint64_t number, InstallManifest(fs, dir, manifest, 0));
  std::unique_ptr<Collection> c(
      new Collection(fs, dir, std::move(manifest), number, std::move(options)));
  SHOAL_RETURN_IF_ERROR(c->ReplayAndOpenWal(/*creating=*/true));
  return c;
}

absl::StatusOr<std::unique_ptr<Collection>> Collection::Open(FileSystem* fs, const std::string& dir,
                                                             CollectionOptions options) {
  SHOAL_ASSIGN_OR_RETURN(LoadedManifest loaded, LoadManifest(fs, dir));
  std::unique_ptr<Collection> c(
      new Collection(fs, dir, std::move(loaded.manifest), loaded.number, std::move(options)));
  c->RemoveOrphans();
  SHOAL_RETURN_IF_ERROR(c->OpenSegments());
  SHOAL_RETURN_IF_ERROR(c->ReplayAndOpenWal(/*creating=*/false));
  SHOAL_FAILPOINT("recovery.after_replay");
  // Replay counted only the rows its writes found live. A manifest holds the tombstones up to
  // its flush's cut, so an id written again after the cut loses its tombstone there, and the
  // row that tombstone killed is counted by no one: count from the final tombstones, as
  // Install does.
  {
    absl::MutexLock lock(&c->state_mu_);
    c->segment_dead_ = c->CountDeadRows(*c->state_);
  }
  return c;
}

void Collection::RemoveOrphans() {
  const auto manifest = this->manifest();
  const uint64_t number = manifest_number();
  auto log = core::Logger("collection");
  auto remove = [&](const std::string& path, const char* what) {
    log->warn("{}: removing {}, {}", name_, path, what);
    // A file that cannot go now is tried again at the next start; it never blocks this one.
    if (absl::Status s = fs_->RemoveAll(path); !s.ok()) log->warn("{}: {}", name_, s.ToString());
    SHOAL_FAILPOINT("recovery.between_removals");
  };
  if (auto names = fs_->ListDir(dir_); names.ok()) {
    for (const std::string& name : *names) {
      absl::string_view rest = name;
      uint64_t n = 0;
      if (absl::EndsWith(name, ".tmp")) {
        remove(JoinPath(dir_, name), "an unfinished write");
      } else if (absl::ConsumePrefix(&rest, "seg-") && absl::SimpleAtoi(rest, &n) &&
                 std::none_of(manifest->segments.begin(), manifest->segments.end(),
                              [n](const SegmentEntry& e) { return e.id == n; })) {
        remove(JoinPath(dir_, name), "a segment the manifest does not name");
      } else if (absl::ConsumePrefix(&rest, "MANIFEST-") && absl::SimpleAtoi(rest, &n) &&
                 n != number) {
        remove(JoinPath(dir_, name), "a manifest CURRENT does not name");
      }
    }
  }
  if (auto names = fs_->ListDir(JoinPath(dir_, "wal")); names.ok()) {
    for (const std::string& name : *names) {
      absl::string_view rest = name;
      uint64_t seq = 0;
      if (absl::ConsumeSuffix(&rest, ".log") && absl::SimpleAtoi(rest, &seq) &&
          seq < manifest->first_wal_seq) {
        remove(JoinPath(JoinPath(dir_, "wal"), name), "a WAL file the manifest retired");
      }
    }
  }
}

std::shared_ptr<const CollectionManifest> Collection::manifest() const {
  absl::MutexLock lock(&manifest_mu_);
  return manifest_;
}

uint64_t Collection::manifest_number() const {
  absl::MutexLock lock(&manifest_mu_);
  return manifest_number_;
}

absl::Status Collection::OpenSegments() {
  const auto manifest = this->manifest();
  if (manifest->segments.empty()) return absl::OkStatus();
  if (!options_.scheduler || !options_.cache) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": has IVF segments but no I/O scheduler to read them"));
  }
  auto state = std::make_shared<ReadState>(*this->state());
  for (const SegmentEntry& e : manifest->segments) {
    SHOAL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> segment,
                           Segment::Open(fs_, SegmentDir(dir_, e.id), e.id, options_.scheduler,
                                         options_.cache, options_.max_indexed_fields));
    state->segments.push_back(std::move(segment));
    state->segment_seqs.push_back(e.seq);
  }
  for (const Tombstone& t : manifest->tombstones) tombstones_->Set(t.id, t.seq);
  segment_dead_ = CountDeadRows(*state);  // for live counts
  SetState(std::move(state));
  return absl::OkStatus();
}

absl::Status Collection::ReplayAndOpenWal(bool creating) {
  // Every WAL file from first_wal_seq on, oldest first: a crash between a memtable freeze and
  // the manifest that retires the old file leaves two.
  const uint64_t first_wal_seq = manifest()->first_wal_seq;
  SHOAL_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_->ListDir(JoinPath(dir_, "wal")));
  std::vector<uint64_t> seqs;
  for (const std::string& name : names) {
    uint64_t seq = 0;
    if (std::sscanf(name.c_str(), "%lu.log", &seq) == 1 && seq >= first_wal_seq) {
      seqs.push_back(seq);
    }
  }
  std::sort(seqs.begin(), seqs.end());
  absl::MutexLock lock(&write_mu_);
  for (uint64_t seq : seqs) {
    uint64_t truncated = 0;
    SHOAL_RETURN_IF_ERROR(ReplayWal(
        fs_, WalPath(dir_, seq),
        [this](WalRecordType type, std::string_view payload) {
          write_mu_.AssertHeld();
          return ApplyRecord(type, payload);
        },
        &truncated));
    if (truncated) {
      core::Logger("collection")
          ->warn("{}: WAL {} had a torn tail of {} bytes; truncated", name_, seq, truncated);
    }
    wal_seq_ = seq;
  }
  if (!seqs.empty()) {
    core::Logger("collection")
        ->info("{}: replayed {} WAL file(s), {} live vectors", name_, seqs.size(),
               Stats().num_vectors);
  }
  auto wal = Wal::Open(fs_, WalPath(dir_, wal_seq_), options_.wal);
  if (!wal.ok()) {
    if (creating) return wal.status();
    // Everything acknowledged is replayed: serve it, refuse writes until a restart finds room.
    no_wal_ = WalFailureStatus(wal.status());
    core::Logger("collection")
        ->error("{}: cannot start WAL file {}; read-only until restart: {}", name_, wal_seq_,
                wal.status().ToString());
    return absl::OkStatus();
  }
  SetWal(*std::move(wal));
  return absl::OkStatus();
}

void Collection::SetWal(std::unique_ptr<Wal> wal) {
  absl::MutexLock lock(&wal_mu_);
  wal_ = std::move(wal);
}

absl::Status Collection::write_health() const {
  absl::MutexLock lock(&write_mu_);
  if (Wal* w = wal()) return w->health();
  return no_wal_;
}

absl::Status Collection::ApplyRecord(WalRecordType type, std::string_view payload) {
  const auto current = state();
  switch (type) {
    case WalRecordType::kUpsertBatch: {
      SHOAL_ASSIGN_OR_RETURN(UpsertBatch batch, DecodeUpsertBatch(payload));
      if (batch.dim != dim_) {
        return absl::DataLossError(
            absl::StrCat(name_, ": WAL record has dim ", batch.dim, ", collection has ", dim_));
      }
      ApplyUpsert(*current, ++seq_, batch.points);
      return absl::OkStatus();
    }
    case WalRecordType::kDeleteBatch: {
      SHOAL_ASSIGN_OR_RETURN(DeleteBatch batch, DecodeDeleteBatch(payload));
      ApplyDelete(*current, ++seq_, batch.ids);
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(absl::StrCat(name_, ": unknown WAL record type ", int(type)));
}

bool Collection::LiveInSegments(const ReadState& state, uint64_t id) const {
  const uint64_t tombstone = tombstones_->Get(id);
  for (size_t s = state.segments.size(); s-- > 0;) {
    if (state.segments[s]->Contains(id) && tombstone <= state.segment_seqs[s]) return true;
  }
  return false;
}

uint64_t Collection::CountDeadRows(const ReadState& state) const {
  if (state.segments.empty()) return 0;
  const uint64_t oldest = *std::min_element(state.segment_seqs.begin(), state.segment_seqs.end());
  uint64_t dead = 0;
  for (const Tombstone& t : tombstones_->Above(oldest)) {
    for (size_t s = 0; s < state.segments.size(); ++s) {
      if (t.seq > state.segment_seqs[s] && state.segments[s]->Contains(t.id)) ++dead;
    }
  }
  return dead;
}

bool Collection::KillInSegments(uint64_t id, uint64_t seq) {
  // Against the latest segments, not the write's own snapshot: a flush may have installed the
  // row's segment since. Install() counts under the same lock, so each row is counted once.
  absl::MutexLock lock(&state_mu_);
  const bool live = LiveInSegments(*state_, id);
  if (live) segment_dead_.fetch_add(1);
  tombstones_->Set(id, seq);
  return live;
}

uint64_t Collection::ApplyUpsert(const ReadState& state, uint64_t seq,
                                 const std::vector<PointRecord>& points) {
  const bool segments = !state.segments.empty() || !state.frozen.empty();
  for (const PointRecord& p : points) {
    for (const auto& frozen : state.frozen) frozen->Delete(p.id);
    if (segments) KillInSegments(p.id, seq);
    state.active->Upsert(p);
  }
  return points.size();
}

uint64_t Collection::ApplyDelete(const ReadState& state, uint64_t seq,
                                 const std::vector<uint64_t>& ids) {
  const bool segments = !state.segments.empty() || !state.frozen.empty();
  uint64_t deleted = 0;
  for (uint64_t id : ids) {
    bool existed = state.active->Delete(id);
    for (const auto& frozen : state.frozen) existed = frozen->Delete(id) || existed;
    if (segments && KillInSegments(id, seq)) existed = true;
    deleted += existed ? 1 : 0;
  }
  return deleted;
}

std::shared_ptr<const Collection::ReadState> Collection::state() const {
  absl::MutexLock lock(&state_mu_);
  return state_;
}

void Collection::SetState(std::shared_ptr<const ReadState> state) {
  absl::MutexLock lock(&state_mu_);
  state_ = std::move(state);
}

void Collection::Upsert(std::vector<PointRecord> points, WriteDone done) {
  if (metric_ == core::Metric::kCosine) {
    for (PointRecord& p : points) core::NormalizeInPlace(p.vector.data(), p.vector.size());
  }
  UpsertBatch batch{dim_, std::move(points)};
  std::string record = EncodeWalRecord(WalRecordType::kUpsertBatch, EncodeUpsertBatch(batch));
  auto shared = std::make_shared<UpsertBatch>(std::move(batch));
  AppendWrite(
      std::move(record),
      [this, shared](const ReadState& state, uint64_t seq) {
        return ApplyUpsert(state, seq, shared->points);
      },
      std::move(done));
}

void Collection::Delete(std::vector<uint64_t> ids, WriteDone done) {
  DeleteBatch batch{std::move(ids)};
  std::string record = EncodeWalRecord(WalRecordType::kDeleteBatch, EncodeDeleteBatch(batch));
  auto shared = std::make_shared<DeleteBatch>(std::move(batch));
  AppendWrite(
      std::move(record),
      [this, shared](const ReadState& state, uint64_t seq) {
        return ApplyDelete(state, seq, shared->ids);
      },
      std::move(done));
}

void Collection::AppendWrite(std::string record, Apply apply, WriteDone done) {
  // A WAL that refuses (closed, failed) answers inside Append, with write_mu_ held; that
  // answer is held back until the lock is released, so `done` (which may take other locks,
  // e.g. the catalog's) never runs under write_mu_.
  struct Gate {
    absl::Mutex mu;
    bool appending ABSL_GUARDED_BY(mu) = true;
    std::optional<absl::Status> refused ABSL_GUARDED_BY(mu);
    WriteDone done;
  };
  auto gate = std::make_shared<Gate>();
  gate->done = std::move(done);
  {
    absl::MutexLock lock(&write_mu_);
    Wal* const w = wal();
    if (w == nullptr) {
      absl::MutexLock g(&gate->mu);
      gate->refused = no_wal_;
    } else {
      // The state is read under write_mu_, which a memtable freeze also holds: this write
      // lands in the memtable that its WAL file belongs to.
      const uint64_t seq = ++seq_;
      w->Append(std::move(record),
                [gate, seq, current = state(), apply = std::move(apply)](absl::Status s) mutable {
                  if (s.ok()) return std::move(gate->done)(std::move(apply)(*current, seq));
                  {
                    absl::MutexLock g(&gate->mu);
                    if (gate->appending) {
                      gate->refused = std::move(s);
                      return;
                    }
                  }
                  std::move(gate->done)(std::move(s));
                });
    }
  }
  absl::Status refused;
  {
    absl::MutexLock g(&gate->mu);
    gate->appending = false;
    if (!gate->refused) return;
    refused = *gate->refused;
  }
  std::move(gate->done)(std::move(refused));
}

std::vector<StoredPoint> Collection::Get(absl::Span<const uint64_t> ids,
                                         bool include_vectors) const {
  const auto current = state();
  std::vector<StoredPoint> out;
  for (uint64_t id : ids) {
    if (auto p = current->active->Get(id, include_vectors)) {
      out.push_back(*std::move(p));
      continue;
    }
    bool found = false;
    for (size_t f = current->frozen.size(); f-- > 0 && !found;) {
      if (auto p = current->frozen[f]->Get(id, include_vectors)) {
        out.push_back(*std::move(p));
        found = true;
      }
    }
    if (found) continue;
    const uint64_t tombstone = tombstones_->Get(id);
    for (size_t s = current->segments.size(); s-- > 0;) {
      if (!current->segments[s]->Contains(id) || tombstone > current->segment_seqs[s]) continue;
      auto p = current->segments[s]->ReadPoint(id, include_vectors);
      if (p.ok()) out.push_back(*std::move(p));
      break;
    }
  }
  return out;
}

SearchSnapshot Collection::SearchView(const core::filter::Filter* filter) const {
  const auto current = state();
  SearchSnapshot snap;
  for (size_t s = 0; s < current->segments.size(); ++s) {
    auto dead = std::make_shared<SegmentFilter>(tombstones_, current->segment_seqs[s]);
    snap.segments.push_back(current->segments[s]->Ref(dead));
    if (filter) {
      snap.segments.back().selection = current->segments[s]->Select(
          *filter, *dead, tombstones_->Above(current->segment_seqs[s]));
    }
  }
  snap.memtable.dim = dim_;
  std::vector<std::shared_ptr<const void>> keep;
  // The memtable selection numbers rows block by block over every memtable's snapshot.
  std::vector<uint64_t> block_rows;
  std::vector<uint64_t> words;
  uint64_t selected_rows = 0;
  auto add = [&](const Memtable& memtable) {
    core::FlatView view = memtable.Snapshot();
    if (filter) {
      const RowBits bits = memtable.Select(*filter, view.rows());
      uint64_t row = 0;
      for (const core::VectorBlock& block : view.blocks) {
        block_rows.push_back(block.rows);
        for (size_t r = 0; r < block.rows; ++r, ++row) {
          const uint64_t out = selected_rows + r;
          if ((out >> 6) >= words.size()) words.resize((out >> 6) + 1, 0);
          const bool dead = block.dead && block.dead[r].load(std::memory_order_acquire);
          if (bits.Test(row) && !dead) words[out >> 6] |= uint64_t(1) << (out & 63);
        }
        selected_rows += block.rows;
      }
    }
    snap.memtable.blocks.insert(snap.memtable.blocks.end(), view.blocks.begin(), view.blocks.end());
    keep.push_back(view.keepalive);
  };
  add(*current->active);
  for (const auto& memtable : current->frozen) add(*memtable);
  if (filter) {
    snap.memtable_selection = std::make_shared<core::RowSelection>(block_rows, std::move(words));
  }
  snap.memtable.keepalive =
      std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(keep));
  return snap;
}

uint64_t Collection::Count(const core::filter::Filter* filter) const {
  if (!filter) return Stats().num_vectors;
  const SearchSnapshot snap = SearchView(filter);
  uint64_t count = snap.memtable_selection->matches();
  for (const core::IvfSegmentRef& s : snap.segments) count += s.selection->matches();
  return count;
}

CollectionStats Collection::Stats() const {
  const auto current = state();
  CollectionStats stats;
  uint64_t segment_rows = 0;
  for (const auto& s : current->segments) {
    segment_rows += s->meta().num_vectors;
    stats.disk_bytes += s->disk_bytes();
    stats.attribute_memory_bytes += s->attribute_memory_bytes();
  }
  const uint64_t dead = std::min(segment_rows, segment_dead_.load());
  stats.num_indexed = segment_rows - dead;
  stats.num_segments = uint32_t(current->segments.size());
  stats.memtable_rows = current->active->live_count();
  stats.num_vectors = stats.num_indexed + stats.memtable_rows;
  stats.stored_rows = segment_rows + current->active->rows();
  stats.memory_bytes = current->active->memory_bytes();
  stats.attribute_memory_bytes += current->active->attribute_memory_bytes();
  for (const auto& frozen : current->frozen) {
    stats.num_vectors += frozen->live_count();
    stats.stored_rows += frozen->rows();
    stats.memory_bytes += frozen->memory_bytes();
    stats.attribute_memory_bytes += frozen->attribute_memory_bytes();
  }
  {
    absl::MutexLock lock(&wal_mu_);
    stats.disk_bytes += wal_ ? wal_->file_bytes() : 0;
  }
  return stats;
}

BuildProgress Collection::progress() const {
  absl::MutexLock lock(&progress_mu_);
  return progress_;
}

void Collection::SetProgress(const char* phase, uint32_t percent) {
  {
    absl::MutexLock lock(&progress_mu_);
    progress_.running = phase != nullptr;
    progress_.phase = phase ? phase : "";
    progress_.percent = percent;
  }
  if (phase) core::Logger("collection")->info("{}: {} {}%", name_, phase, percent);
}

absl::Status Collection::Close() {
  {
    absl::MutexLock maintenance(&maintenance_mu_);  // waits for a build that is running
    closed_ = true;
  }
  absl::MutexLock lock(&write_mu_);
  if (Wal* w = wal()) return w->Close();
  return no_wal_;
}

}  // namespace shoal::storage
