// SegmentBuilder: writes one segment directory (the layout of segment_writer.h) from any number
// of rows, with extra memory bounded by a budget (`build.memory_bytes`), not by the row count.
//
//   Add()      rows are appended to spill files in a temporary directory: ids.tmp (fixed64),
//              vectors.tmp (dim float32 each) and attrs.tmp ((fixed64 input row, fixed32
//              length, bytes) of the rows that have attributes). Nothing but a small write
//              buffer stays in memory.
//   Sample()   a deterministic training sample (selection sampling over the spill, one
//              sequential scan), at most what half the budget holds.
//   Write()    1. assign pass: chunks of vectors are assigned to partitions on the CPU arena;
//                 each row's partition goes to assign.tmp and partition sizes are counted;
//              2. the partitions are laid out from the counts (lists.dat offsets, raw.dat rows);
//              3. write pass, group by group: a group is a run of consecutive partitions whose
//                 bytes fit half the budget; the spill is scanned once per group (an exact
//                 model's group is one contiguous run of rows: only that run is read), the
//                 group's rows are encoded (arena) and placed, checksummed, and appended to
//                 lists.dat and raw.dat. Output is partition-major without sorting rows in RAM.
//              4. attrs.dat (storage/attributes/attribute_file.h) in row order, group by group
//                 (consecutive partitions whose attributes fit half the budget): the
//                 attributes spill and assign.tmp are scanned once per group (and once more to
//                 size the groups, unless every row fits one). ivf.meta comes last.
//
// Memory: chunk buffers ~1/8 of the budget each (vectors, their selection, codes), the group
// buffer at most 1/2 (a single partition larger than that is held whole), the sample at most
// 1/2 (only during training, before any of the others); while attrs.dat is written, the
// attribute columns, 16 bytes a row for its row table and the rows' ids (what the open segment
// holds), and a group's attributes with a 16-byte slot per row (at most 1/2). Exact models
// (IvfModel::exact) assign row i of n to slice i * nlist / n instead of a centroid.
//
// Every file of the segment is fsync'ed, then the directory; the temporary directory is removed
// by the destructor. Blocking file I/O runs on the calling (maintenance) thread; CPU work runs
// as tasks on the given executor (I-1, I-2).
//
// Thread-safety: not thread-safe; one thread drives a builder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/exec/executor.h"
#include "core/index/ivf_model.h"
#include "storage/attributes/attribute_columns.h"
#include "storage/io/file_system.h"

namespace shoal::storage {

// How a build splits its memory budget.
struct BuildMemoryPlan {
  size_t chunk_rows = 0;          // rows per scan chunk
  uint64_t group_bytes = 0;       // output bytes per write group (at least one partition)
  size_t max_sample_rows = 0;     // training vectors at most
  size_t spill_buffer_bytes = 0;  // write buffer of each spill file

  static BuildMemoryPlan For(uint64_t budget_bytes, uint32_t dim);
};

class SegmentBuilder {
 public:
  using Progress = std::function<void(const char* phase, uint32_t percent)>;

  // Creates `tmp_dir` (removing a leftover one) for the spill files.
  static absl::StatusOr<std::unique_ptr<SegmentBuilder>> Create(FileSystem* fs, std::string tmp_dir,
                                                                uint32_t dim,
                                                                uint64_t memory_bytes);
  ~SegmentBuilder();

  // REQUIRES: vector has dim floats; FinishInput() not called yet.
  absl::Status Add(uint64_t id, const float* vector, std::string_view attributes);
  // Ends the input. REQUIRED before Sample() and Write().
  absl::Status FinishInput();
  uint64_t rows() const { return rows_; }
  const BuildMemoryPlan& plan() const { return plan_; }

  // min(max_rows, plan().max_sample_rows, rows()) vectors, row-major, chosen by `seed` alone
  // (the same rows and seed give the same sample, whatever the budget's other parts).
  absl::StatusOr<std::vector<float>> Sample(size_t max_rows, uint64_t seed) const;

  // Writes the segment into `dir` (created). REQUIRES: model.dim == dim. Zero rows make a
  // segment of empty partitions.
  // `max_indexed_fields`: as AttributeColumns'.
  absl::Status Write(core::Executor& cpu, const core::IvfModel& model, const std::string& dir,
                     const Progress& progress,
                     uint32_t max_indexed_fields = AttributeColumns::kDefaultMaxIndexedFields);

 private:
  struct Spill;
  struct Layout;
  SegmentBuilder(FileSystem* fs, std::string tmp_dir, uint32_t dim, BuildMemoryPlan plan);

  // Calls fn(first_row, count, ids, vectors) over rows [begin, end) of the spill in chunks of
  // plan_.chunk_rows.
  absl::Status Scan(
      const std::function<absl::Status(uint64_t, size_t, const uint64_t*, const float*)>& fn,
      uint64_t begin = 0, uint64_t end = UINT64_MAX) const;
  absl::Status AssignPass(core::Executor& cpu, const core::IvfModel& model,
                          std::vector<uint64_t>* counts, const Progress& progress);
  absl::Status WriteGroup(core::Executor& cpu, const core::IvfModel& model, Layout* layout,
                          size_t first, size_t end, WritableFile* lists, WritableFile* raw);
  // Calls fn for every row with attributes, in input order, with its partition and row number.
  absl::Status ForEachAttributed(
      const Layout& layout,
      const std::function<void(uint32_t partition, uint64_t row, std::string_view)>& fn) const;
  absl::Status WriteAttrs(const std::string& dir, const Layout& layout,
                          uint32_t max_indexed_fields);

  FileSystem* const fs_;
  const std::string tmp_dir_;
  const uint32_t dim_;
  const BuildMemoryPlan plan_;
  std::unique_ptr<Spill> ids_, vectors_, attrs_;
  uint64_t rows_ = 0;
  uint64_t num_attrs_ = 0;
  bool finished_ = false;
};

}  // namespace shoal::storage
