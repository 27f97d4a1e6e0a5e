#include "core/filter/filter.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "core/filter/scalar_order.h"

namespace shoal::core::filter {
namespace {

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
