#include "bench/harness/report.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace shoal::bench {
namespace {

constexpr double kThresholds[] = {0.90, 0.95, 0.99};

std::string Num(double v, const absl::FormatSpec<double>& fmt = "%.4g") {
  return std::isnan(v) ? "" : absl::StrFormat(fmt, v);
}

double Ms(double ns) { return ns / 1e6; }

bool IsShoal(const std::string& t) { return t.starts_with("shoal"); }
bool IsFaiss(const std::string& t) { return t.starts_with("faiss"); }
bool IsHnsw(const std::string& t) { return t.starts_with("hnsw"); }

// Shoal rows: "-" when the server did not export the histogram; other targets: blank.
std::string QueriesPerScan(const Row& r) {
  if (!IsShoal(r.target)) return "";
  return std::isnan(r.queries_per_scan) ? "-" : absl::StrFormat("%.2f", r.queries_per_scan);
}

// Best over every target the predicate picks: (qps, target name).
std::pair<double, std::string> BestOf(const std::vector<Row>& rows, const std::string& group,
                                      double threshold, bool (*pick)(const std::string&)) {
  std::pair<double, std::string> best{0, ""};
  std::set<std::string> targets;
  for (const Row& r : rows) {
    if (pick(r.target)) targets.insert(r.target);
  }
  for (const std::string& t : targets) {
    uint32_t knob = 0;
    const double qps = BestQps(rows, t, group, threshold, &knob);
    if (qps > best.first) best = {qps, t};
  }
  return best;
}

std::string FileSafe(std::string s) {
  for (char& c : s) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  }
  return s;
}

}  // namespace

std::string Row::group() const {
  if (mode == "batch") return absl::StrCat("batch-b", batch, "-k", k);
  if (mode == "open") return absl::StrCat("open-r", int64_t(rate), "-k", k);
  return absl::StrCat(mode, "-c", clients, "-k", k);
}

std::string Row::knob_label() const {
  return knob_name.empty() ? "exact" : absl::StrCat(knob_name, "=", knob);
}

Row MakeRow(const Dataset& d, const GroundTruth& gt, const std::string& target,
            const std::string& knob_name, uint32_t knob, const std::string& mode,
            const LoadSpec& spec, const PointResult& p) {
  Row row{.dataset = d.name,
          .target = target,
          .knob_name = knob_name,
          .knob = knob,
          .mode = mode,
          .clients = spec.clients,
          .batch = spec.batch,
          .rate = spec.rate,
          .k = spec.k,
          .queries = p.queries,
          .errors = p.errors};
  // Recall over the answered queries (a failed or never-sent request is counted in `errors`
  // or missing from `queries`, not as a wrong answer).
  for (size_t r : {size_t(1), size_t(10), size_t(100)}) {
    if (r > spec.k || r > gt.k || p.queries == 0) continue;
    double sum = 0;
    for (size_t i = 0; i < p.answered.size(); ++i) {
      if (p.answered[i]) sum += RecallAt(d, gt, i % d.nq, p.ids.data() + i * spec.k, spec.k, r);
    }
    (r == 1 ? row.recall1 : r == 10 ? row.recall10 : row.recall100) = sum / double(p.queries);
  }
  row.qps = p.seconds > 0 ? double(p.queries) / p.seconds : 0;
  row.p50_ms = Ms(p.latency.Percentile(0.50));
  row.p95_ms = Ms(p.latency.Percentile(0.95));
  row.p99_ms = Ms(p.latency.Percentile(0.99));
  row.p999_ms = Ms(p.latency.Percentile(0.999));
  row.mean_ms = Ms(p.latency.mean_ns());
  for (const auto& [ns, fraction] : p.latency.Cdf()) row.cdf.emplace_back(Ms(ns), fraction);
  if (p.queries > 0 && p.after.cpu_seconds > 0) {
    row.cpu_s_per_1000q = (p.after.cpu_seconds - p.before.cpu_seconds) * 1000 / double(p.queries);
  }
  if (p.after.server_peak_rss_bytes) {
    row.server_peak_rss_mb = double(*p.after.server_peak_rss_bytes) / (1 << 20);
  }
  if (p.after.index_heap_bytes) row.index_heap_mb = double(*p.after.index_heap_bytes) / (1 << 20);
  if (p.before.bytes_read && p.after.bytes_read && p.queries > 0) {
    row.bytes_per_query = double(*p.after.bytes_read - *p.before.bytes_read) / double(p.queries);
  }
  if (p.before.cache_hits && p.after.cache_hits && p.before.cache_misses && p.after.cache_misses) {
    const double hits = double(*p.after.cache_hits - *p.before.cache_hits);
    const double misses = double(*p.after.cache_misses - *p.before.cache_misses);
    if (hits + misses > 0) row.cache_hit_ratio = hits / (hits + misses);
  }
  if (p.before.scans && p.after.scans && p.before.scan_queries_sum && p.after.scan_queries_sum &&
      *p.after.scans > *p.before.scans) {
    row.queries_per_scan = (*p.after.scan_queries_sum - *p.before.scan_queries_sum) /
                           (*p.after.scans - *p.before.scans);
  }
  if (p.before.heap_allocations && p.after.heap_allocations && p.queries > 0) {
    row.allocs_per_query =
        (*p.after.heap_allocations - *p.before.heap_allocations) / double(p.queries);
  }
  return row;
}

CsvWriter::~CsvWriter() {
  if (file_) std::fclose(file_);
}

absl::Status CsvWriter::Open(const std::string& path) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  std::fputs(
      "dataset,target,knob_name,knob,mode,clients,batch,rate,k,queries,errors,recall1,recall10,"
      "recall100,qps,p50_ms,p95_ms,p99_ms,p999_ms,mean_ms,cpu_s_per_1000q,server_peak_rss_mb,"
      "index_heap_mb,bytes_per_query,cache_hit_ratio,queries_per_scan,allocs_per_query\n",
      file_);
  std::fflush(file_);
  return absl::OkStatus();
}

void CsvWriter::Append(const Row& r) {
  if (!file_) return;
  const std::string line = absl::StrJoin({r.dataset,
                                          r.target,
                                          r.knob_name,
                                          absl::StrCat(r.knob),
                                          r.mode,
                                          absl::StrCat(r.clients),
                                          absl::StrCat(r.batch),
                                          Num(r.rate),
                                          absl::StrCat(r.k),
                                          absl::StrCat(r.queries),
                                          absl::StrCat(r.errors),
                                          Num(r.recall1),
                                          Num(r.recall10),
                                          Num(r.recall100),
                                          Num(r.qps),
                                          Num(r.p50_ms),
                                          Num(r.p95_ms),
                                          Num(r.p99_ms),
                                          Num(r.p999_ms),
                                          Num(r.mean_ms),
                                          Num(r.cpu_s_per_1000q),
                                          Num(r.server_peak_rss_mb),
                                          Num(r.index_heap_mb),
                                          Num(r.bytes_per_query),
                                          Num(r.cache_hit_ratio),
                                          Num(r.queries_per_scan),
                                          Num(r.allocs_per_query)},
                                         ",");
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
}

double BestQps(const std::vector<Row>& rows, const std::string& target, const std::string& group,
               double threshold, uint32_t* knob) {
  double best = 0;
  for (const Row& r : rows) {
    if (r.target != target || r.group() != group || r.errors > 0) continue;
    if (std::isnan(r.recall10) || r.recall10 < threshold || r.qps <= best) continue;
    best = r.qps;
    *knob = r.knob;
  }
  return best;
}

std::string MarkdownReport(const std::vector<Row>& rows, const ReportContext& context,
                           const std::vector<std::string>& plots) {
  std::string md = absl::StrCat("# ", context.title, "\n\n```\n", context.command, "\n```\n\n");
  for (const std::string& note : context.notes) absl::StrAppend(&md, "- ", note, "\n");
  if (!context.build_seconds.empty()) {
    absl::StrAppend(&md, "\nBuild (or reuse) time per target: ");
    std::vector<std::string> parts;
    for (const auto& [t, s] : context.build_seconds) {
      parts.push_back(absl::StrFormat("%s %.1f s", t, s));
    }
    absl::StrAppend(&md, absl::StrJoin(parts, ", "), ".\n");
  }
  // Summary per dataset and curve: best QPS at each recall threshold.
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> curves;
  for (const Row& r : rows) {
    if (r.mode != "closed" && r.mode != "batch") continue;
    auto& targets = curves[{r.dataset, r.group()}];
    if (std::find(targets.begin(), targets.end(), r.target) == targets.end()) {
      targets.push_back(r.target);
    }
  }
  for (const auto& [key, targets] : curves) {
    const auto& [dataset, group] = key;
    absl::StrAppend(&md, "\n## ", dataset, ", ", group,
                    ": best QPS at recall@10 >= threshold (knob)\n\n| target |");
    for (double t : kThresholds) absl::StrAppend(&md, absl::StrFormat(" >= %.2f |", t));
    absl::StrAppend(&md, "\n|---|---|---|---|\n");
    std::vector<Row> subset;
    for (const Row& r : rows) {
      if (r.dataset == dataset) subset.push_back(r);
    }
    for (const std::string& t : targets) {
      absl::StrAppend(&md, "| ", t, " |");
      for (double th : kThresholds) {
        uint32_t knob = 0;
        const double qps = BestQps(subset, t, group, th, &knob);
        absl::StrAppend(&md, qps > 0 ? absl::StrFormat(" %.0f (%u) |", qps, knob) : " — |");
      }
      absl::StrAppend(&md, "\n");
    }
    for (auto [label, pick] : {std::pair{"FAISS", &IsFaiss}, std::pair{"hnswlib", &IsHnsw}}) {
      absl::StrAppend(&md, "| **Shoal / ", label, "** |");
      for (double th : kThresholds) {
        const auto shoal = BestOf(subset, group, th, &IsShoal);
        const auto other = BestOf(subset, group, th, pick);
        absl::StrAppend(&md,
                        shoal.first > 0 && other.first > 0
                            ? absl::StrFormat(" **%.2fx** (%s vs %s) |", shoal.first / other.first,
                                              shoal.second, other.second)
                            : " — |");
      }
      absl::StrAppend(&md, "\n");
    }
  }
  absl::StrAppend(&md,
                  "\n## Every point\n\n| dataset | target | knob | mode | recall@1 | recall@10 | "
                  "recall@100 | QPS | p50 ms | p95 ms | p99 ms | p99.9 ms | CPU s/1k q | "
                  "memory MiB | bytes/q | cache hits | q/scan | allocs/q | errors |\n");
  absl::StrAppend(&md, "|");
  for (int column = 0; column < 19; ++column) absl::StrAppend(&md, "---|");
  absl::StrAppend(&md, "\n");
  for (const Row& r : rows) {
    absl::StrAppend(
        &md,
        absl::StrFormat(
            "| %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | "
            "%s | %s | %s | %s | %s | %zu |\n",
            r.dataset, r.target, r.knob_label(), r.group(), Num(r.recall1, "%.3f"),
            Num(r.recall10, "%.3f"), Num(r.recall100, "%.3f"), r.qps, Num(r.p50_ms, "%.3f"),
            Num(r.p95_ms, "%.3f"), Num(r.p99_ms, "%.3f"), Num(r.p999_ms, "%.3f"),
            Num(r.cpu_s_per_1000q, "%.3f"),
            Num(std::isnan(r.server_peak_rss_mb) ? r.index_heap_mb : r.server_peak_rss_mb, "%.0f"),
            Num(r.bytes_per_query, "%.0f"), Num(r.cache_hit_ratio, "%.3f"), QueriesPerScan(r),
            Num(r.allocs_per_query, "%.0f"), r.errors));
  }
  if (!plots.empty()) {
    absl::StrAppend(&md, "\n## Plots\n\n");
    for (const std::string& p : plots) absl::StrAppend(&md, "- `", p, "`\n");
  }
  return md;
}

std::vector<std::string> WritePlots(const std::vector<Row>& rows, const std::string& dir) {
  const std::string plot_dir = dir + "/plots";
  std::error_code ec;
  std::filesystem::remove_all(plot_dir, ec);  // no stale curves from an earlier run
  std::filesystem::create_directories(plot_dir, ec);
  std::vector<std::string> pngs;
  std::string script;
  // `using` is gnuplot's column expression for x:y.
  auto add_plot = [&](const std::string& stem, const std::string& setup, const char* style,
                      const char* using_columns,
                      const std::vector<std::pair<std::string, std::string>>& series) {
    if (series.empty()) return;
    const std::string png = absl::StrCat(plot_dir, "/", stem, ".png");
    absl::StrAppend(&script, "set output '", png, "'\nreset\n", setup, "plot ");
    std::vector<std::string> parts;
    for (const auto& [file, title] : series) {
      parts.push_back(absl::StrCat("'", file, "' using ", using_columns, " with ", style,
                                   " title '", title, "'"));
    }
    absl::StrAppend(&script, absl::StrJoin(parts, ", \\\n     "), "\n");
    pngs.push_back(png);
  };

  // Recall@10 vs QPS, one plot per dataset and curve group (closed loop and batch). The recall
  // axis counts nines (log of 1 - recall, reversed): the region users choose from, 0.9 to
  // 0.999, gets most of the width; recall 1 is drawn at 0.9995.
  std::map<std::pair<std::string, std::string>, std::map<std::string, std::vector<const Row*>>>
      curves, cdfs;
  for (const Row& r : rows) {
    if ((r.mode == "closed" || r.mode == "batch") && !std::isnan(r.recall10)) {
      curves[{r.dataset, r.group()}][r.target].push_back(&r);
    }
    if (r.mode == "open" || r.mode == "cold" || r.mode == "warm") {
      cdfs[{r.dataset, "latency"}][absl::StrCat(r.target, " ", r.group(), " ", r.knob_label())]
          .push_back(&r);
    }
  }
  for (const auto& [key, by_target] : curves) {
    std::vector<std::pair<std::string, std::string>> series;
    for (const auto& [target, points] : by_target) {
      const std::string dat = absl::StrCat(
          plot_dir, "/", FileSafe(key.first + "_" + key.second + "_" + target), ".dat");
      std::ofstream out(dat);
      out << "# recall@10 qps knob\n";
      std::vector<const Row*> sorted = points;
      std::sort(sorted.begin(), sorted.end(),
                [](const Row* a, const Row* b) { return a->recall10 < b->recall10; });
      for (const Row* r : sorted) out << r->recall10 << " " << r->qps << " " << r->knob << "\n";
      series.emplace_back(dat, target);
    }
    add_plot(FileSafe("recall_qps_" + key.first + "_" + key.second),
             absl::StrCat("set title 'recall@10 vs QPS — ", key.first, ", ", key.second,
                          "'\nset xlabel 'recall@10 (nines scale)'\n"
                          "set ylabel 'queries per second'\nset logscale xy\n"
                          "set xrange [0.7:0.0004]\nset xtics ('0.3' 0.7, '0.5' 0.5, '0.8' 0.2, "
                          "'0.9' 0.1, '0.95' 0.05, '0.99' 0.01, '0.995' 0.005, '0.999' 0.001, "
                          "'1' 0.0005)\nset grid\nset key outside right\n"),
             "linespoints", "(1-$1 < 0.0005 ? 0.0005 : 1-$1):2", series);
  }
  // Latency CDFs of the open-loop and cold/warm points.
  for (const auto& [key, by_label] : cdfs) {
    std::vector<std::pair<std::string, std::string>> series;
    for (const auto& [label, points] : by_label) {
      const std::string dat =
          absl::StrCat(plot_dir, "/", FileSafe(key.first + "_cdf_" + label), ".dat");
      std::ofstream out(dat);
      out << "# latency_ms fraction\n";
      for (const auto& [ms, fraction] : points.front()->cdf) out << ms << " " << fraction << "\n";
      series.emplace_back(dat, label);
    }
    add_plot(FileSafe("latency_cdf_" + key.first),
             absl::StrCat("set title 'latency CDF — ", key.first,
                          "'\nset xlabel 'latency ms (log)'\nset ylabel 'fraction of requests'\n"
                          "set logscale x\nset grid\nset key outside right\nset yrange [0:1]\n"),
             "lines", "1:2", series);
  }
  const std::string gp = plot_dir + "/plots.gp";
  {
    std::ofstream out(gp);
    out << "set terminal pngcairo size 1100,600 noenhanced\n" << script;
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "gnuplot not found: plot scripts left in %s\n", gp.c_str());
    return {};
  }
  if (std::system(absl::StrCat("gnuplot '", gp, "' 2>'", plot_dir, "/gnuplot.log'").c_str()) != 0) {
    std::fprintf(stderr, "gnuplot failed: see %s/gnuplot.log\n", plot_dir.c_str());
    return {};
  }
  return pngs;
}

}  // namespace shoal::bench
