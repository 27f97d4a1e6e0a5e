// Attribute values attached to a point: a small typed map, as in the API's Value message.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace shoal::core {

using AttributeValue = std::variant<int64_t, double, std::string, bool>;
using Attributes = std::map<std::string, AttributeValue>;

}  // namespace shoal::core
