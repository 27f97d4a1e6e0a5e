// Report: turns measured points into the harness's outputs — one CSV row per point, a Markdown
// summary (best QPS at recall@10 >= 0.90 / 0.95 / 0.99 per target, with the ratios of Shoal to
// FAISS and to hnswlib, and every point), and gnuplot scripts for the recall-vs-QPS curves and
// latency CDFs, rendered to PNG when gnuplot is installed.
//
// Thread-safety: none; the harness's main thread owns these.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/harness/driver.h"
#include "bench/harness/ground_truth.h"

namespace shoal::bench {

struct Row {
  std::string dataset, target, knob_name;
  uint32_t knob = 0;
  std::string mode;  // closed, batch, open, cold, warm
  size_t clients = 1, batch = 1;
  double rate = 0;
  uint32_t k = 10;
  size_t queries = 0, errors = 0;
  double recall1 = NAN, recall10 = NAN, recall100 = NAN;
  double qps = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, p999_ms = 0, mean_ms = 0;
  double cpu_s_per_1000q = NAN;     // of the process that searches (the server for Shoal)
  double server_peak_rss_mb = NAN;  // Shoal: shoald's VmHWM since the target was built
  double index_heap_mb = NAN;       // FAISS / hnswlib: heap the index holds
  double bytes_per_query = NAN;     // storage reads (Shoal)
  double cache_hit_ratio = NAN;     // partition cache (Shoal)
  double queries_per_scan = NAN;    // Shoal: mean queries one partition scan served
  double allocs_per_query = NAN;    // Shoal: shoald's heap allocations per query
  std::vector<std::pair<double, double>> cdf;  // latency (ms, fraction); not in the CSV

  std::string group() const;  // which curve: "closed-c16-k10", "batch-b100-k10", ...
  std::string knob_label() const;
};

// Fills a Row's measured fields from a point (recall against `gt`; NAN where k is too small).
Row MakeRow(const Dataset& d, const GroundTruth& gt, const std::string& target,
            const std::string& knob_name, uint32_t knob, const std::string& mode,
            const LoadSpec& spec, const PointResult& p);

class CsvWriter {
 public:
  ~CsvWriter();
  absl::Status Open(const std::string& path);  // writes the header
  void Append(const Row& row);                 // flushed at once: a killed run keeps its rows

 private:
  FILE* file_ = nullptr;
};

struct ReportContext {
  std::string title;                                          // first line
  std::string command;                                        // how the run was started
  std::vector<std::string> notes;                             // bullet lines
  std::vector<std::pair<std::string, double>> build_seconds;  // per target
};

// Best QPS among `rows` of `target` in `group` reaching recall@10 >= threshold; 0 when none.
double BestQps(const std::vector<Row>& rows, const std::string& target, const std::string& group,
               double threshold, uint32_t* knob);

std::string MarkdownReport(const std::vector<Row>& rows, const ReportContext& context,
                           const std::vector<std::string>& plots);

// Writes <dir>/plots/*.dat and *.gp and runs gnuplot when found; returns the PNG paths made.
std::vector<std::string> WritePlots(const std::vector<Row>& rows, const std::string& dir);

}  // namespace shoal::bench
