#include "core/filter/filter.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

namespace shoal::core::filter {
namespace {

enum class Ord { kLess, kEqual, kGreater, kUnordered };

template <typename T>
Ord Cmp(const T& a, const T& b) {
  return a < b ? Ord::kLess : b < a ? Ord::kGreater : Ord::kEqual;
}

// a <=> b exactly, for an int64 and a double (no rounding of a to double).
Ord CmpIntDouble(int64_t a, double b) {
  if (std::isnan(b)) return Ord::kUnordered;
  if (b >= 0x1p63) return Ord::kLess;
  if (b < -0x1p63) return Ord::kGreater;
  const double t = std::trunc(b);
  const int64_t ti = int64_t(t);
  if (a != ti) return a < ti ? Ord::kLess : Ord::kGreater;
  return b > t ? Ord::kLess : b < t ? Ord::kGreater : Ord::kEqual;
}

Ord Flip(Ord o) { return o == Ord::kLess ? Ord::kGreater : o == Ord::kGreater ? Ord::kLess : o; }

// A uint64 above INT64_MAX against a number: long double holds both exactly.
Ord CmpBig(long double a, uint64_t b) {
  if (std::isnan(a)) return Ord::kUnordered;
  return Cmp<long double>(a, (long double)b);
}

// value <=> literal when their kinds compare (*comparable), per kind of value: no copies.
Ord OrderOf(int64_t i, const Literal& lit, bool* comparable) {
  *comparable = true;
  if (const auto* l = std::get_if<int64_t>(&lit)) return Cmp(i, *l);
  if (std::holds_alternative<uint64_t>(lit)) return Ord::kLess;  // literal > INT64_MAX
  if (const auto* d = std::get_if<double>(&lit)) return CmpIntDouble(i, *d);
  *comparable = false;
  return Ord::kUnordered;
}

Ord OrderOf(double d, const Literal& lit, bool* comparable) {
  *comparable = true;
  if (const auto* l = std::get_if<int64_t>(&lit)) return Flip(CmpIntDouble(*l, d));
  if (const auto* u = std::get_if<uint64_t>(&lit)) return CmpBig(d, *u);
  if (const auto* e = std::get_if<double>(&lit)) {
    return std::isnan(d) || std::isnan(*e) ? Ord::kUnordered : Cmp(d, *e);
  }
  *comparable = false;
  return Ord::kUnordered;
}

Ord OrderOf(const std::string& s, const Literal& lit, bool* comparable) {
  const auto* l = std::get_if<std::string>(&lit);
  *comparable = l != nullptr;
  if (!l) return Ord::kUnordered;
  const int c = s.compare(*l);  // bytewise: char_traits<char> compares as unsigned char
  return c < 0 ? Ord::kLess : c > 0 ? Ord::kGreater : Ord::kEqual;
}

Ord OrderOf(bool b, const Literal& lit, bool* comparable) {
  const auto* l = std::get_if<bool>(&lit);
  *comparable = l != nullptr;
  return l && *l == b ? Ord::kEqual : Ord::kUnordered;
}

bool Apply(CompareOp op, Ord o) {
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

bool Eval(const Expr& e, uint64_t id, const Attributes& attributes) {
  switch (e.kind) {
    case Expr::Kind::kAnd:
      return std::all_of(e.children.begin(), e.children.end(),
                         [&](const Expr& c) { return Eval(c, id, attributes); });
    case Expr::Kind::kOr:
      return std::any_of(e.children.begin(), e.children.end(),
                         [&](const Expr& c) { return Eval(c, id, attributes); });
    case Expr::Kind::kNot:
      return !Eval(e.children.front(), id, attributes);
    case Expr::Kind::kExists:
      return e.field.is_id || attributes.contains(e.field.key);
    default:
      break;
  }
  if (e.field.is_id) return IdSatisfies(id, e);
  auto it = attributes.find(e.field.key);
  return it != attributes.end() && ValueSatisfies(it->second, e);
}

void CollectKeys(const Expr& e, std::set<std::string>* keys) {
  if (!e.field.is_id && !e.field.key.empty()) keys->insert(e.field.key);
  for (const Expr& c : e.children) CollectKeys(c, keys);
}

}  // namespace

bool ValueSatisfies(const AttributeValue& value, const Expr& leaf) {
  return std::visit(
      [&leaf](const auto& v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, AttributeList>) {
          return std::any_of(v.begin(), v.end(), [&leaf](const AttributeScalar& e) {
            return std::visit([&leaf](const auto& x) { return ScalarSatisfies(x, leaf); }, e);
          });
        } else {
          return ScalarSatisfies(v, leaf);
        }
      },
      value);
}

bool IdSatisfies(uint64_t id, const Expr& leaf) {
  // The id as a scalar: above INT64_MAX it is compared as the uint64 literal kind.
  auto order = [id](const Literal& lit) {
    if (const auto* u = std::get_if<uint64_t>(&lit)) return Cmp(id, *u);
    const int64_t l = std::get<int64_t>(lit);  // the parser lets only integers reach id
    if (l < 0) return Ord::kGreater;
    return Cmp(id, uint64_t(l));
  };
  switch (leaf.kind) {
    case Expr::Kind::kCompare:
      return Apply(leaf.op, order(leaf.literals.front()));
    case Expr::Kind::kIn:
      return std::any_of(leaf.literals.begin(), leaf.literals.end(),
                         [&](const Literal& l) { return order(l) == Ord::kEqual; });
    case Expr::Kind::kNotIn:
      return std::none_of(leaf.literals.begin(), leaf.literals.end(),
                          [&](const Literal& l) { return order(l) == Ord::kEqual; });
    default:
      return false;
  }
}

bool Filter::Matches(uint64_t id, const Attributes& attributes) const {
  return Eval(root_, id, attributes);
}

std::vector<std::string> Filter::AttributeKeys() const {
  std::set<std::string> keys;
  CollectKeys(root_, &keys);
  return {keys.begin(), keys.end()};
}

}  // namespace shoal::core::filter
