// Filter: a metadata filter of a search or a count (docs/filtering.md), parsed once into a
// tree that the storage layer evaluates over attribute columns and that Matches() evaluates
// over one point (the reference semantics, for tests and single rows).
//
// Language: comparisons `f = v`, `!=`, `<`, `<=`, `>`, `>=` with a literal on the right;
// `f in [v, ...]`, `f not in [v, ...]`; `and`, `or`, `not`, parentheses (precedence not > and >
// or); `exists(f)`; the pseudo-field `id` (the point's id; `` `id` `` is an attribute named id).
// Literals: double-quoted strings with backslash escapes, integers, decimals, true/false.
// Identifiers: [A-Za-z_][A-Za-z0-9_.]*, or any key of 1 to 256 bytes in backquotes (a backquote
// inside is doubled). Limits (I-9): 4096 bytes of text, nesting depth 32 (each parenthesis and
// each `not` opens one level; `a and b and c` is one level).
//
// Semantics (attributes have no schema): ints and doubles compare numerically with each other,
// exactly; strings bytewise; bools only with = and !=. A comparison (in and not in included)
// is false on a point whose field is missing or holds another kind; on a list it is true when
// any element satisfies it. `f not in L` holds when some element of f is comparable with L's
// literals (any kind when L is empty) and equals none of them. `not e` negates e (`not (f = 3)`
// matches points without f); `exists(f)` tests presence. `id` takes integer literals only.
//
// Errors: INVALID_ARGUMENT "filter: at byte N: expected X, found Y".
//
// Thread-safety: a Filter is immutable once parsed; share it freely.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/attributes.h"

namespace shoal::core::filter {

inline constexpr size_t kMaxFilterBytes = 4096;
inline constexpr int kMaxFilterDepth = 32;

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

// An integer literal above INT64_MAX is kept as uint64_t (only `id` takes one).
using Literal = std::variant<int64_t, uint64_t, double, std::string, bool>;

struct FieldRef {
  bool is_id = false;
  std::string key;  // an attribute key (empty for id)
};

struct Expr {
  enum class Kind { kAnd, kOr, kNot, kExists, kCompare, kIn, kNotIn };
  Kind kind = Kind::kAnd;
  std::vector<Expr> children;  // kAnd, kOr (two or more), kNot (one)
  FieldRef field;              // leaves
  CompareOp op = CompareOp::kEq;
  std::vector<Literal> literals;  // kCompare: one; kIn, kNotIn: the list
};

class Filter {
 public:
  static absl::StatusOr<Filter> Parse(std::string_view text);

  bool Matches(uint64_t id, const Attributes& attributes) const;
  const Expr& root() const { return root_; }
  const std::string& text() const { return text_; }
  // The attribute keys the filter reads (not id), sorted, once each.
  std::vector<std::string> AttributeKeys() const;

 private:
  Filter(std::string text, Expr root) : text_(std::move(text)), root_(std::move(root)) {}
  std::string text_;
  Expr root_;
};

// Leaf predicates, for code that evaluates leaves field by field. REQUIRES: `leaf` is a
// kCompare, kIn or kNotIn leaf (ValueSatisfies: on an attribute; IdSatisfies: on id).
bool ValueSatisfies(const AttributeValue& value, const Expr& leaf);
bool IdSatisfies(uint64_t id, const Expr& leaf);

}  // namespace shoal::core::filter
