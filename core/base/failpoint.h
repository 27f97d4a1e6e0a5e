// Failpoints: named places in the storage code where a test can make the process crash, so a
// crash lands at an exact step (after a WAL write but before its fsync, between a manifest's
// rename and its directory fsync, ...) instead of wherever a timed kill happens to fall.
//
// Every failpoint is compiled into every build and is inert unless armed: SHOAL_FAILPOINT costs
// one relaxed atomic load while nothing is armed. The process arms them at start-up from the
// environment, before main() runs:
//
//   SHOAL_FAILPOINTS=wal.after_write:crash,manifest.before_rename:crash@3
//
// `name:crash` ends the process at the first hit of `name`; `name:crash@N` at its Nth hit (to
// vary where in a run the crash lands). A crash is `_exit(kFailPointExitCode)` after one line on
// stderr ("failpoint <name> hit <n>: crashing"): no destructor, no buffered write, no flush
// runs, as under kill -9 (the page cache survives either way). A malformed SHOAL_FAILPOINTS ends
// the process at start-up with exit code 2, so a test never runs with a failpoint it meant to set
// silently disarmed.
//
// The names in use are listed in docs/failpoints.md; tests/crash/ arms each of them.
//
// Thread-safety: SHOAL_FAILPOINT may run on any thread. ArmFailPoints and DisarmFailPoints may
// run concurrently with hits (a hit sees the old or the new set).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::core {

// The exit code of a process a failpoint crashed.
inline constexpr int kFailPointExitCode = 86;

enum class FailPointAction { kCrash };

struct FailPointSpec {
  std::string name;
  FailPointAction action = FailPointAction::kCrash;
  uint64_t nth = 1;  // acts on this hit (1 = the first)

  bool operator==(const FailPointSpec&) const = default;
};

// Parses "name:crash[@N][,name:crash[@N]...]"; "" is no failpoint. Names are
// [A-Za-z0-9_.-]+ and may appear once; N >= 1.
absl::StatusOr<std::vector<FailPointSpec>> ParseFailPoints(absl::string_view spec);

// Replaces the armed set (and zeroes every hit count) with `spec`; on a parse error nothing
// changes.
absl::Status ArmFailPoints(absl::string_view spec);
void DisarmFailPoints();

// Hits of `name` counted since it was armed (0 when it is not armed).
uint64_t FailPointHits(absl::string_view name);

namespace failpoint_internal {
extern std::atomic<bool> armed;
void Hit(absl::string_view name);
}  // namespace failpoint_internal

}  // namespace shoal::core

// Marks a failpoint. `name` is a string literal such as "wal.after_write".
#define SHOAL_FAILPOINT(name)                                                       \
  do {                                                                              \
    if (::shoal::core::failpoint_internal::armed.load(std::memory_order_relaxed)) { \
      ::shoal::core::failpoint_internal::Hit(name);                                 \
    }                                                                               \
  } while (0)
