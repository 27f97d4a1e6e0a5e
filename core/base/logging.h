// Logging setup: one spdlog logger per subsystem ("server", "wal", "exec", ...), all writing to
// stderr through one shared sink so their lines interleave cleanly.
//
// Thread-safety: Logger() and SetLogLevel() are safe from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace shoal::core {

// The logger for `subsystem`, created on first use.
std::shared_ptr<spdlog::logger> Logger(const std::string& subsystem);

// Sets the level of every logger, present and future: trace, debug, info, warn, error, off.
absl::Status SetLogLevel(std::string_view level);

}  // namespace shoal::core
