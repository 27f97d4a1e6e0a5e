// Reading shoald's /metrics (Prometheus text exposition format) and its printed config, for the
// Shoal target: just enough parsing for unlabelled samples and dotted config keys.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace shoal::bench {

// The value of the unlabelled sample `name` in Prometheus text: a counter or gauge
// ("shoal_io_read_bytes_total") or a histogram's "<name>_sum" / "<name>_count". Comments,
// labelled samples and a trailing timestamp are skipped; nullopt when absent or not a number.
std::optional<double> PrometheusSample(std::string_view text, std::string_view name);

// The dotted keys ("search.share_scans") of the settings in indented YAML such as
// `shoald --print-config` prints: sections nest by indentation, comments are ignored.
std::set<std::string> YamlLeafKeys(std::string_view yaml);

}  // namespace shoal::bench
