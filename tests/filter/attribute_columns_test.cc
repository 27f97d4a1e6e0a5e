// AttributeColumns::Select agrees with Filter::Matches (the reference semantics) on random
// points and random filters, and ClearDead takes dead ids out.
#include "storage/attributes/attribute_columns.h"

#include <gtest/gtest.h>

#include <random>

#include "absl/strings/str_cat.h"
#include "tests/fakes/random_attributes.h"

namespace shoal::storage::attribute_columns_test {
namespace {

using core::AttributeList;
using core::Attributes;

using testing::RandomFilter;
using testing::RandomPoint;

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
