#include "core/filter/typed_leaf.h"

#include <limits>
#include <optional>

namespace shoal::core::filter {
namespace {

using Wide = __int128;
constexpr Wide kMin = std::numeric_limits<int64_t>::min();
constexpr Wide kMax = std::numeric_limits<int64_t>::max();

// The least int64 v for which `reached(v)` holds, `reached` being monotone (false, then true)
// along the int64 line; kMax + 1 when it never holds.
template <typename P>
Wide FirstWhere(P reached) {
  Wide lo = kMin, hi = kMax + 1;
  while (lo < hi) {
    const Wide mid = lo + (hi - lo) / 2;
    if (reached(int64_t(mid))) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// An int64 interval [lo, hi], empty when lo > hi.
struct Interval {
  Wide lo, hi;
};

// Where the int64s order against `lit`, as OrderOf says: below `equal` they are less, above
// it greater. REQUIRES: `lit` compares with ints and is ordered (not NaN).
Interval EqualRange(const Literal& lit) {
  bool comparable = false;
  const Wide a = FirstWhere([&](int64_t v) { return OrderOf(v, lit, &comparable) != Ord::kLess; });
  const Wide b =
      FirstWhere([&](int64_t v) { return OrderOf(v, lit, &comparable) == Ord::kGreater; });
  return {a, b - 1};
}

}  // namespace

IntLeaf::IntLeaf(const Expr& leaf) {
  bool comparable = false;
  if (leaf.kind == Expr::Kind::kCompare) {
    const Literal& lit = leaf.literals.front();
    const Ord at_zero = OrderOf(int64_t(0), lit, &comparable);
    if (!comparable) return;           // kNone
    if (at_zero == Ord::kUnordered) {  // NaN: unordered against every int alike
      mode_ = Apply(leaf.op, Ord::kUnordered) ? Mode::kAll : Mode::kNone;
      return;
    }
    const Interval eq = EqualRange(lit);
    Interval take{kMin, kMax};
    bool outside = false;
    switch (leaf.op) {
      case CompareOp::kEq:
        take = eq;
        break;
      case CompareOp::kNe:
        take = eq;
        outside = true;
        break;
      case CompareOp::kLt:
        take = {kMin, eq.lo - 1};
        break;
      case CompareOp::kLe:
        take = {kMin, eq.hi};
        break;
      case CompareOp::kGt:
        take = {eq.hi + 1, kMax};
        break;
      case CompareOp::kGe:
        take = {eq.lo, kMax};
        break;
    }
    const bool empty = take.lo > take.hi;
    const bool whole = take.lo == kMin && take.hi == kMax;
    if (empty || whole) {
      mode_ = (whole != outside) ? Mode::kAll : Mode::kNone;
      return;
    }
    mode_ = outside ? Mode::kOutside : Mode::kRange;
    lo_ = int64_t(take.lo);
    span_ = uint64_t(take.hi - take.lo);
    return;
  }
  // in / not in: the ints equal to some literal (at most one per literal).
  bool any_comparable = leaf.literals.empty();
  for (const Literal& lit : leaf.literals) {
    const Ord at_zero = OrderOf(int64_t(0), lit, &comparable);
    any_comparable = any_comparable || comparable;
    if (!comparable || at_zero == Ord::kUnordered) continue;
    const Interval eq = EqualRange(lit);
    for (Wide v = eq.lo; v <= eq.hi; ++v) set_.push_back(int64_t(v));
  }
  std::sort(set_.begin(), set_.end());
  set_.erase(std::unique(set_.begin(), set_.end()), set_.end());
  if (leaf.kind == Expr::Kind::kIn) {
    mode_ = set_.empty() ? Mode::kNone : Mode::kSet;
  } else if (any_comparable) {  // kNotIn
    mode_ = set_.empty() ? Mode::kAll : Mode::kNotSet;
  }
}

namespace {

// `lit` as a double that orders exactly as it does against every double; none for a uint64
// (its own rule) or an int64 that a double does not hold.
std::optional<double> ExactDouble(const Literal& lit) {
  if (const auto* d = std::get_if<double>(&lit)) return *d;
  if (const auto* i = std::get_if<int64_t>(&lit)) {
    const double d = double(*i);
    if (d < 0x1p63 && int64_t(d) == *i) return d;
  }
  return std::nullopt;
}

bool NumericKind(const Literal& lit) {
  return std::holds_alternative<int64_t>(lit) || std::holds_alternative<uint64_t>(lit) ||
         std::holds_alternative<double>(lit);
}

}  // namespace

DoubleLeaf::DoubleLeaf(const Expr& leaf) : leaf_(&leaf) {
  if (leaf.kind == Expr::Kind::kCompare) {
    const Literal& lit = leaf.literals.front();
    if (!NumericKind(lit)) return;  // kNone
    if (std::optional<double> x = ExactDouble(lit)) {
      mode_ = Mode::kCompare;
      op_ = leaf.op;
      x_ = *x;
    } else {
      mode_ = Mode::kGeneric;
    }
    return;
  }
  bool any_numeric = leaf.literals.empty();
  for (const Literal& lit : leaf.literals) {
    if (!NumericKind(lit)) continue;  // never equal to a double
    any_numeric = true;
    std::optional<double> x = ExactDouble(lit);
    if (!x) {
      mode_ = Mode::kGeneric;
      return;
    }
    if (!std::isnan(*x)) set_.push_back(*x);
  }
  std::sort(set_.begin(), set_.end());
  if (leaf.kind == Expr::Kind::kIn) {
    mode_ = set_.empty() ? Mode::kNone : Mode::kSet;
  } else if (any_numeric) {
    mode_ = Mode::kNotSet;
  }
}

}  // namespace shoal::core::filter
