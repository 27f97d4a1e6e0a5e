// AttributeColumns::Select agrees with Filter::Matches (the reference semantics) on random
// points and random filters, and ClearDead takes dead ids out.
#include "storage/attributes/attribute_columns.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"

namespace shoal::storage::attribute_columns_test {
namespace {

using core::AttributeList;
using core::Attributes;

Attributes RandomPoint(std::mt19937& rng) {
  Attributes a;
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  if (pick(4)) a["n"] = int64_t(pick(10) - 3);
  if (pick(3)) a["x"] = double(pick(20)) / 4;
  if (pick(2)) a["s"] = std::string(1, char('a' + pick(5)));
  if (pick(3) == 0) a["b"] = pick(2) == 0;
  if (pick(2)) {
    AttributeList tags;
    for (int i = pick(4); i > 0; --i) tags.push_back(std::string(1, char('a' + pick(5))));
    if (pick(3) == 0) tags.push_back(int64_t(pick(10)));
    a["tags"] = tags;
  }
  if (pick(5) == 0) a["n"] = std::string("3");  // another kind under a numeric key
  a["d"] = int64_t(pick(1000) - 500);           // on every row: a dense column
  a["t"] = double(pick(400)) / 8;
  return a;
}

std::string RandomLeaf(std::mt19937& rng) {
  static const char* kLeaves[] = {"n = 3",
                                  "n != 2",
                                  "n < 1",
                                  "n >= 4.5",
                                  "x > 2",
                                  "x <= 1.25",
                                  "s = \"c\"",
                                  "s > \"b\"",
                                  "s in [\"a\", \"e\"]",
                                  "s not in [\"a\"]",
                                  "b = true",
                                  "b != true",
                                  "tags = \"a\"",
                                  "tags != \"b\"",
                                  "tags in [\"c\", 3]",
                                  "tags not in [\"a\", \"b\"]",
                                  "exists(tags)",
                                  "exists(b)",
                                  "id < 50",
                                  "id in [3, 70, 99]",
                                  "id not in [1, 2]",
                                  "n in []",
                                  "n not in []",
                                  "missing = 1",
                                  "exists(id)",
                                  "exists(`id`)",
                                  "d >= 0",
                                  "d < -250.5",
                                  "d != 7",
                                  "d in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -3]",
                                  "d not in [0, 2.5, \"x\"]",
                                  "d in [-500, 3, 499]",
                                  "t <= 12.5",
                                  "t in [1, 2.5, 3.125]",
                                  "t > 9223372036854775807"};
  return kLeaves[rng() % (sizeof(kLeaves) / sizeof(kLeaves[0]))];
}

std::string RandomFilter(std::mt19937& rng, int depth) {
  if (depth == 0 || rng() % 3 == 0) return RandomLeaf(rng);
  switch (rng() % 3) {
    case 0:
      return absl::StrCat("not (", RandomFilter(rng, depth - 1), ")");
    case 1:
      return absl::StrCat("(", RandomFilter(rng, depth - 1), ") and (",
                          RandomFilter(rng, depth - 1), ")");
    default:
      return absl::StrCat("(", RandomFilter(rng, depth - 1), ") or (", RandomFilter(rng, depth - 1),
                          ")");
  }
}

TEST(AttributeColumns, SelectAgreesWithMatchesOnRandomPointsAndFilters) {
  std::mt19937 rng(5);
  AttributeColumns columns;
  std::vector<Attributes> points;
  for (uint64_t i = 0; i < 300; ++i) {
    points.push_back(RandomPoint(rng));
    columns.Append(i, points.back());
  }
  for (int t = 0; t < 400; ++t) {
    const std::string text = RandomFilter(rng, 3);
    auto filter = core::filter::Filter::Parse(text);
    ASSERT_TRUE(filter.ok()) << text << ": " << filter.status();
    const uint64_t rows = 1 + rng() % 300;  // a prefix, as a memtable snapshot sees
    RowBits bits = columns.Select(*filter, rows);
    ASSERT_EQ(bits.rows, rows);
    for (uint64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(bits.Test(r), filter->Matches(r, points[r])) << text << " row " << r;
    }
    EXPECT_LE(bits.Count(), rows);
  }
  EXPECT_GT(columns.memory_bytes(), 300u * 8);
}

class DeadIds : public core::IdFilter {
 public:
  bool IsDead(uint64_t id) const override { return id % 3 == 0; }
};

TEST(AttributeColumns, ClearDeadTakesDeadIdsOut) {
  AttributeColumns columns;
  for (uint64_t i = 0; i < 130; ++i) columns.Append(1000 + i, {{"k", int64_t(1)}});
  auto filter = core::filter::Filter::Parse("k = 1");
  ASSERT_TRUE(filter.ok());
  RowBits bits = columns.Select(*filter, 130);
  EXPECT_EQ(bits.Count(), 130u);
  columns.ClearDead(&bits, DeadIds());
  for (uint64_t r = 0; r < 130; ++r) EXPECT_EQ(bits.Test(r), (1000 + r) % 3 != 0) << r;
}

TEST(RowBits, NotStaysInsideItsRows) {
  RowBits bits(70, false);
  bits.Set(3);
  bits.Not();
  EXPECT_EQ(bits.Count(), 69u);
  EXPECT_FALSE(bits.Test(3));
  RowBits all(64, true);
  EXPECT_EQ(all.Count(), 64u);
  all.Not();
  EXPECT_EQ(all.Count(), 0u);
}

}  // namespace
}  // namespace shoal::storage::attribute_columns_test
