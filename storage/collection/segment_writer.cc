#include "storage/collection/segment_writer.h"

#include "core/base/status.h"
#include "core/index/fastscan_model.h"
#include "storage/attributes/attribute_file.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/segment_format.h"

namespace shoal::storage {
namespace {

constexpr uint64_t kAlign = 4096;

absl::Status WriteAndSync(FileSystem* fs, const std::string& path, std::string_view bytes) {
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, fs->NewAppendableFile(path));
  SHOAL_RETURN_IF_ERROR(file->Append(bytes));
  SHOAL_RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

}  // namespace

absl::Status WriteSegment(FileSystem* fs, const std::string& dir, const core::IvfModel& model,
                          const SegmentRows& rows, const std::vector<uint32_t>& assign,
                          const std::vector<uint8_t>& codes, uint32_t max_indexed_fields) {
  const size_t nlist = model.nlist(), dim = model.dim, code_size = model.CodeSize();
  const bool raw = model.encoding != core::VectorEncoding::kFlat;
  // Rows of each partition, in input order.
  std::vector<std::vector<uint32_t>> members(nlist);
  for (uint32_t i = 0; i < rows.size(); ++i) members[assign[i]].push_back(i);

  SHOAL_RETURN_IF_ERROR(fs->CreateDirs(dir));
  IvfMeta meta;
  meta.model = model;
  meta.num_vectors = rows.size();
  std::string lists, raw_bytes;
  std::vector<std::string_view> attributes;  // in row (partition) order
  attributes.reserve(rows.size());
  for (size_t p = 0; p < nlist; ++p) {
    PartitionExtent extent;
    extent.offset = lists.size();
    extent.count = members[p].size();
    for (uint32_t i : members[p]) PutFixed64(&lists, rows.ids[i]);
    for (uint32_t i : members[p]) {
      lists.append(reinterpret_cast<const char*>(codes.data() + size_t(i) * code_size), code_size);
      if (raw) PutFloats(&raw_bytes, rows.vectors.data() + size_t(i) * dim, dim);
      attributes.push_back(rows.attributes.empty() ? std::string_view() : rows.attributes[i]);
    }
    // 4-bit PQ: the partition's codes as fast-scan blocks (core/index/fastscan_model.h).
    core::LayoutPartitionCodes(
        model, reinterpret_cast<uint8_t*>(lists.data() + extent.offset + extent.count * 8),
        extent.count);
    extent.length = lists.size() - extent.offset;
    extent.crc32c = Crc32c(std::string_view(lists).substr(extent.offset));
    lists.resize((lists.size() + kAlign - 1) / kAlign * kAlign, '\0');
    meta.partitions.push_back(extent);
  }
  SHOAL_RETURN_IF_ERROR(WriteAndSync(fs, JoinPath(dir, "lists.dat"), lists));
  if (raw) SHOAL_RETURN_IF_ERROR(WriteAndSync(fs, JoinPath(dir, "raw.dat"), raw_bytes));
  SHOAL_ASSIGN_OR_RETURN(std::string attrs_file,
                         EncodeAttributeFile(attributes, max_indexed_fields));
  SHOAL_RETURN_IF_ERROR(WriteAndSync(fs, JoinPath(dir, "attrs.dat"), attrs_file));
  SHOAL_RETURN_IF_ERROR(WriteAndSync(fs, JoinPath(dir, "ivf.meta"), EncodeIvfMeta(meta)));
  return fs->SyncDir(dir);
}

}  // namespace shoal::storage
