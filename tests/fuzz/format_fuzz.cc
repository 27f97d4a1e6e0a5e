// libFuzzer target: every on-disk decoder must reject arbitrary bytes with a Status, never
// crash, hang or read out of bounds — including WAL replay over a whole file.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "storage/attributes/attribute_file.h"
#include "storage/collection/wal.h"
#include "storage/format/manifest_format.h"
#include "storage/format/segment_format.h"
#include "storage/format/wal_format.h"
#include "storage/io/file_system.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::storage;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  (void)DecodeUpsertBatch(input);
  (void)DecodeDeleteBatch(input);
  (void)DecodeAttributes(input);
  (void)DecodeManifest(input);
  (void)DecodeIvfMeta(input);
  (void)CheckWalFileHeader(input);
  (void)FieldColumn::Decode(input, 4096);

  // A WAL file: a valid header followed by the input, replayed (and possibly truncated).
  static const std::string dir = [] {
    char name[] = "/tmp/shoal-fuzz-XXXXXX";
    return std::string(mkdtemp(name));
  }();
  static const std::string path = dir + "/000001.log";
  FileSystem* fs = DefaultFileSystem();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);  // no fsync: speed matters here
    const std::string bytes = EncodeWalFileHeader() + std::string(input);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  uint64_t truncated = 0;
  (void)ReplayWal(
      fs, path,
      [](WalRecordType type, std::string_view payload) {
        if (type == WalRecordType::kUpsertBatch) return DecodeUpsertBatch(payload).status();
        return DecodeDeleteBatch(payload).status();
      },
      &truncated);

  // attrs.dat: the input behind a version 2 header, read as a segment opens and reads it.
  static const std::string attrs_path = dir + "/attrs.dat";
  {
    std::ofstream out(attrs_path, std::ios::binary | std::ios::trunc);
    std::string bytes(kAttributeFileMagic);
    bytes.append("\x02\0\0\0", 4);
    bytes += input;
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  if (auto file = fs->NewRandomAccessFile(attrs_path); file.ok()) {
    if (auto layout = ReadAttributeLayout(**file); layout.ok()) {
      for (size_t f = 0; f < layout->fields.size(); ++f)
        (void)ReadAttributeColumn(**file, *layout, f);
      (void)ReadRowAttributes(**file, *layout, 0, layout->rows);
    }
  }
  return 0;
}
