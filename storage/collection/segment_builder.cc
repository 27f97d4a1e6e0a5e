#include "storage/collection/segment_builder.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/base/failpoint.h"
#include "core/base/status.h"
#include "core/exec/run_and_wait.h"
#include "core/index/fastscan_model.h"
#include "storage/attributes/attribute_file.h"
#include "storage/collection/segment_writer.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/segment_format.h"

namespace shoal::storage {
namespace {

constexpr uint64_t kAlign = 4096;
// Rows per arena task: FAISS's assignment scratch grows with it (256 x 1024 floats, 1 MiB).
// Chunks are whole multiples of it, so every task covers the same global rows whatever the
// budget, and BLAS sees the same batches: the same budget-independent assignment.
constexpr size_t kRowsPerTask = 256;

uint64_t AlignUp4k(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::Status ReadExactly(const RandomAccessFile& file, uint64_t offset, size_t n, char* out) {
  SHOAL_ASSIGN_OR_RETURN(size_t got, file.Read(offset, n, out));
  if (got != n) return absl::DataLossError("build spill file: short read");
  return absl::OkStatus();
}

absl::Status SyncAndClose(WritableFile* file) {
  SHOAL_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

// attrs.tmp's entries (fixed64 input row, fixed32 length, the bytes) in order, read a buffer
// at a time.
class AttrsSpillReader {
 public:
  AttrsSpillReader(const RandomAccessFile& file, size_t buffer_bytes)
      : file_(file), size_(file.size()), chunk_(buffer_bytes) {}

  // The next entry (its bytes valid until the next call); false at the end.
  absl::StatusOr<bool> Next(uint64_t* row, std::string_view* bytes) {
    if (pos_ == buffer_.size() && next_ == size_) return false;
    SHOAL_RETURN_IF_ERROR(Ensure(12));
    uint32_t length = 0;
    std::memcpy(row, buffer_.data() + pos_, 8);
    std::memcpy(&length, buffer_.data() + pos_ + 8, 4);
    pos_ += 12;
    SHOAL_RETURN_IF_ERROR(Ensure(length));
    *bytes = std::string_view(buffer_.data() + pos_, length);
    pos_ += length;
    return true;
  }

 private:
  // At least n unread bytes in buffer_.
  absl::Status Ensure(size_t n) {
    if (buffer_.size() - pos_ >= n) return absl::OkStatus();
    buffer_.erase(0, pos_);
    pos_ = 0;
    const uint64_t take = std::min<uint64_t>(std::max(n - buffer_.size(), chunk_), size_ - next_);
    if (buffer_.size() + take < n) return absl::DataLossError("build spill file: truncated entry");
    const size_t old = buffer_.size();
    buffer_.resize(old + size_t(take));
    SHOAL_RETURN_IF_ERROR(ReadExactly(file_, next_, size_t(take), buffer_.data() + old));
    next_ += take;
    return absl::OkStatus();
  }

  const RandomAccessFile& file_;
  const uint64_t size_;
  const size_t chunk_;
  std::string buffer_;
  size_t pos_ = 0;
  uint64_t next_ = 0;
};

}  // namespace

BuildMemoryPlan BuildMemoryPlan::For(uint64_t budget_bytes, uint32_t dim) {
  BuildMemoryPlan plan;
  const uint64_t budget = std::max<uint64_t>(budget_bytes, 64 << 10);
  const uint64_t row_bytes = 8 + uint64_t(dim) * sizeof(float);
  plan.spill_buffer_bytes = size_t(std::clamp<uint64_t>(budget / 64, 4 << 10, 1 << 20));
  plan.chunk_rows =
      size_t(std::max<uint64_t>(1, budget / 8 / row_bytes / kRowsPerTask)) * kRowsPerTask;
  plan.group_bytes = budget / 2;
  plan.max_sample_rows = size_t(std::max<uint64_t>(256, budget / 2 / (uint64_t(dim) * 4)));
  return plan;
}

// An append-only spill file with a write buffer; readable once finished.
struct SegmentBuilder::Spill {
  std::string path;
  std::unique_ptr<WritableFile> out;
  std::string buffer;
  size_t buffer_limit = 0;
  std::unique_ptr<RandomAccessFile> in;

  absl::Status Append(const void* data, size_t n) {
    buffer.append(static_cast<const char*>(data), n);
    if (buffer.size() < buffer_limit) return absl::OkStatus();
    return Drain();
  }
  absl::Status Drain() {
    SHOAL_RETURN_IF_ERROR(out->Append(buffer));
    buffer.clear();
    return absl::OkStatus();
  }
  absl::Status Finish(FileSystem* fs) {
    SHOAL_RETURN_IF_ERROR(Drain());
    std::string().swap(buffer);
    SHOAL_RETURN_IF_ERROR(out->Close());
    out.reset();
    SHOAL_ASSIGN_OR_RETURN(in, fs->NewRandomAccessFile(path));
    return absl::OkStatus();
  }
};

// Where each partition goes in lists.dat and raw.dat.
struct SegmentBuilder::Layout {
  std::vector<PartitionExtent> extents;  // offset, length, count (crc filled by WriteGroup)
  std::vector<uint64_t> raw_row_start;   // per partition
  uint64_t lists_bytes = 0;              // with padding
};

SegmentBuilder::SegmentBuilder(FileSystem* fs, std::string tmp_dir, uint32_t dim,
                               BuildMemoryPlan plan)
    : fs_(fs), tmp_dir_(std::move(tmp_dir)), dim_(dim), plan_(plan) {}

SegmentBuilder::~SegmentBuilder() {
  ids_.reset();
  vectors_.reset();
  attrs_.reset();
  (void)fs_->RemoveAll(tmp_dir_);
}

absl::StatusOr<std::unique_ptr<SegmentBuilder>> SegmentBuilder::Create(FileSystem* fs,
                                                                       std::string tmp_dir,
                                                                       uint32_t dim,
                                                                       uint64_t memory_bytes) {
  (void)fs->RemoveAll(tmp_dir);  // a crashed build's leftovers
  SHOAL_RETURN_IF_ERROR(fs->CreateDirs(tmp_dir));
  std::unique_ptr<SegmentBuilder> b(
      new SegmentBuilder(fs, tmp_dir, dim, BuildMemoryPlan::For(memory_bytes, dim)));
  for (auto [spill, name] : {std::pair{&b->ids_, "ids.tmp"}, std::pair{&b->vectors_, "vectors.tmp"},
                             std::pair{&b->attrs_, "attrs.tmp"}}) {
    *spill = std::make_unique<Spill>();
    (*spill)->path = JoinPath(tmp_dir, name);
    (*spill)->buffer_limit = b->plan_.spill_buffer_bytes;
    SHOAL_ASSIGN_OR_RETURN((*spill)->out, fs->NewAppendableFile((*spill)->path));
  }
  return b;
}

absl::Status SegmentBuilder::Add(uint64_t id, const float* vector, std::string_view attributes) {
  SHOAL_RETURN_IF_ERROR(ids_->Append(&id, sizeof(id)));
  SHOAL_RETURN_IF_ERROR(vectors_->Append(vector, size_t(dim_) * sizeof(float)));
  if (!attributes.empty()) {
    std::string entry;
    PutFixed64(&entry, rows_);
    PutFixed32(&entry, uint32_t(attributes.size()));
    entry.append(attributes);
    SHOAL_RETURN_IF_ERROR(attrs_->Append(entry.data(), entry.size()));
    ++num_attrs_;
  }
  ++rows_;
  return absl::OkStatus();
}

absl::Status SegmentBuilder::FinishInput() {
  for (Spill* s : {ids_.get(), vectors_.get(), attrs_.get()}) SHOAL_RETURN_IF_ERROR(s->Finish(fs_));
  finished_ = true;
  return absl::OkStatus();
}

absl::Status SegmentBuilder::Scan(
    const std::function<absl::Status(uint64_t, size_t, const uint64_t*, const float*)>& fn,
    uint64_t begin, uint64_t end) const {
  if (!finished_) return absl::FailedPreconditionError("SegmentBuilder: input not finished");
  end = std::min(end, rows_);
  if (begin >= end) return absl::OkStatus();
  std::vector<uint64_t> ids(std::min<uint64_t>(plan_.chunk_rows, end - begin));
  std::vector<float> vectors(ids.size() * dim_);
  const size_t row_bytes = size_t(dim_) * sizeof(float);
  for (uint64_t first = begin; first < end; first += ids.size()) {
    const size_t n = size_t(std::min<uint64_t>(ids.size(), end - first));
    SHOAL_RETURN_IF_ERROR(
        ReadExactly(*ids_->in, first * 8, n * 8, reinterpret_cast<char*>(ids.data())));
    SHOAL_RETURN_IF_ERROR(ReadExactly(*vectors_->in, first * row_bytes, n * row_bytes,
                                      reinterpret_cast<char*>(vectors.data())));
    SHOAL_RETURN_IF_ERROR(fn(first, n, ids.data(), vectors.data()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> SegmentBuilder::Sample(size_t max_rows, uint64_t seed) const {
  const uint64_t want = std::min<uint64_t>({max_rows, plan_.max_sample_rows, rows_});
  std::vector<float> sample;
  sample.reserve(want * dim_);
  // Selection sampling (Knuth's algorithm S): each row is taken with probability
  // (still needed) / (still left), so exactly `want` rows, in spill order, one pass.
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  uint64_t taken = 0;
  SHOAL_RETURN_IF_ERROR(Scan([&](uint64_t first, size_t n, const uint64_t*, const float* v) {
    for (size_t i = 0; i < n && taken < want; ++i) {
      const uint64_t left = rows_ - (first + i);
      if (double(left) * uniform(rng) < double(want - taken)) {
        sample.insert(sample.end(), v + i * dim_, v + (i + 1) * dim_);
        ++taken;
      }
    }
    return absl::OkStatus();
  }));
  return sample;
}

absl::Status SegmentBuilder::AssignPass(core::Executor& cpu, const core::IvfModel& model,
                                        std::vector<uint64_t>* counts, const Progress& progress) {
  const size_t nlist = model.nlist();
  counts->assign(nlist, 0);
  Spill assign;
  assign.path = JoinPath(tmp_dir_, "assign.tmp");
  assign.buffer_limit = plan_.spill_buffer_bytes;
  SHOAL_ASSIGN_OR_RETURN(assign.out, fs_->NewAppendableFile(assign.path));
  std::vector<uint32_t> chunk_assign;
  SHOAL_RETURN_IF_ERROR(Scan([&](uint64_t first, size_t n, const uint64_t*, const float* v) {
    chunk_assign.resize(n);
    if (model.exact) {
      for (size_t i = 0; i < n; ++i) chunk_assign[i] = uint32_t((first + i) * nlist / rows_);
    } else {
      const size_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
      SHOAL_RETURN_IF_ERROR(core::ParallelFor(cpu, tasks, [&](size_t t) {
        const size_t begin = t * kRowsPerTask, count = std::min(kRowsPerTask, n - begin);
        return core::AssignToCentroids(model, v + begin * dim_, count, chunk_assign.data() + begin);
      }));
    }
    for (uint32_t p : chunk_assign) ++(*counts)[p];
    if (progress) progress("assigning", uint32_t(100 * (first + n) / rows_));
    return assign.Append(chunk_assign.data(), n * sizeof(uint32_t));
  }));
  return assign.Finish(fs_);
}

absl::Status SegmentBuilder::WriteGroup(core::Executor& cpu, const core::IvfModel& model,
                                        Layout* layout_out, size_t first, size_t end,
                                        WritableFile* lists, WritableFile* raw) {
  Layout& layout = *layout_out;
  const size_t code_size = model.CodeSize(), row_bytes = size_t(dim_) * sizeof(float);
  const uint64_t base = layout.extents[first].offset;
  const uint64_t group_end =
      end < layout.extents.size() ? layout.extents[end].offset : layout.lists_bytes;
  const uint64_t raw_base = layout.raw_row_start[first];
  const uint64_t raw_rows =
      (end < layout.extents.size() ? layout.raw_row_start[end] : rows_) - raw_base;
  std::string out(group_end - base, '\0');
  std::string raw_out(raw ? raw_rows * row_bytes : 0, '\0');
  std::vector<uint64_t> cursor(end - first, 0);
  SHOAL_ASSIGN_OR_RETURN(auto assign_in,
                         fs_->NewRandomAccessFile(JoinPath(tmp_dir_, "assign.tmp")));
  std::vector<uint32_t> assign;
  std::vector<uint32_t> selected, partitions;
  std::vector<float> vectors;
  std::vector<uint8_t> codes;
  // An exact model slices rows in order, so the group's rows are one contiguous run of the
  // spill: read only that. An IVF group's rows are anywhere: the whole spill is scanned.
  const uint64_t scan_begin = model.exact ? raw_base : 0;
  const uint64_t scan_end = model.exact ? raw_base + raw_rows : rows_;
  SHOAL_RETURN_IF_ERROR(Scan(
      [&](uint64_t row0, size_t n, const uint64_t* ids, const float* v) {
        assign.resize(n);
        SHOAL_RETURN_IF_ERROR(
            ReadExactly(*assign_in, row0 * 4, n * 4, reinterpret_cast<char*>(assign.data())));
        selected.clear();
        for (uint32_t i = 0; i < n; ++i) {
          if (assign[i] >= first && assign[i] < end) selected.push_back(i);
        }
        if (selected.empty()) return absl::OkStatus();
        const size_t m = selected.size();
        vectors.resize(m * dim_);
        partitions.resize(m);
        for (size_t j = 0; j < m; ++j) {
          std::memcpy(vectors.data() + j * dim_, v + size_t(selected[j]) * dim_, row_bytes);
          partitions[j] = assign[selected[j]];
        }
        codes.resize(m * code_size);
        const size_t tasks = (m + kRowsPerTask - 1) / kRowsPerTask;
        SHOAL_RETURN_IF_ERROR(core::ParallelFor(cpu, tasks, [&](size_t t) {
          const size_t begin = t * kRowsPerTask, count = std::min(kRowsPerTask, m - begin);
          return core::EncodeVectors(model, vectors.data() + begin * dim_, count,
                                     partitions.data() + begin, codes.data() + begin * code_size);
        }));
        for (size_t j = 0; j < m; ++j) {
          const uint32_t p = assign[selected[j]];
          const PartitionExtent& e = layout.extents[p];
          const uint64_t k = cursor[p - first]++;
          if (k >= e.count) {  // a spill that disagrees with the counts must not write past `out`
            return absl::InternalError("segment build: the spill changed between passes");
          }
          char* part = out.data() + (e.offset - base);
          std::memcpy(part + k * 8, &ids[selected[j]], 8);
          std::memcpy(part + e.count * 8 + k * code_size, codes.data() + j * code_size, code_size);
          if (raw) {
            const uint64_t row = layout.raw_row_start[p] - raw_base + k;
            std::memcpy(raw_out.data() + row * row_bytes, vectors.data() + j * dim_, row_bytes);
          }
        }
        return absl::OkStatus();
      },
      scan_begin, scan_end));
  for (size_t p = first; p < end; ++p) {
    if (cursor[p - first] != layout.extents[p].count) {
      return absl::InternalError("segment build: the spill changed between passes");
    }
  }
  // Checksums on the arena too (I-2): the maintenance thread only moves bytes. 4-bit PQ
  // partitions are rearranged into fast-scan blocks first (core/index/fastscan_model.h).
  SHOAL_RETURN_IF_ERROR(core::RunAndWait(cpu, [&] {
    for (size_t p = first; p < end; ++p) {
      PartitionExtent& e = layout.extents[p];
      core::LayoutPartitionCodes(
          model, reinterpret_cast<uint8_t*>(out.data() + (e.offset - base) + e.count * 8), e.count);
      e.crc32c = Crc32c(std::string_view(out).substr(e.offset - base, e.length));
    }
    return absl::OkStatus();
  }));
  SHOAL_RETURN_IF_ERROR(lists->Append(out));
  if (raw) SHOAL_RETURN_IF_ERROR(raw->Append(raw_out));
  return absl::OkStatus();
}

absl::Status SegmentBuilder::ForEachAttributed(
    const Layout& layout,
    const std::function<void(uint32_t partition, uint64_t row, std::string_view)>& fn) const {
  SHOAL_ASSIGN_OR_RETURN(auto assign_in,
                         fs_->NewRandomAccessFile(JoinPath(tmp_dir_, "assign.tmp")));
  AttrsSpillReader attrs(*attrs_->in, plan_.spill_buffer_bytes);
  std::vector<uint64_t> next_row = layout.raw_row_start;  // per partition, in input order
  const size_t chunk = std::max<size_t>(1, plan_.spill_buffer_bytes / 4);
  std::vector<uint32_t> assign(chunk);
  uint64_t input_row = 0;
  std::string_view bytes;
  SHOAL_ASSIGN_OR_RETURN(bool more, attrs.Next(&input_row, &bytes));
  for (uint64_t row0 = 0; row0 < rows_; row0 += chunk) {
    const size_t n = size_t(std::min<uint64_t>(chunk, rows_ - row0));
    SHOAL_RETURN_IF_ERROR(
        ReadExactly(*assign_in, row0 * 4, n * 4, reinterpret_cast<char*>(assign.data())));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t p = assign[i];
      if (p >= next_row.size()) return absl::InternalError("segment build: a bad assignment");
      const uint64_t row = next_row[p]++;
      if (!more || input_row != row0 + i) continue;
      fn(p, row, bytes);
      SHOAL_ASSIGN_OR_RETURN(more, attrs.Next(&input_row, &bytes));
    }
  }
  if (more) return absl::InternalError("segment build: the spill changed between passes");
  return absl::OkStatus();
}

absl::Status SegmentBuilder::WriteAttrs(const std::string& dir, const Layout& layout,
                                        uint32_t max_indexed_fields) {
  SHOAL_ASSIGN_OR_RETURN(auto file, fs_->NewAppendableFile(JoinPath(dir, "attrs.dat")));
  AttributeFileWriter writer([&file](std::string_view bytes) { return file->Append(bytes); },
                             max_indexed_fields);
  const size_t nlist = layout.extents.size();
  // The rows go in row (partition) order, group by group: consecutive partitions whose
  // attributes, with a 16-byte slot per row, fit half the budget. One pass over the spill sizes
  // the partitions (none when it all fits), then one pass per group picks its rows.
  constexpr uint64_t kSlotBytes = 16;
  if (num_attrs_ == 0) {  // no row has attributes: nothing to place
    for (uint64_t r = 0; r < rows_; ++r) SHOAL_RETURN_IF_ERROR(writer.Add({}));
    SHOAL_RETURN_IF_ERROR(writer.Finish());
    return SyncAndClose(file.get());
  }
  std::vector<uint64_t> bytes_of(nlist, 0);
  const bool one_group = attrs_->in->size() + rows_ * kSlotBytes <= plan_.group_bytes;
  if (!one_group) {
    SHOAL_RETURN_IF_ERROR(ForEachAttributed(
        layout, [&](uint32_t p, uint64_t, std::string_view b) { bytes_of[p] += b.size(); }));
  }
  std::string buffer;
  std::vector<std::pair<uint64_t, uint32_t>> slots;  // per row of the group: where, how long
  for (size_t first = 0; first < nlist;) {
    size_t end = first;
    for (uint64_t bytes = 0; end < nlist; ++end) {
      const uint64_t add = bytes_of[end] + layout.extents[end].count * kSlotBytes;
      if (!one_group && end > first && bytes + add > plan_.group_bytes) break;
      bytes += add;
    }
    const uint64_t lo = layout.raw_row_start[first];
    const uint64_t hi = end < nlist ? layout.raw_row_start[end] : rows_;
    buffer.clear();
    slots.assign(size_t(hi - lo), {0, 0});
    SHOAL_RETURN_IF_ERROR(
        ForEachAttributed(layout, [&](uint32_t, uint64_t row, std::string_view b) {
          if (row < lo || row >= hi) return;
          slots[row - lo] = {buffer.size(), uint32_t(b.size())};
          buffer.append(b);
        }));
    for (const auto& [offset, length] : slots) {
      SHOAL_RETURN_IF_ERROR(writer.Add(std::string_view(buffer).substr(offset, length)));
    }
    first = end;
  }
  SHOAL_RETURN_IF_ERROR(writer.Finish());
  return SyncAndClose(file.get());
}

absl::Status SegmentBuilder::Write(core::Executor& cpu, const core::IvfModel& model,
                                   const std::string& dir, const Progress& progress,
                                   uint32_t max_indexed_fields) {
  if (model.dim != dim_ || model.nlist() == 0) {
    return absl::InvalidArgumentError("SegmentBuilder::Write: a model of another dim");
  }
  std::vector<uint64_t> counts;
  SHOAL_RETURN_IF_ERROR(AssignPass(cpu, model, &counts, progress));
  const size_t nlist = model.nlist(), code_size = model.CodeSize();
  Layout layout;
  uint64_t row = 0;
  for (size_t p = 0; p < nlist; ++p) {
    PartitionExtent e;
    e.offset = layout.lists_bytes;
    e.count = counts[p];
    e.length = e.count * (8 + code_size);
    layout.extents.push_back(e);
    layout.raw_row_start.push_back(row);
    row += e.count;
    layout.lists_bytes += AlignUp4k(e.length);
  }
  std::vector<uint64_t>().swap(counts);
  const bool raw = model.encoding != core::VectorEncoding::kFlat;
  SHOAL_RETURN_IF_ERROR(fs_->CreateDirs(dir));
  SHOAL_ASSIGN_OR_RETURN(auto lists, fs_->NewAppendableFile(JoinPath(dir, "lists.dat")));
  std::unique_ptr<WritableFile> raw_file;
  if (raw) {
    SHOAL_ASSIGN_OR_RETURN(raw_file, fs_->NewAppendableFile(JoinPath(dir, "raw.dat")));
  }
  const uint64_t raw_row_bytes = raw ? uint64_t(dim_) * sizeof(float) : 0;
  for (size_t first = 0; first < nlist;) {
    // The next group: consecutive partitions within group_bytes (at least one).
    size_t end = first;
    uint64_t bytes = 0;
    while (end < nlist) {
      const uint64_t add =
          AlignUp4k(layout.extents[end].length) + layout.extents[end].count * raw_row_bytes;
      if (end > first && bytes + add > plan_.group_bytes) break;
      bytes += add;
      ++end;
    }
    SHOAL_RETURN_IF_ERROR(WriteGroup(cpu, model, &layout, first, end, lists.get(), raw_file.get()));
    if (progress) progress("writing", uint32_t(100 * end / nlist));
    SHOAL_FAILPOINT("segment.mid_file");
    first = end;
  }
  SHOAL_RETURN_IF_ERROR(SyncAndClose(lists.get()));
  if (raw) SHOAL_RETURN_IF_ERROR(SyncAndClose(raw_file.get()));
  SHOAL_RETURN_IF_ERROR(WriteAttrs(dir, layout, max_indexed_fields));
  SHOAL_FAILPOINT("segment.before_meta");
  IvfMeta meta;
  meta.model = model;
  meta.num_vectors = rows_;
  meta.partitions = std::move(layout.extents);
  SHOAL_ASSIGN_OR_RETURN(auto meta_file, fs_->NewAppendableFile(JoinPath(dir, "ivf.meta")));
  SHOAL_RETURN_IF_ERROR(meta_file->Append(EncodeIvfMeta(meta)));
  SHOAL_RETURN_IF_ERROR(SyncAndClose(meta_file.get()));
  return fs_->SyncDir(dir);
}

}  // namespace shoal::storage
