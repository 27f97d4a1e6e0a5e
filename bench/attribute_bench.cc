// attribute-bench: what a filter seen for the first time costs to evaluate over a segment's
// attribute columns (AttributeColumns::Select), with value indexes (storage/attributes/
// value_index.h) against the same columns without (filter.max_indexed_fields = 0), in one
// process on the same rows, alternating the two so that load from other processes hits both
// alike; and what the columns and indexes take in memory, per million rows and per field.
//
//   build/bin/attribute-bench [--rows 1000000] [--reps 5]
//
// Rows: `cat` uniform over 1000 ints, `cat10` over 10, `tenant` over 100 strings, on every
// row; `group` over 50 ints on a third of them; `ts` unique (a timestamp: never indexed).
// Prints microseconds per Select (median of --reps), the ratio scanned / indexed and the rows
// each filter matches.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "storage/attributes/attribute_columns.h"

namespace {

using shoal::core::Attributes;
using shoal::storage::AttributeColumns;
using Clock = std::chrono::steady_clock;

Attributes Point(uint64_t i, std::mt19937_64& rng) {
  Attributes a;
  a["cat"] = int64_t(rng() % 1000);
  a["cat10"] = int64_t(rng() % 10);
  a["tenant"] = absl::StrCat("tenant-", rng() % 100);
  if (rng() % 3 == 0) a["group"] = int64_t(rng() % 50);
  a["ts"] = int64_t(1700000000 + i * 3);
  return a;
}

// Microseconds of one Select, the best of as many as fit in ~20 ms (at least 3).
double Time(const AttributeColumns& columns, const shoal::core::filter::Filter& filter,
            uint64_t rows, uint64_t* matched) {
  double best = 1e300;
  const auto stop = Clock::now() + std::chrono::milliseconds(20);
  for (int i = 0; i < 3 || Clock::now() < stop; ++i) {
    const auto t0 = Clock::now();
    const shoal::storage::RowBits bits = columns.Select(filter, rows);
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    *matched = bits.Count();
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attribute-bench: filter evaluation with and without value indexes"};
  uint64_t rows = 1000000;
  int reps = 5;
  app.add_option("--rows", rows, "rows of the segment")->check(CLI::Range(1000, 100000000));
  app.add_option("--reps", reps, "interleaved repetitions (the median is printed)")
      ->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  AttributeColumns indexed(AttributeColumns::kDefaultMaxIndexedFields), scanned(0);
  std::mt19937_64 rng(7);
  for (uint64_t i = 0; i < rows; ++i) {
    const Attributes a = Point(i, rng);
    indexed.Append(i, a);
    scanned.Append(i, a);
  }
  indexed.Seal();
  scanned.Seal();
  const double million = double(rows) / 1e6;
  std::printf(
      "rows %llu; attribute memory per million rows: %.1f MiB without indexes, %.1f MiB "
      "with (5 fields; 4 indexed, ts is unique)\n",
      (unsigned long long)rows, double(scanned.memory_bytes()) / million / (1 << 20),
      double(indexed.memory_bytes()) / million / (1 << 20));

  const std::string ts_lo = std::to_string(1700000000 + rows),
                    ts_hi = std::to_string(1700000000 + rows + 3000);
  const std::vector<std::string> filters = {"cat = 7",
                                            "cat in [1, 2, 3]",
                                            "cat >= 100 and cat < 110",
                                            "tenant = \"tenant-42\"",
                                            "group = 3",
                                            "cat10 = 3",
                                            "cat = 7 and tenant = \"tenant-42\"",
                                            "cat != 7",
                                            absl::StrCat("ts >= ", ts_lo, " and ts < ", ts_hi)};
  std::printf("%-40s %12s %12s %8s %10s\n", "filter", "scan us", "indexed us", "ratio", "matches");
  for (const std::string& text : filters) {
    auto filter = shoal::core::filter::Filter::Parse(text);
    if (!filter.ok()) {
      std::fprintf(stderr, "%s: %s\n", text.c_str(), filter.status().ToString().c_str());
      return 1;
    }
    std::vector<double> scan_us, index_us;
    uint64_t scan_matches = 0, index_matches = 0;
    for (int r = 0; r < reps; ++r) {
      scan_us.push_back(Time(scanned, *filter, rows, &scan_matches));
      index_us.push_back(Time(indexed, *filter, rows, &index_matches));
    }
    if (scan_matches != index_matches) {
      std::fprintf(stderr, "%s: %llu matches scanned, %llu indexed\n", text.c_str(),
                   (unsigned long long)scan_matches, (unsigned long long)index_matches);
      return 1;
    }
    std::nth_element(scan_us.begin(), scan_us.begin() + reps / 2, scan_us.end());
    std::nth_element(index_us.begin(), index_us.begin() + reps / 2, index_us.end());
    const double s = scan_us[reps / 2], x = index_us[reps / 2];
    std::printf("%-40s %12.1f %12.1f %7.1fx %10llu\n", text.c_str(), s, x, s / x,
                (unsigned long long)scan_matches);
  }
  return 0;
}
