// IntLeaf and DoubleLeaf (core/filter/typed_leaf.h) answer exactly as the reference
// ScalarSatisfies does, at the edges of the int64 line and of doubles: every operator against
// every kind of literal, and `in` / `not in` lists short and long, mixed and empty.
#include "core/filter/typed_leaf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace shoal::core::filter::typed_leaf_test {
namespace {

constexpr int64_t kMinI = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxI = std::numeric_limits<int64_t>::max();
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<Literal> Literals() {
  return {Literal(kMinI),
          Literal(int64_t(-1)),
          Literal(int64_t(0)),
          Literal(int64_t(7)),
          Literal(kMaxI),
          Literal(int64_t(1) << 53 | 1),
          Literal(uint64_t(1) << 63),
          Literal(~uint64_t(0)),
          Literal(-kInf),
          Literal(-1e300),
          Literal(-0x1p63),
          Literal(-2.5),
          Literal(-0.0),
          Literal(0.5),
          Literal(2.0),
          Literal(7.0),
          Literal(0x1p53),
          Literal(0x1p63),
          Literal(1e300),
          Literal(kInf),
          Literal(kNaN),
          Literal(std::string("7")),
          Literal(true)};
}

std::vector<int64_t> IntValues() {
  return {kMinI,
          kMinI + 1,
          -3,
          -2,
          -1,
          0,
          1,
          2,
          3,
          6,
          7,
          8,
          int64_t(1) << 53,
          (int64_t(1) << 53) + 1,
          kMaxI - 1,
          kMaxI};
}

std::vector<double> DoubleValues() {
  return {-kInf, -1e300, -0x1p63, -2.5,   -1.0,       -0.0,   0.0,   0.5,  2.0,
          6.999, 7.0,    7.001,   0x1p53, 0x1p53 + 2, 0x1p63, 1e300, kInf, kNaN};
}

Expr Leaf(Expr::Kind kind, CompareOp op, std::vector<Literal> literals) {
  Expr e;
  e.kind = kind;
  e.field.key = "f";
  e.op = op;
  e.literals = std::move(literals);
  return e;
}

std::string Describe(const Expr& e) {
  // Appends one piece at a time: gcc 12's -Wrestrict misfires on chained std::string '+'.
  std::string s;
  if (e.kind == Expr::Kind::kCompare) {
    s.append("compare op ").append(std::to_string(int(e.op)));
  } else {
    s.append(e.kind == Expr::Kind::kIn ? "in" : "not in");
  }
  for (const Literal& l : e.literals) {
    std::visit(
        [&s](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          s.push_back(' ');
          if constexpr (std::is_same_v<T, std::string>) {
            s.append("\"").append(v).append("\"");
          } else {
            s.append(std::to_string(v));
          }
        },
        l);
  }
  return s;
}

void ExpectAgrees(const Expr& leaf) {
  IntLeaf ints(leaf);
  for (int64_t v : IntValues()) {
    ints.Visit([&](auto satisfies) {
      ASSERT_EQ(satisfies(v), ScalarSatisfies(v, leaf)) << Describe(leaf) << " int " << v;
    });
  }
  DoubleLeaf doubles(leaf);
  for (double v : DoubleValues()) {
    doubles.Visit([&](auto satisfies) {
      ASSERT_EQ(satisfies(v), ScalarSatisfies(v, leaf)) << Describe(leaf) << " double " << v;
    });
  }
}

TEST(TypedLeaf, EveryComparisonAgreesWithTheReference) {
  for (const Literal& lit : Literals()) {
    for (CompareOp op : {CompareOp::kEq, CompareOp::kNe, CompareOp::kLt, CompareOp::kLe,
                         CompareOp::kGt, CompareOp::kGe}) {
      ExpectAgrees(Leaf(Expr::Kind::kCompare, op, {lit}));
    }
  }
}

TEST(TypedLeaf, InAndNotInListsAgreeWithTheReference) {
  const std::vector<Literal> all = Literals();
  std::mt19937 rng(3);
  for (int t = 0; t < 400; ++t) {
    std::vector<Literal> list;
    const size_t n = t % 5 == 0 ? 0 : 1 + rng() % 14;  // empty, short, and past 8 (sorted)
    for (size_t i = 0; i < n; ++i) list.push_back(all[rng() % all.size()]);
    ExpectAgrees(Leaf(Expr::Kind::kIn, CompareOp::kEq, list));
    ExpectAgrees(Leaf(Expr::Kind::kNotIn, CompareOp::kEq, list));
  }
}

TEST(TypedLeaf, ComparisonsCompileToTheirCheapForm) {
  EXPECT_EQ(IntLeaf(Leaf(Expr::Kind::kCompare, CompareOp::kGe, {Literal(int64_t(0))})).mode(),
            IntLeaf::Mode::kRange);
  EXPECT_EQ(IntLeaf(Leaf(Expr::Kind::kCompare, CompareOp::kNe, {Literal(2.5)})).mode(),
            IntLeaf::Mode::kAll);
  EXPECT_EQ(IntLeaf(Leaf(Expr::Kind::kCompare, CompareOp::kEq, {Literal(true)})).mode(),
            IntLeaf::Mode::kNone);
  EXPECT_EQ(DoubleLeaf(Leaf(Expr::Kind::kCompare, CompareOp::kLt, {Literal(int64_t(3))})).mode(),
            DoubleLeaf::Mode::kCompare);
  EXPECT_EQ(DoubleLeaf(Leaf(Expr::Kind::kCompare, CompareOp::kLt, {Literal(kMaxI)})).mode(),
            DoubleLeaf::Mode::kGeneric);  // 2^63 - 1 is not a double
}

}  // namespace
}  // namespace shoal::core::filter::typed_leaf_test
