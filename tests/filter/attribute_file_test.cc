// attrs.dat version 2 (attribute_file.h): the columns read back select what the columns built
// row by row select, every row's attributes read back as written, and every flipped byte or
// truncation is DATA_LOSS, never a crash or a wrong answer.
#include "storage/attributes/attribute_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "storage/format/wal_format.h"
#include "tests/fakes/random_attributes.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::attribute_file_test {
namespace {

using testing::RandomFilter;
using testing::RandomPoint;

struct Rows {
  std::vector<core::Attributes> points;
  std::vector<std::string> encoded;

  std::vector<std::string_view> views() const {
    return std::vector<std::string_view>(encoded.begin(), encoded.end());
  }
};

Rows RandomRows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Rows rows;
  for (size_t i = 0; i < n; ++i) {
    // Every fifth row without attributes: an empty entry.
    rows.points.push_back(i % 5 == 4 ? core::Attributes() : RandomPoint(rng));
    rows.encoded.push_back(EncodeAttributes(rows.points.back()));
  }
  return rows;
}

class AttributeFileTest : public ::testing::Test {
 protected:
  // Writes `bytes` as a file and opens it.
  std::unique_ptr<RandomAccessFile> Open(const std::string& bytes) {
    const std::string path = dir_.Sub("attrs.dat");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto file = DefaultFileSystem()->NewRandomAccessFile(path);
    EXPECT_TRUE(file.ok()) << file.status();
    return file.ok() ? *std::move(file) : nullptr;
  }

  // Everything the file holds: its columns (restored into `columns`) and its rows' attributes.
  absl::Status ReadAll(const std::string& bytes, AttributeColumns* columns,
                       std::vector<std::string>* attributes) {
    auto file = Open(bytes);
    auto layout = ReadAttributeLayout(*file);
    if (!layout.ok()) return layout.status();
    // A version the CRC vouches for but this reader does not know (as Segment::Open says).
    if (layout->version != kAttributeFileVersion) return absl::FailedPreconditionError("version");
    std::vector<std::pair<std::string, FieldColumn>> read;
    for (size_t f = 0; f < layout->fields.size(); ++f) {
      auto column = ReadAttributeColumn(*file, *layout, f);
      if (!column.ok()) return column.status();
      read.emplace_back(layout->fields[f].key, *std::move(column));
    }
    auto rows = ReadRowAttributes(*file, *layout, 0, layout->rows);
    if (!rows.ok()) return rows.status();
    *attributes = *std::move(rows);
    std::vector<uint64_t> ids(layout->rows);
    for (uint64_t r = 0; r < ids.size(); ++r) ids[r] = r;
    columns->Restore(std::move(ids), std::move(read));
    return absl::OkStatus();
  }

  testing::TempDir dir_;
};

TEST_F(AttributeFileTest, ColumnsReadBackSelectWhatTheBuiltColumnsSelect) {
  const Rows rows = RandomRows(700, 11);
  auto bytes = EncodeAttributeFile(rows.views(), AttributeColumns::kDefaultMaxIndexedFields);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  AttributeColumns read;
  std::vector<std::string> attributes;
  ASSERT_TRUE(ReadAll(*bytes, &read, &attributes).ok());
  EXPECT_EQ(attributes, rows.encoded);
  ASSERT_EQ(read.rows(), rows.points.size());
  std::mt19937 rng(3);
  for (int t = 0; t < 300; ++t) {
    const std::string text = RandomFilter(rng, 3);
    auto filter = core::filter::Filter::Parse(text);
    ASSERT_TRUE(filter.ok()) << text;
    const RowBits got = read.Select(*filter, read.rows());
    for (uint64_t r = 0; r < rows.points.size(); ++r) {
      ASSERT_EQ(got.Test(r), filter->Matches(r, rows.points[r])) << text << " row " << r;
    }
  }
}

TEST_F(AttributeFileTest, RowsAreReadInRunsAndOneByOne) {
  const Rows rows = RandomRows(50, 5);
  auto bytes = EncodeAttributeFile(rows.views(), 64);
  ASSERT_TRUE(bytes.ok());
  auto file = Open(*bytes);
  auto layout = ReadAttributeLayout(*file);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->rows, 50u);
  for (uint64_t r = 0; r < 50; ++r) {
    auto one = ReadRowAttributes(*file, *layout, r, 1);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ(one->front(), rows.encoded[r]) << r;
  }
  auto run = ReadRowAttributes(*file, *layout, 17, 20);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(*run, std::vector<std::string>(rows.encoded.begin() + 17, rows.encoded.begin() + 37));
}

TEST_F(AttributeFileTest, NoRowsAndNoAttributesMakeValidFiles) {
  for (size_t n : {0, 3}) {
    auto bytes = EncodeAttributeFile(std::vector<std::string_view>(n), 64);
    ASSERT_TRUE(bytes.ok());
    AttributeColumns columns;
    std::vector<std::string> attributes;
    ASSERT_TRUE(ReadAll(*bytes, &columns, &attributes).ok()) << n;
    EXPECT_EQ(attributes, std::vector<std::string>(n));
    auto filter = core::filter::Filter::Parse("not exists(a)");
    ASSERT_TRUE(filter.ok());
    EXPECT_EQ(columns.Select(*filter, n).Count(), n);
  }
}

TEST_F(AttributeFileTest, TheIndexedFieldsFollowTheCapInKeyOrder) {
  const Rows rows = RandomRows(200, 8);
  auto all = EncodeAttributeFile(rows.views(), 64);
  auto none = EncodeAttributeFile(rows.views(), 0);
  ASSERT_TRUE(all.ok() && none.ok());
  EXPECT_GT(all->size(), none->size());  // the indexes are in the file
  // Read with another cap than it was written with, a file's indexes are dropped or built.
  AttributeColumns as_written(64), dropped(0), built(64);
  std::vector<std::string> attributes;
  ASSERT_TRUE(ReadAll(*all, &as_written, &attributes).ok());
  ASSERT_TRUE(ReadAll(*all, &dropped, &attributes).ok());
  ASSERT_TRUE(ReadAll(*none, &built, &attributes).ok());
  EXPECT_EQ(built.memory_bytes(), as_written.memory_bytes());
  EXPECT_LT(dropped.memory_bytes(), as_written.memory_bytes());
}

TEST_F(AttributeFileTest, EveryFlippedByteIsDataLoss) {
  const Rows rows = RandomRows(40, 9);
  auto bytes = EncodeAttributeFile(rows.views(), 64);
  ASSERT_TRUE(bytes.ok());
  for (size_t i = 0; i < bytes->size(); ++i) {
    std::string flipped = *bytes;
    flipped[i] ^= 0x20;
    AttributeColumns columns;
    std::vector<std::string> attributes;
    const absl::Status s = ReadAll(flipped, &columns, &attributes);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i << " of " << bytes->size();
  }
}

TEST_F(AttributeFileTest, EveryTruncationIsDataLoss) {
  const Rows rows = RandomRows(10, 2);
  auto bytes = EncodeAttributeFile(rows.views(), 64);
  ASSERT_TRUE(bytes.ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    AttributeColumns columns;
    std::vector<std::string> attributes;
    const absl::Status s = ReadAll(bytes->substr(0, n), &columns, &attributes);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << n;
  }
}

TEST(FieldColumnDecode, MalformedColumnsAreRefusedNotTrusted) {
  std::mt19937 rng(4);
  std::vector<core::Attributes> points;
  for (int i = 0; i < 100; ++i) points.push_back(RandomPoint(rng));
  AttributeColumns columns;
  for (uint64_t r = 0; r < points.size(); ++r) columns.Append(r, points[r]);
  columns.Seal();
  size_t checked = 0;
  columns.ForEachColumn([&](const std::string& key, const FieldColumn& column) {
    std::string bytes;
    column.EncodeTo(&bytes);
    EXPECT_TRUE(FieldColumn::Decode(bytes, 100).ok()) << key;
    // Rows past the segment's, every truncation and trailing bytes are refused.
    if (key == "n" || key == "tags") {
      EXPECT_FALSE(FieldColumn::Decode(bytes, 50).ok()) << key;
    }
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_FALSE(FieldColumn::Decode(bytes.substr(0, n), 100).ok()) << key << " " << n;
    }
    EXPECT_FALSE(FieldColumn::Decode(bytes + "x", 100).ok()) << key;
    // Flipped bytes: refused or decoded, never a crash (the file's CRC catches the rest).
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::string flipped = bytes;
      flipped[i] ^= 0x41;
      (void)FieldColumn::Decode(flipped, 100);
    }
    ++checked;
  });
  EXPECT_GE(checked, 5u);
}

}  // namespace
}  // namespace shoal::storage::attribute_file_test
