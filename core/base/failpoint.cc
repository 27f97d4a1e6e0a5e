#include "core/base/failpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"

namespace shoal::core {
namespace {

struct Armed {
  FailPointSpec spec;
  uint64_t hits = 0;
};

struct Registry {
  absl::Mutex mu;
  std::vector<Armed> points ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;  // never destroyed: hits may come during exit
  return *registry;
}

std::string KnownNames() {
  std::string names;
  for (std::string_view name : kFailPointNames) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", absl::string_view(name.data(), name.size()));
  }
  return names;
}

absl::StatusOr<FailPointSpec> ParseOne(absl::string_view item) {
  const size_t colon = item.find(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("SHOAL_FAILPOINTS: '", item, "' is not name:action"));
  }
  FailPointSpec spec;
  spec.name = std::string(item.substr(0, colon));
  if (!IsFailPointName(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat("SHOAL_FAILPOINTS: unknown failpoint '",
                                                   spec.name, "' (known: ", KnownNames(), ")"));
  }
  absl::string_view action = item.substr(colon + 1);
  if (const size_t at = action.find('@'); at != absl::string_view::npos) {
    if (!absl::SimpleAtoi(action.substr(at + 1), &spec.nth) || spec.nth == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHOAL_FAILPOINTS: '", item, "': the hit after @ must be a number >= 1"));
    }
    action = action.substr(0, at);
  }
  if (action != "crash") {
    return absl::InvalidArgumentError(absl::StrCat(
        "SHOAL_FAILPOINTS: '", item, "': unknown action '", action, "' (known: crash)"));
  }
  return spec;
}

[[noreturn]] void Crash(absl::string_view name, uint64_t hit) {
  // write(2) only: nothing buffered is flushed and no destructor runs.
  const std::string line = absl::StrCat("failpoint ", name, " hit ", hit, ": crashing\n");
  (void)!::write(STDERR_FILENO, line.data(), line.size());
  ::_exit(kFailPointExitCode);
}

// Arms from the environment before main(): a failpoint on a path that runs at start-up (the
// WAL's recovery) is armed in time.
const bool armed_from_env = [] {
  const char* spec = std::getenv("SHOAL_FAILPOINTS");
  if (spec == nullptr || *spec == '\0') return false;
  if (absl::Status s = ArmFailPoints(spec); !s.ok()) {
    const std::string line = absl::StrCat(s.message(), "\n");
    (void)!::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(2);
  }
  return true;
}();

}  // namespace

namespace failpoint_internal {

std::atomic<bool> armed{false};

void Hit(absl::string_view name) {
  Registry& r = GetRegistry();
  uint64_t hit = 0;
  {
    absl::MutexLock lock(&r.mu);
    for (Armed& a : r.points) {
      if (a.spec.name != name) continue;
      hit = ++a.hits;
      if (hit != a.spec.nth) return;
      break;
    }
  }
  if (hit != 0) Crash(name, hit);
}

}  // namespace failpoint_internal

absl::StatusOr<std::vector<FailPointSpec>> ParseFailPoints(absl::string_view spec) {
  std::vector<FailPointSpec> out;
  if (spec.empty()) return out;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    auto parsed = ParseOne(item);
    if (!parsed.ok()) return parsed.status();
    for (const FailPointSpec& seen : out) {
      if (seen.name == parsed->name) {
        return absl::InvalidArgumentError(
            absl::StrCat("SHOAL_FAILPOINTS: '", seen.name, "' is named twice"));
      }
    }
    out.push_back(*std::move(parsed));
  }
  return out;
}

absl::Status ArmFailPoints(absl::string_view spec) {
  auto parsed = ParseFailPoints(spec);
  if (!parsed.ok()) return parsed.status();
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.points.clear();
  for (FailPointSpec& s : *parsed) r.points.push_back({std::move(s), 0});
  failpoint_internal::armed.store(!r.points.empty(), std::memory_order_relaxed);
  return absl::OkStatus();
}

void DisarmFailPoints() { (void)ArmFailPoints(""); }

uint64_t FailPointHits(absl::string_view name) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  for (const Armed& a : r.points) {
    if (a.spec.name == name) return a.hits;
  }
  return 0;
}

}  // namespace shoal::core
