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
// kFailPointNames below is the one list of failpoints: SHOAL_FAILPOINT does not compile with a
// name it lacks, ParseFailPoints / ArmFailPoints refuse one (so a misspelt SHOAL_FAILPOINTS ends
// the process with exit code 2 instead of leaving the failpoint silently unarmed),
// docs/failpoints.md lists exactly these names and every one has a SHOAL_FAILPOINT site
// (tests/base/failpoint_test.cc checks both), and tests/crash/ arms each of them.
//
// Thread-safety: SHOAL_FAILPOINT may run on any thread. ArmFailPoints and DisarmFailPoints may
// run concurrently with hits (a hit sees the old or the new set).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shoal::core {

// The exit code of a process a failpoint crashed.
inline constexpr int kFailPointExitCode = 86;

// Every failpoint there is, in the order of docs/failpoints.md's table. A new one is added here,
// to that table, and to the crash harness's per-failpoint bound (tests/crash/crash_driver.cc).
inline constexpr std::string_view kFailPointNames[] = {
    "wal.after_write",           "wal.after_sync",           "wal.rotate",
    "flush.after_freeze",        "build.after_freeze",       "build.after_train",
    "segment.mid_file",          "segment.before_meta",      "build.before_install",
    "flush.before_install",      "merge.before_install",     "manifest.before_current",
    "manifest.before_rename",    "manifest.before_dir_sync", "manifest.before_old_removed",
    "cleanup.between_deletions", "merge.after_install",      "recovery.between_removals",
    "recovery.after_replay",
};

constexpr bool IsFailPointName(std::string_view name) {
  for (std::string_view known : kFailPointNames) {
    if (known == name) return true;
  }
  return false;
}

enum class FailPointAction { kCrash };

struct FailPointSpec {
  std::string name;
  FailPointAction action = FailPointAction::kCrash;
  uint64_t nth = 1;  // acts on this hit (1 = the first)

  bool operator==(const FailPointSpec&) const = default;
};

// Parses "name:crash[@N][,name:crash[@N]...]"; "" is no failpoint. Each name must be in
// kFailPointNames (InvalidArgument naming it otherwise) and may appear once; N >= 1.
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

// Marks a failpoint. `name` is a string literal such as "wal.after_write", listed in
// kFailPointNames (checked at compile time).
#define SHOAL_FAILPOINT(name)                                                       \
  do {                                                                              \
    static_assert(::shoal::core::IsFailPointName(name),                             \
                  "SHOAL_FAILPOINT(" #name "): not in kFailPointNames");            \
    if (::shoal::core::failpoint_internal::armed.load(std::memory_order_relaxed)) { \
      ::shoal::core::failpoint_internal::Hit(name);                                 \
    }                                                                               \
  } while (0)
