// IntLeaf, DoubleLeaf: a comparison, `in` or `not in` leaf (filter.h) compiled for one kind of
// attribute value, so that a column of that kind is tested with one or two compares per value
// rather than a walk over the leaf's literals through a variant: for int64 values an interval,
// its complement, or a sorted set (or its complement); for doubles a native comparison where
// that is exact, else the reference ScalarSatisfies per value. The answers are exactly the
// reference semantics' (scalar_order.h): the interval's ends are found by binary search over
// the int64 line with OrderOf itself, so there is no second copy of the rules to drift.
//
// Use: leaf.Visit([&](auto satisfies) { for (v : values) ... satisfies(v) ... }) runs the loop
// once with the predicate of the leaf's mode inlined (no per-value dispatch).
//
// Thread-safety: immutable once built. A DoubleLeaf in the generic mode points at its Expr,
// which must outlive it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/filter/filter.h"
#include "core/filter/scalar_order.h"

namespace shoal::core::filter {

class IntLeaf {
 public:
  enum class Mode { kNone, kAll, kRange, kOutside, kSet, kNotSet };

  // REQUIRES: `leaf` is a kCompare, kIn or kNotIn leaf on an attribute.
  explicit IntLeaf(const Expr& leaf);

  Mode mode() const { return mode_; }
  // kRange: the values v with uint64(v) - uint64(lo()) <= span(); kOutside: the others.
  int64_t lo() const { return lo_; }
  uint64_t span() const { return span_; }
  // kSet: the values in set(); kNotSet: the others. Sorted, distinct.
  const std::vector<int64_t>& set() const { return set_; }

  template <typename F>
  void Visit(F&& loop) const {
    const int64_t lo = lo_;
    const uint64_t span = span_;
    const std::vector<int64_t>& set = set_;
    const bool small = set.size() <= 8;
    switch (mode_) {
      case Mode::kNone:
        return loop([](int64_t) { return false; });
      case Mode::kAll:
        return loop([](int64_t) { return true; });
      case Mode::kRange:
        return loop([=](int64_t v) { return uint64_t(v) - uint64_t(lo) <= span; });
      case Mode::kOutside:
        return loop([=](int64_t v) { return uint64_t(v) - uint64_t(lo) > span; });
      case Mode::kSet:
      case Mode::kNotSet: {
        const bool negate = mode_ == Mode::kNotSet;
        if (small) {
          return loop([&set, negate](int64_t v) {
            bool in = false;
            for (int64_t s : set) in |= s == v;
            return in != negate;
          });
        }
        return loop([&set, negate](int64_t v) {
          return std::binary_search(set.begin(), set.end(), v) != negate;
        });
      }
    }
  }

 private:
  Mode mode_ = Mode::kNone;
  int64_t lo_ = 0;  // kRange, kOutside: [lo_, lo_ + span_]
  uint64_t span_ = 0;
  std::vector<int64_t> set_;  // kSet, kNotSet: sorted, distinct
};

class DoubleLeaf {
 public:
  enum class Mode { kNone, kCompare, kSet, kNotSet, kGeneric };

  // REQUIRES: as IntLeaf's; `leaf` outlives this.
  explicit DoubleLeaf(const Expr& leaf);

  Mode mode() const { return mode_; }
  // kCompare: the values v with `v op() x()`, as the native compare.
  CompareOp op() const { return op_; }
  double x() const { return x_; }

  template <typename F>
  void Visit(F&& loop) const {
    const double x = x_;
    const std::vector<double>& set = set_;
    switch (mode_) {
      case Mode::kNone:
        return loop([](double) { return false; });
      case Mode::kCompare:
        // Native comparisons are the semantics' for these literals, NaN included (only !=
        // holds for a NaN).
        switch (op_) {
          case CompareOp::kEq:
            return loop([=](double v) { return v == x; });
          case CompareOp::kNe:
            return loop([=](double v) { return v != x; });
          case CompareOp::kLt:
            return loop([=](double v) { return v < x; });
          case CompareOp::kLe:
            return loop([=](double v) { return v <= x; });
          case CompareOp::kGt:
            return loop([=](double v) { return v > x; });
          case CompareOp::kGe:
            return loop([=](double v) { return v >= x; });
        }
        return;
      case Mode::kSet:
      case Mode::kNotSet: {
        const bool negate = mode_ == Mode::kNotSet;
        if (set.size() <= 8) {
          return loop([&set, negate](double v) {
            bool in = false;
            for (double s : set) in |= s == v;
            return in != negate;
          });
        }
        // A NaN value is in no set; binary_search would find it (it orders equal to all).
        return loop([&set, negate](double v) {
          return (v == v && std::binary_search(set.begin(), set.end(), v)) != negate;
        });
      }
      case Mode::kGeneric: {
        const Expr& leaf = *leaf_;
        return loop([&leaf](double v) { return ScalarSatisfies(v, leaf); });
      }
    }
  }

 private:
  Mode mode_ = Mode::kNone;
  CompareOp op_ = CompareOp::kEq;
  double x_ = 0;             // kCompare's literal, exactly
  std::vector<double> set_;  // kSet, kNotSet: the literals, sorted (NaN dropped: equals none)
  const Expr* leaf_ = nullptr;
};

}  // namespace shoal::core::filter
