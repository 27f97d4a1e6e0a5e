// ValueIndex keeps each value's rows, drops itself for values that do not repeat and builds
// itself again at Seal when they do after all; FieldColumn answers leaves from it exactly as
// from the column scan, for any prefix of the rows.
#include "storage/attributes/value_index.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "storage/attributes/attribute_columns.h"

namespace shoal::storage::value_index_test {
namespace {

std::vector<uint32_t> RowsOf(const Roaring& bitmap) {
  std::vector<uint32_t> rows;
  for (uint32_t r : bitmap) rows.push_back(r);
  return rows;
}

TEST(ValueIndex, KeepsEachValuesRowsAndFindsRanges) {
  ValueIndex<int64_t> index(true);
  for (uint32_t r = 0; r < 1000; ++r) index.Add(int64_t(r % 10) - 5, r);
  index.Seal({}, {});
  ASSERT_TRUE(index.enabled());
  const Roaring* minus2 = index.Find(-2);
  ASSERT_NE(minus2, nullptr);
  EXPECT_EQ(minus2->cardinality(), 100u);
  for (uint32_t r : RowsOf(*minus2)) EXPECT_EQ(int64_t(r % 10) - 5, -2);
  EXPECT_EQ(index.Find(5), nullptr);

  std::vector<const Roaring*> hits;
  ASSERT_TRUE(index.Collect(-1, 2, 10, &hits));
  ASSERT_EQ(hits.size(), 4u);
  EXPECT_EQ(hits.front(), index.Find(-1));
  EXPECT_EQ(hits.back(), index.Find(2));
  hits.clear();
  EXPECT_FALSE(index.Collect(-5, 4, 3, &hits));  // ten values, more than three
  EXPECT_GT(index.memory_bytes(), 10 * sizeof(Roaring));
}

TEST(ValueIndex, CountBelowAndOrRowsStopAtThePrefix) {
  Roaring bitmap;
  for (uint32_t r : {1u, 5u, 63u, 64u, 200u, 70000u}) bitmap.add(r);
  EXPECT_EQ(CountBelow(bitmap, 0), 0u);
  EXPECT_EQ(CountBelow(bitmap, 64), 3u);
  EXPECT_EQ(CountBelow(bitmap, 65), 4u);
  EXPECT_EQ(CountBelow(bitmap, uint64_t(1) << 40), 6u);
  RowBits out(201);
  OrRows(bitmap, &out);
  EXPECT_EQ(out.Count(), 5u);
  EXPECT_TRUE(out.Test(200));
  EXPECT_TRUE(out.Test(63) && out.Test(64) && out.Test(1) && out.Test(5));
}

TEST(ValueIndex, OrRowsReadsBitsetArrayAndRunContainersUpToThePrefix) {
  Roaring bitmap;
  for (uint32_t r = 0; r < 70000; r += 2) bitmap.add(r);     // a bitset container, then an array
  for (uint32_t r = 140000; r < 140500; ++r) bitmap.add(r);  // a run, once optimised
  bitmap.runOptimize();
  for (uint64_t n : {uint64_t(1), uint64_t(64), uint64_t(4099), uint64_t(65536), uint64_t(65601),
                     uint64_t(140250), uint64_t(200000)}) {
    RowBits out(n);
    OrRows(bitmap, &out);
    EXPECT_EQ(out.Count(), CountBelow(bitmap, n)) << n;
    for (uint64_t r = 0; r < n; ++r) ASSERT_EQ(out.Test(r), bitmap.contains(uint32_t(r))) << r;
    RowBits all(n, true);  // and ORing into set bits leaves nothing past the prefix
    OrRows(bitmap, &all);
    EXPECT_EQ(all.Count(), n);
  }
}

TEST(ValueIndex, UniqueValuesDropTheIndexAndSealKeepsItDropped) {
  ValueIndex<int64_t> index(true);
  std::vector<int64_t> values;
  for (uint32_t r = 0; r < 20000; ++r) {
    values.push_back(int64_t(r) * 7);
    index.Add(values.back(), r);
  }
  EXPECT_FALSE(index.enabled());
  EXPECT_EQ(index.memory_bytes(), 0u);
  index.Seal(values, {});
  EXPECT_FALSE(index.enabled());
}

TEST(ValueIndex, SealRebuildsAnIndexDroppedWhileItsValuesStillLookedUnique) {
  // 5000 values, each on 20 rows: more than kDistinctFloor distinct early on, where they are
  // still more than one per kRowsPerValue rows, but not once every row is in.
  constexpr uint32_t kValues = 5000, kRows = kValues * 20;
  ValueIndex<uint32_t> index(true);
  std::vector<uint32_t> values, rows;
  for (uint32_t i = 0; i < kRows; ++i) {
    values.push_back(i % kValues);
    rows.push_back(2 * i + 1);  // a sparse kind: its rows numbered
    index.Add(values.back(), rows.back());
  }
  EXPECT_FALSE(index.enabled());
  index.Seal(values, rows);
  ASSERT_TRUE(index.enabled());
  const Roaring* v = index.Find(4321);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->cardinality(), 20u);
  for (uint32_t r : RowsOf(*v)) EXPECT_EQ(((r - 1) / 2) % kValues, 4321u);
}

// Values that repeat but one row to a container (each of 65536 values once in each of 16 runs
// of 64 Ki rows) would cost ~50 bytes a row in containers: the index drops itself.
TEST(ValueIndex, RepeatedValuesScatteredOneRowAContainerDropTheIndex) {
  constexpr uint32_t kValues = 65536, kRows = kValues * 16;
  ValueIndex<int64_t> index(true);
  std::vector<int64_t> values;
  values.reserve(kRows);
  for (uint32_t r = 0; r < kRows; ++r) {
    values.push_back(r % kValues);  // within kRowsPerValue: 16 rows a value
    index.Add(values.back(), r);
  }
  EXPECT_FALSE(index.enabled());
  EXPECT_EQ(index.memory_bytes(), 0u);
  index.Seal(values, {});  // the distinct values meet the bound; the containers do not
  EXPECT_FALSE(index.enabled());
  EXPECT_EQ(index.memory_bytes(), 0u);
}

TEST(ValueIndex, EncodesAndDecodesItsBitmapsAndRefusesMalformedBytes) {
  ValueIndex<int64_t> index(true);
  for (uint32_t r = 0; r < 5000; ++r) index.Add(int64_t(r % 7) * 1000 - 3000, r);
  index.Seal({}, {});
  std::string bytes;
  index.EncodeTo(&bytes);
  ValueIndex<int64_t> read(false);
  Decoder in(bytes);
  ASSERT_TRUE(read.DecodeFrom(&in, 5000));
  Decoder again(bytes);
  ValueIndex<int64_t> short_rows(false);
  EXPECT_FALSE(short_rows.DecodeFrom(&again, 4999));  // a row past the segment's
  EXPECT_TRUE(in.empty());
  ASSERT_TRUE(read.enabled());
  EXPECT_EQ(read.memory_bytes(), index.memory_bytes());
  for (int64_t v = -3000; v <= 3000; v += 1000) {
    ASSERT_NE(read.Find(v), nullptr) << v;
    EXPECT_EQ(RowsOf(*read.Find(v)), RowsOf(*index.Find(v))) << v;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    ValueIndex<int64_t> truncated(false);
    Decoder cut(std::string_view(bytes).substr(0, n));
    EXPECT_FALSE(truncated.DecodeFrom(&cut, 5000)) << n;
    EXPECT_FALSE(truncated.enabled());
  }
  for (size_t i = 0; i < bytes.size(); ++i) {  // flipped bytes: refused or decoded, no crash
    std::string flipped = bytes;
    flipped[i] ^= 0x5a;
    ValueIndex<int64_t> any(false);
    Decoder d(flipped);
    (void)any.DecodeFrom(&d, 5000);
  }
}

TEST(ValueIndex, ADisabledFieldIsNeverIndexed) {
  ValueIndex<int64_t> index(false);
  for (uint32_t r = 0; r < 100; ++r) index.Add(1, r);
  index.Seal(std::vector<int64_t>(100, 1), {});
  EXPECT_FALSE(index.enabled());
}

// The same rows with and without value indexes answer every leaf alike, for prefixes of the
// rows too (a memtable reader sees a prefix while later rows are indexed).
TEST(FieldColumnIndex, IndexedAndScannedColumnsAgree) {
  std::mt19937 rng(11);
  AttributeColumns indexed(64), scanned(0);
  constexpr uint64_t kRows = 30000;
  for (uint64_t i = 0; i < kRows; ++i) {
    core::Attributes a;
    a["cat"] = int64_t(rng() % 1000);                               // dense, 1000 values
    if (rng() % 3 == 0) a["tenant"] = int64_t(rng() % 50);          // sparse
    a["region"] = std::string(1, char('a' + rng() % 20));           // dense strings
    if (rng() % 4 == 0) a["tag"] = absl::StrCat("t", rng() % 300);  // sparse strings
    if (rng() % 5 == 0) a["cat"] = double(rng() % 1000);            // another kind, same key
    a["uid"] = int64_t(i);                                          // unique: no index
    indexed.Append(i, a);
    scanned.Append(i, a);
  }
  const uint64_t unsealed_bytes = indexed.memory_bytes();
  EXPECT_GT(unsealed_bytes, scanned.memory_bytes());
  const char* kFilters[] = {"cat = 7",
                            "cat in [1, 2, 999, 5000]",
                            "cat >= 10 and cat < 14",
                            "cat != 7",
                            "cat not in [3]",
                            "cat > 990",
                            "cat = 7.5",
                            "tenant = 3",
                            "tenant in [4, 40] or region = \"c\"",
                            "region = \"q\"",
                            "region in [\"a\", \"t\", \"zz\"]",
                            "region != \"b\"",
                            "region > \"r\"",
                            "tag = \"t17\"",
                            "tag in [\"t1\", \"t299\"]",
                            "not (tag = \"t5\")",
                            "uid = 12345",
                            "uid < 100",
                            "cat = 3 and region = \"e\""};
  for (bool sealed : {false, true}) {  // as the memtable's, then as a segment's
    if (sealed) {
      indexed.Seal();
      scanned.Seal();
      EXPECT_LT(indexed.memory_bytes(), unsealed_bytes);  // trimmed
    }
    for (const char* text : kFilters) {
      auto filter = core::filter::Filter::Parse(text);
      ASSERT_TRUE(filter.ok()) << text;
      for (uint64_t rows : {kRows, uint64_t(20000), uint64_t(4097), uint64_t(1)}) {
        const RowBits a = indexed.Select(*filter, rows), b = scanned.Select(*filter, rows);
        ASSERT_EQ(a.words, b.words) << text << " over " << rows << " rows, sealed " << sealed;
      }
    }
  }
}

}  // namespace
}  // namespace shoal::storage::value_index_test
