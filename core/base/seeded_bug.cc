#include "core/base/seeded_bug.h"

#ifdef SHOAL_SEEDED_BUGS_COMPILED

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace shoal::core {
namespace {

// SHOAL_SEEDED_BUGS, split and checked against kSeededBugs; exits 2 on an unknown name.
std::vector<std::string> ReadSwitchedOn() {
  std::vector<std::string> on;
  const char* env = std::getenv("SHOAL_SEEDED_BUGS");
  if (env == nullptr) return on;
  for (absl::string_view name : absl::StrSplit(env, ',', absl::SkipWhitespace())) {
    if (std::find(std::begin(kSeededBugs), std::end(kSeededBugs), name) == std::end(kSeededBugs)) {
      std::fprintf(stderr, "SHOAL_SEEDED_BUGS: unknown seeded bug '%.*s'\n", int(name.size()),
                   name.data());
      _exit(2);
    }
    std::fprintf(stderr, "seeded bug %.*s is on\n", int(name.size()), name.data());
    on.emplace_back(name);
  }
  return on;
}

}  // namespace

bool SeededBugOn(absl::string_view name) {
  static const std::vector<std::string>* const on = new std::vector<std::string>(ReadSwitchedOn());
  return std::find(on->begin(), on->end(), name) != on->end();
}

}  // namespace shoal::core

#endif  // SHOAL_SEEDED_BUGS_COMPILED
