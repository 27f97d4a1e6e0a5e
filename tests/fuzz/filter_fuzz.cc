// libFuzzer: any bytes as a filter. Parse never crashes; a filter that parses evaluates on a few
// points, by Filter::Matches and by AttributeColumns::Select, with the same answer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/filter/filter.h"
#include "storage/attributes/attribute_columns.h"

namespace {

using shoal::core::AttributeList;
using shoal::core::Attributes;

const std::vector<Attributes>& Points() {
  static const std::vector<Attributes> kPoints = {
      {},
      {{"n", int64_t(3)}, {"x", 2.5}, {"s", std::string("abc")}, {"b", true}},
      {{"tags", AttributeList{std::string("a"), int64_t(7), 1.5}}, {"empty", AttributeList{}}},
      {{"n", std::string("3")}, {"id", int64_t(-1)}, {"x", -0.0}},
  };
  return kPoints;
}

const shoal::storage::AttributeColumns& Columns() {
  static const auto* columns = [] {
    auto* c = new shoal::storage::AttributeColumns;
    for (size_t i = 0; i < Points().size(); ++i) c->Append(i * 1000, Points()[i]);
    return c;
  }();
  return *columns;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto filter = shoal::core::filter::Filter::Parse(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!filter.ok()) return 0;
  (void)filter->AttributeKeys();
  const shoal::storage::RowBits bits = Columns().Select(*filter, Points().size());
  for (size_t i = 0; i < Points().size(); ++i) {
    if (bits.Test(i) != filter->Matches(i * 1000, Points()[i])) __builtin_trap();
  }
  return 0;
}
