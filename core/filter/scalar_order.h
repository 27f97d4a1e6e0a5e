// The core of the filter semantics (filter.h): how one scalar attribute value orders against
// one literal, and whether it satisfies a comparison, `in` or `not in` leaf. Filter::Matches
// and the storage layer's typed columns (typed_leaf.h) both decide through these, so a column
// evaluation and the per-point reference cannot disagree.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <variant>

#include "core/filter/filter.h"

namespace shoal::core::filter {

enum class Ord { kLess, kEqual, kGreater, kUnordered };

template <typename T>
Ord Cmp(const T& a, const T& b) {
  return a < b ? Ord::kLess : b < a ? Ord::kGreater : Ord::kEqual;
}

// a <=> b exactly, for an int64 and a double (no rounding of a to double).
inline Ord CmpIntDouble(int64_t a, double b) {
  if (std::isnan(b)) return Ord::kUnordered;
  if (b >= 0x1p63) return Ord::kLess;
  if (b < -0x1p63) return Ord::kGreater;
  const double t = std::trunc(b);
  const int64_t ti = int64_t(t);
  if (a != ti) return a < ti ? Ord::kLess : Ord::kGreater;
  return b > t ? Ord::kLess : b < t ? Ord::kGreater : Ord::kEqual;
}

inline Ord Flip(Ord o) {
  return o == Ord::kLess ? Ord::kGreater : o == Ord::kGreater ? Ord::kLess : o;
}

// A uint64 above INT64_MAX against a number: long double holds both exactly.
inline Ord CmpBig(long double a, uint64_t b) {
  if (std::isnan(a)) return Ord::kUnordered;
  return Cmp<long double>(a, (long double)b);
}

// value <=> literal when their kinds compare (*comparable), per kind of value: no copies.
inline Ord OrderOf(int64_t i, const Literal& lit, bool* comparable) {
  *comparable = true;
  if (const auto* l = std::get_if<int64_t>(&lit)) return Cmp(i, *l);
  if (std::holds_alternative<uint64_t>(lit)) return Ord::kLess;  // literal > INT64_MAX
  if (const auto* d = std::get_if<double>(&lit)) return CmpIntDouble(i, *d);
  *comparable = false;
  return Ord::kUnordered;
}

inline Ord OrderOf(double d, const Literal& lit, bool* comparable) {
  *comparable = true;
  if (const auto* l = std::get_if<int64_t>(&lit)) return Flip(CmpIntDouble(*l, d));
  if (const auto* u = std::get_if<uint64_t>(&lit)) return CmpBig(d, *u);
  if (const auto* e = std::get_if<double>(&lit)) {
    return std::isnan(d) || std::isnan(*e) ? Ord::kUnordered : Cmp(d, *e);
  }
  *comparable = false;
  return Ord::kUnordered;
}

inline Ord OrderOf(const std::string& s, const Literal& lit, bool* comparable) {
  const auto* l = std::get_if<std::string>(&lit);
  *comparable = l != nullptr;
  if (!l) return Ord::kUnordered;
  const int c = s.compare(*l);  // bytewise: char_traits<char> compares as unsigned char
  return c < 0 ? Ord::kLess : c > 0 ? Ord::kGreater : Ord::kEqual;
}

inline Ord OrderOf(bool b, const Literal& lit, bool* comparable) {
  const auto* l = std::get_if<bool>(&lit);
  *comparable = l != nullptr;
  return l && *l == b ? Ord::kEqual : Ord::kUnordered;
}

inline bool Apply(CompareOp op, Ord o) {
  switch (op) {
    case CompareOp::kEq:
      return o == Ord::kEqual;
    case CompareOp::kNe:
      return o != Ord::kEqual;
    case CompareOp::kLt:
      return o == Ord::kLess;
    case CompareOp::kLe:
      return o == Ord::kLess || o == Ord::kEqual;
    case CompareOp::kGt:
      return o == Ord::kGreater;
    case CompareOp::kGe:
      return o == Ord::kGreater || o == Ord::kEqual;
  }
  return false;
}

// Whether scalar `value` satisfies `leaf` (a kCompare, kIn or kNotIn leaf on an attribute).
template <typename T>
bool ScalarSatisfies(const T& value, const Expr& leaf) {
  bool comparable = false;
  switch (leaf.kind) {
    case Expr::Kind::kCompare: {
      const Ord o = OrderOf(value, leaf.literals.front(), &comparable);
      return comparable && Apply(leaf.op, o);
    }
    case Expr::Kind::kIn:
      for (const Literal& lit : leaf.literals) {
        if (OrderOf(value, lit, &comparable) == Ord::kEqual) return true;
      }
      return false;
    case Expr::Kind::kNotIn: {
      bool any_comparable = leaf.literals.empty();
      for (const Literal& lit : leaf.literals) {
        if (OrderOf(value, lit, &comparable) == Ord::kEqual) return false;
        any_comparable = any_comparable || comparable;
      }
      return any_comparable;
    }
    default:
      return false;
  }
}

}  // namespace shoal::core::filter
