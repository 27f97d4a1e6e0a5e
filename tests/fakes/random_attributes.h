// Random attribute maps and filters over them, for tests that compare an evaluation with the
// reference semantics (core::filter::Filter::Matches): ints, doubles, strings, bools and lists
// under a few keys, some missing, one key holding two kinds; leaves of every operator.
#pragma once

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/attributes.h"

namespace shoal::testing {

inline core::Attributes RandomPoint(std::mt19937& rng) {
  core::Attributes a;
  auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
  if (pick(4)) a["n"] = int64_t(pick(10) - 3);
  if (pick(3)) a["x"] = double(pick(20)) / 4;
  if (pick(2)) a["s"] = std::string(1, char('a' + pick(5)));
  if (pick(3) == 0) a["b"] = pick(2) == 0;
  if (pick(2)) {
    core::AttributeList tags;
    for (int i = pick(4); i > 0; --i) tags.push_back(std::string(1, char('a' + pick(5))));
    if (pick(3) == 0) tags.push_back(int64_t(pick(10)));
    a["tags"] = tags;
  }
  if (pick(5) == 0) a["n"] = std::string("3");  // another kind under a numeric key
  a["d"] = int64_t(pick(1000) - 500);           // on every row: a dense column
  a["t"] = double(pick(400)) / 8;
  return a;
}

inline std::string RandomLeaf(std::mt19937& rng) {
  static const char* kLeaves[] = {"n = 3",
                                  "n != 2",
                                  "n < 1",
                                  "n >= 4.5",
                                  "x > 2",
                                  "x <= 1.25",
                                  "s = \"c\"",
                                  "s > \"b\"",
                                  "s in [\"a\", \"e\"]",
                                  "s not in [\"a\"]",
                                  "b = true",
                                  "b != true",
                                  "tags = \"a\"",
                                  "tags != \"b\"",
                                  "tags in [\"c\", 3]",
                                  "tags not in [\"a\", \"b\"]",
                                  "exists(tags)",
                                  "exists(b)",
                                  "id < 50",
                                  "id in [3, 70, 99]",
                                  "id not in [1, 2]",
                                  "n in []",
                                  "n not in []",
                                  "missing = 1",
                                  "exists(id)",
                                  "exists(`id`)",
                                  "d >= 0",
                                  "d < -250.5",
                                  "d != 7",
                                  "d in [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -3]",
                                  "d not in [0, 2.5, \"x\"]",
                                  "d in [-500, 3, 499]",
                                  "t <= 12.5",
                                  "t in [1, 2.5, 3.125]",
                                  "t > 9223372036854775807"};
  return kLeaves[rng() % (sizeof(kLeaves) / sizeof(kLeaves[0]))];
}

inline std::string RandomFilter(std::mt19937& rng, int depth) {
  if (depth == 0 || rng() % 3 == 0) return RandomLeaf(rng);
  switch (rng() % 3) {
    case 0:
      return absl::StrCat("not (", RandomFilter(rng, depth - 1), ")");
    case 1:
      return absl::StrCat("(", RandomFilter(rng, depth - 1), ") and (",
                          RandomFilter(rng, depth - 1), ")");
    default:
      return absl::StrCat("(", RandomFilter(rng, depth - 1), ") or (", RandomFilter(rng, depth - 1),
                          ")");
  }
}

}  // namespace shoal::testing
