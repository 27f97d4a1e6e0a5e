// Attribute values attached to a point: a small typed map, as in the API's Value message.
// A value is a scalar or a list of scalars (several tags on one point); lists do not nest.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace shoal::core {

using AttributeScalar = std::variant<int64_t, double, std::string, bool>;
using AttributeList = std::vector<AttributeScalar>;
using AttributeValue = std::variant<int64_t, double, std::string, bool, AttributeList>;
using Attributes = std::map<std::string, AttributeValue>;

}  // namespace shoal::core
