#include "core/base/logging.h"

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace shoal::core {
namespace {

absl::Mutex& Mu() {
  static absl::Mutex mu;
  return mu;
}

spdlog::level::level_enum& Level() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(const std::string& subsystem) {
  absl::MutexLock lock(&Mu());
  if (auto existing = spdlog::get(subsystem)) return existing;
  static auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(subsystem, sink);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%n] %v");
  logger->set_level(Level());
  spdlog::register_logger(logger);
  return logger;
}

absl::Status SetLogLevel(std::string_view level) {
  auto parsed = spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log.level: unknown level '", std::string(level), "'"));
  }
  absl::MutexLock lock(&Mu());
  Level() = parsed;
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace shoal::core
