#include "bench/harness/prometheus.h"

#include <cstdlib>
#include <utility>
#include <vector>

namespace shoal::bench {
namespace {

constexpr std::string_view kBlanks = " \t\r";

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string_view Strip(std::string_view s) {
  const size_t first = s.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kBlanks) - first + 1);
}

}  // namespace

std::optional<double> PrometheusSample(std::string_view text, std::string_view name) {
  for (std::string_view line : Lines(text)) {
    line = Strip(line);
    // "name value [timestamp]": the name must end at a blank (not "name_sum", not
    // "name{label=...}").
    if (!line.starts_with(name) || line.size() == name.size()) continue;
    if (line[name.size()] != ' ' && line[name.size()] != '\t') continue;
    std::string_view rest = Strip(line.substr(name.size()));
    const std::string value(rest.substr(0, rest.find_first_of(kBlanks)));
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (!value.empty() && end == value.c_str() + value.size()) return v;
  }
  return std::nullopt;
}

std::set<std::string> YamlLeafKeys(std::string_view yaml) {
  std::set<std::string> keys;
  std::vector<std::pair<size_t, std::string>> sections;  // (indent, name), outermost first
  for (std::string_view line : Lines(yaml)) {
    const size_t indent = line.find_first_not_of(' ');
    if (indent == std::string_view::npos || line[indent] == '#') continue;
    const size_t colon = line.find(':', indent);
    if (colon == std::string_view::npos) continue;
    const std::string name(Strip(line.substr(indent, colon - indent)));
    while (!sections.empty() && sections.back().first >= indent) sections.pop_back();
    std::string_view value = line.substr(colon + 1);
    value = Strip(value.substr(0, value.find(" #")));
    if (value.empty()) {
      sections.emplace_back(indent, name);
      continue;
    }
    std::string key;
    for (const auto& [unused, section] : sections) key += section + ".";
    keys.insert(key + name);
  }
  return keys;
}

}  // namespace shoal::bench
