// shoal-bench: recall / QPS / latency of Shoal against the libraries users would otherwise
// embed (FAISS, hnswlib), in one run on one machine, with exact ground truth.
//
//   shoal-bench --dataset fmnist --targets shoal:ivf_flat,faiss:ivf_flat,hnsw --out DIR
//
// For each target: build (or reuse), warm up, sweep the knob (nprobe / ef) in closed loop for
// each --clients value and batched for each --batch value, then at the operating point (the
// smallest knob reaching --operating-recall) run the open-loop --rate points and, for Shoal with
// --cold, a cold pass (server restarted, page cache dropped) followed by a warm one.
// A target spelled shoal:ivf_flat@search.share_scans=false runs the same index under a shoald
// started with that config override, so settings are compared in one run.
// Writes DIR/results.csv, DIR/report.md and DIR/plots/*.png. See bench/README.md.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/harness/dataset.h"
#include "bench/harness/driver.h"
#include "bench/harness/faiss_target.h"
#include "bench/harness/ground_truth.h"
#include "bench/harness/hnsw_target.h"
#include "bench/harness/quiet_check.h"
#include "bench/harness/report.h"
#include "bench/harness/shoal_target.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> datasets = {"fmnist"};
  std::string query_file;
  size_t queries = 1000;
  uint32_t k = 10;
  std::vector<uint32_t> extra_ks;  // closed-loop sweeps at the busiest client count only
  std::vector<std::string> targets = {"shoal:ivf_flat", "faiss:ivf_flat", "hnsw"};
  uint32_t nlist = 0, pq_m = 0, refine = 4, hnsw_m = 16, hnsw_ef_construction = 200;
  std::vector<uint32_t> nprobes = {1, 2, 4, 8, 16, 32, 64, 128};
  std::vector<uint32_t> efs = {10, 20, 40, 80, 160, 320};
  std::vector<size_t> clients = {1, 16};
  std::vector<size_t> batches = {100};
  std::vector<double> rates;
  size_t open_loop_workers = 64;
  double open_loop_seconds = 3;
  double max_seconds = 10;
  double operating_recall = 0.95;
  bool cold = false;
  bool quiet_check = false;
  int cpu_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::string out_dir, cache_dir = "build/bench-cache";
  // Shoal server.
  std::string shoald = "build/bin/shoald", data_root = "build/bench-data", target_addr, metrics_url;
  pid_t server_pid = 0;
  std::vector<std::string> server_args;
};

uint32_t AutoNlist(size_t n) {
  // A power of two near 4 * sqrt(n) (FAISS's guideline), at most n / 39 rows... at least 1.
  const double want = 4 * std::sqrt(double(n));
  uint32_t nlist = 1;
  while (nlist * 2 <= want * 1.41) nlist *= 2;
  return std::max<uint32_t>(1, std::min<uint32_t>(nlist, uint32_t(std::max<size_t>(1, n / 39))));
}

uint32_t AutoPqM(uint32_t dim) {
  // The most sub-quantizers of at least 4 dimensions each, up to 64, that divide dim
  // (784 -> 56, 128 -> 32, 96 -> 24).
  for (uint32_t m = std::min<uint32_t>(64, dim / 4); m > 1; --m) {
    if (dim % m == 0) return m;
  }
  return 1;
}

absl::StatusOr<std::unique_ptr<Target>> MakeTarget(const std::string& spelled, const Options& o,
                                                   uint32_t nlist, uint32_t pq_m) {
  // "shoal:ivf_flat@search.share_scans=false": a Shoal target with shoald config overrides.
  auto split = SplitTargetOverrides(spelled);
  if (!split.ok()) return split.status();
  const std::string& spec = split->first;
  if (!split->second.empty() && !spec.starts_with("shoal:")) {
    return absl::InvalidArgumentError(spelled + ": @key=value overrides apply to shoal: targets");
  }
  const size_t colon = spec.find(':');
  // "shoal:ivf_pq4" and "faiss:ivf_pqfs": IVF_PQ with 4-bit fast-scan codes.
  const bool four_bit = spec == "shoal:ivf_pq4" || spec == "faiss:ivf_pqfs";
  std::optional<IndexType> index;
  if (four_bit) {
    index = IndexType::kIvfPq;
  } else if (colon != std::string::npos) {
    index = IndexTypeFromName(spec.substr(colon + 1));
  }
  if (spec.starts_with("shoal:") && index) {
    const bool quantized = *index == IndexType::kIvfSq8 || *index == IndexType::kIvfPq;
    return std::make_unique<ShoalTarget>(ShoalParams{.index = *index,
                                                     .nlist = nlist,
                                                     .pq_m = pq_m,
                                                     .pq_bits = four_bit ? 4u : 0u,
                                                     .refine_factor = quantized ? o.refine : 0,
                                                     .shoald_binary = o.shoald,
                                                     .data_root = o.data_root,
                                                     .server_args = o.server_args,
                                                     .config_overrides = split->second,
                                                     .external_addr = o.target_addr,
                                                     .metrics_url = o.metrics_url,
                                                     .server_pid = o.server_pid});
  }
  if (spec.starts_with("faiss:") && index) {
    return std::make_unique<FaissTarget>(FaissParams{.index = *index,
                                                     .nlist = nlist,
                                                     .pq_m = pq_m,
                                                     .refine_factor = o.refine,
                                                     .fast_scan = four_bit,
                                                     .build_threads = o.cpu_threads});
  }
  if (spec == "hnsw") {
    return std::make_unique<HnswTarget>(HnswParams{.m = o.hnsw_m,
                                                   .ef_construction = o.hnsw_ef_construction,
                                                   .build_threads = o.cpu_threads,
                                                   .cache_dir = o.cache_dir});
  }
  return absl::InvalidArgumentError("unknown target " + spec +
                                    " (shoal:{flat,ivf_flat,ivf_sq8,ivf_pq,ivf_pq4}, "
                                    "faiss:{flat,ivf_flat,ivf_sq8,ivf_pq,ivf_pqfs}, hnsw)");
}

// One progress line on a terminal (rewritten in place), nothing in a log.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)) {}
  void Update(const std::string& what, size_t done, size_t total, double seconds) {
    if (!tty_) return;
    std::fprintf(stderr, "\r\033[K%s  %zu/%zu queries  %.0f q/s", what.c_str(), done, total,
                 seconds > 0 ? double(done) / seconds : 0.0);
  }
  void Line(const std::string& text) {
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\033[K" : "", text.c_str());
  }

 private:
  const bool tty_;
};

class Bench {
 public:
  Bench(Options o, std::string command) : o_(std::move(o)), command_(std::move(command)) {}

  int Run() {
    if (o_.out_dir.empty()) {
      o_.out_dir =
          "bench/results/" + absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone());
    }
    std::error_code ec;
    std::filesystem::create_directories(o_.out_dir, ec);
    if (absl::Status s = csv_.Open(o_.out_dir + "/results.csv"); !s.ok()) return Fail(s);
    if (o_.quiet_check) {
      QuietCheckOptions q;
      q.server_pid = o_.server_pid;
      quiet_.emplace(q, [this](const std::string& line) { progress_.Line(line); });
      if (absl::Status s = quiet_->BeforeRun(); !s.ok()) return Fail(s);
    }
    context_.notes.push_back(absl::StrFormat(
        "%u cores; in-process targets get %d threads, shared among concurrent requests; Shoal "
        "is shoald over gRPC on loopback (client and server on the same cores)%s",
        std::thread::hardware_concurrency(), o_.cpu_threads,
        o_.server_args.empty() ? "" : ", server flags: " + absl::StrJoin(o_.server_args, " ")));
    context_.notes.push_back(
        "CPU s/1k q: the searching process (shoald for Shoal, its client's gRPC work not "
        "included; this process for FAISS/hnswlib). Memory: shoald's peak RSS since the target "
        "was built (index, partition cache, runtime); for FAISS/hnswlib the heap their index "
        "holds (mallinfo2), since this process's RSS also holds the dataset");
    for (const std::string& spec : o_.datasets) {
      if (absl::Status s = RunDataset(spec); !s.ok()) return Fail(s);
    }
    Finish();
    return 0;
  }

 private:
  absl::Status RunDataset(const std::string& spec) {
    auto loaded = LoadDataset(spec, o_.query_file, o_.queries);
    if (!loaded.ok()) return loaded.status();
    d_ = *std::move(loaded);
    progress_.Line(
        absl::StrFormat("dataset %s: %zu x %u, %zu queries", d_.name, d_.n, d_.dim, d_.nq));
    const auto gt_start = Clock::now();
    bool cached = false;
    uint32_t gt_k = std::max<uint32_t>(100, o_.k);
    for (uint32_t k : o_.extra_ks) gt_k = std::max(gt_k, k);
    auto gt = LoadOrComputeGroundTruth(d_, gt_k, o_.cache_dir, o_.cpu_threads, &cached);
    if (!gt.ok()) return gt.status();
    gt_ = *std::move(gt);
    progress_.Line(absl::StrFormat("ground truth k=%u: %s (%.1f s)", gt_.k,
                                   cached ? "from cache" : "computed", Seconds(gt_start)));
    nlist_ = o_.nlist ? o_.nlist : AutoNlist(d_.n);
    const uint32_t pq_m = o_.pq_m ? o_.pq_m : AutoPqM(d_.dim);
    context_.notes.push_back(absl::StrFormat(
        "dataset %s: %zu base vectors x %u dims, %zu queries, k=%u, L2, exact ground truth "
        "(k=%u); IVF nlist %u (10 k-means iterations for Shoal and FAISS), PQ m=%u x 8 bits, "
        "refine x%u (Shoal SQ8/PQ, FAISS PQ); hnswlib M=%u efConstruction=%u",
        d_.name, d_.n, d_.dim, d_.nq, o_.k, gt_.k, nlist_, pq_m, o_.refine, o_.hnsw_m,
        o_.hnsw_ef_construction));
    dataset_names_.push_back(d_.name);
    for (const std::string& target_spec : o_.targets) {
      auto target = MakeTarget(target_spec, o_, nlist_, pq_m);
      if (!target.ok()) return target.status();
      if (absl::Status s = RunTarget(**target); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }

  int Fail(const absl::Status& s) {
    progress_.Line("shoal-bench: " + s.ToString());
    if (!rows_.empty()) Finish();
    return 1;
  }

  std::vector<uint32_t> Knobs(const Target& t, uint32_t k) const {
    std::vector<uint32_t> knobs;
    if (t.knob_name() == "nprobe") {
      for (uint32_t v : o_.nprobes) {
        if (v <= nlist_) knobs.push_back(v);
      }
    } else if (t.knob_name() == "ef") {
      for (uint32_t v : o_.efs) {
        if (v >= k) knobs.push_back(v);
      }
      if (knobs.empty() || knobs.front() > k) knobs.insert(knobs.begin(), k);  // ef < k is k
    }
    if (knobs.empty()) knobs.push_back(0);
    return knobs;
  }

  absl::Status Measure(Target& t, uint32_t knob, const std::string& mode, const LoadSpec& spec,
                       Row* out = nullptr) {
    const std::string what = absl::StrFormat(
        "%s %s %s c=%zu b=%zu%s", t.name(),
        t.knob_name().empty() ? "exact" : absl::StrCat(t.knob_name(), "=", knob), mode,
        spec.clients, spec.batch, spec.rate > 0 ? absl::StrFormat(" rate=%.0f", spec.rate) : "");
    const auto start = Clock::now();
    if (quiet_) quiet_->Start();
    PointResult p = RunPoint(t, d_, spec, [&](size_t done, size_t total) {
      progress_.Update(what, done, total, Seconds(start));
    });
    if (quiet_) {
      if (absl::Status s = quiet_->Finish(what); !s.ok()) return s;
    }
    if (p.errors > 0 && p.queries == 0) {
      return absl::InternalError(absl::StrCat(what, ": every request failed: ", p.first_error));
    }
    Row row = MakeRow(d_, gt_, t.name(), t.knob_name(), knob, mode, spec, p);
    // Shoal: mean queries per partition scan, "-" when shoald does not export the histogram.
    const std::string per_scan = t.in_process() ? ""
                                 : std::isnan(row.queries_per_scan)
                                     ? "  q/scan -"
                                     : absl::StrFormat("  q/scan %.2f", row.queries_per_scan);
    progress_.Line(
        absl::StrFormat("%-52s recall@10 %.3f  %7.0f q/s  p50 %.2f ms  p99 %.2f ms%s%s", what,
                        row.recall10, row.qps, row.p50_ms, row.p99_ms, per_scan,
                        p.errors ? absl::StrCat("  ", p.errors, " errors: ", p.first_error) : ""));
    csv_.Append(row);
    rows_.push_back(row);
    if (out) *out = row;
    return absl::OkStatus();
  }

  absl::Status RunTarget(Target& t) {
    const auto build_start = Clock::now();
    progress_.Line("building " + t.name() + " ...");
    if (absl::Status s = t.Build(d_); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(t.name(), ": ", s.message()));
    }
    context_.build_seconds.emplace_back(d_.name + " " + t.name(), Seconds(build_start));
    progress_.Line(absl::StrFormat("%s ready in %.1f s", t.name(), Seconds(build_start)));
    const std::vector<uint32_t> knobs = Knobs(t, o_.k);
    LoadSpec base{.k = o_.k, .cpu_threads = o_.cpu_threads, .max_seconds = o_.max_seconds};

    // Warm up at the largest knob: it touches every partition the smaller ones do.
    t.SetKnob(knobs.back());
    (void)RunPoint(
        t, d_,
        {.batch = 50, .k = o_.k, .cpu_threads = o_.cpu_threads, .max_seconds = o_.max_seconds});

    uint32_t operating = knobs.back();
    bool operating_found = false;
    for (uint32_t knob : knobs) {
      t.SetKnob(knob);
      for (size_t c : o_.clients) {
        LoadSpec spec = base;
        spec.clients = c;
        Row row;
        if (absl::Status s = Measure(t, knob, "closed", spec, &row); !s.ok()) return s;
        if (!operating_found && row.recall10 >= o_.operating_recall) {
          operating = knob;
          operating_found = true;
        }
      }
      for (size_t b : o_.batches) {
        LoadSpec spec = base;
        spec.batch = b;
        if (absl::Status s = Measure(t, knob, "batch", spec); !s.ok()) return s;
      }
    }
    const size_t busiest = *std::max_element(o_.clients.begin(), o_.clients.end());
    for (uint32_t k : o_.extra_ks) {
      for (uint32_t knob : Knobs(t, k)) {
        t.SetKnob(knob);
        LoadSpec spec = base;
        spec.clients = busiest;
        spec.k = k;
        if (absl::Status s = Measure(t, knob, "closed", spec); !s.ok()) return s;
      }
    }
    t.SetKnob(operating);
    for (double rate : o_.rates) {
      LoadSpec spec = base;
      spec.rate = rate;
      spec.clients = o_.open_loop_workers;
      // At least one pass over the queries, and --open-loop-seconds at the rate.
      spec.queries = std::max(d_.nq, size_t(rate * o_.open_loop_seconds));
      if (absl::Status s = Measure(t, operating, "open", spec); !s.ok()) return s;
    }
    if (o_.cold) {
      auto cold = t.MakeCold();
      if (!cold.ok()) return cold.status();
      if (*cold) {
        LoadSpec spec = base;
        spec.clients = busiest;
        if (absl::Status s = Measure(t, operating, "cold", spec); !s.ok()) return s;
        if (absl::Status s = Measure(t, operating, "warm", spec); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  void Finish() {
    const std::vector<std::string> plots = WritePlots(rows_, o_.out_dir);
    context_.title =
        absl::StrFormat("shoal-bench %s — %s",
                        absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
                        absl::StrJoin(dataset_names_, ", "));
    context_.command = command_;
    const std::string md_path = o_.out_dir + "/report.md";
    std::ofstream(md_path) << MarkdownReport(rows_, context_, plots);
    progress_.Line(absl::StrCat("wrote ", o_.out_dir, "/results.csv, ", md_path, " and ",
                                plots.size(), " plots"));
  }

  Options o_;
  const std::string command_;
  std::vector<std::string> dataset_names_;
  Dataset d_;  // the dataset being measured, its ground truth and nlist
  GroundTruth gt_;
  uint32_t nlist_ = 0;
  CsvWriter csv_;
  std::vector<Row> rows_;
  ReportContext context_;
  Progress progress_;
  std::optional<QuietCheck> quiet_;  // --quiet-check
};

}  // namespace
}  // namespace shoal::bench

int main(int argc, char** argv) {
  using shoal::bench::Options;
  Options o;
  CLI::App app{"shoal-bench: recall, QPS and latency of Shoal vs FAISS and hnswlib"};
  app.add_option("--dataset", o.datasets,
                 "fmnist | synthetic:n=,dim=,clusters=,seed= | a vectors file; repeatable");
  app.add_option("--query-file", o.query_file, "queries for a file dataset (else held out)");
  app.add_option("--queries", o.queries, "queries to use at most");
  app.add_option("-k,--k", o.k, "neighbours per query");
  app.add_option("--extra-k", o.extra_ks,
                 "also sweep with these k (closed loop, busiest --clients); recall@100 needs 100")
      ->delimiter(',');
  app.add_option("--targets", o.targets,
                 "comma-separated targets; shoal:...@key=value[@key=value] starts that target's "
                 "shoald with config overrides (e.g. shoal:ivf_flat@search.share_scans=false)")
      ->delimiter(',');
  app.add_option("--nlist", o.nlist, "IVF partitions; 0 = about 4 sqrt(n)");
  app.add_option("--pq-m", o.pq_m, "PQ sub-quantizers; 0 = most that divide dim, <= 64");
  app.add_option("--refine", o.refine, "re-rank factor for SQ8/PQ");
  app.add_option("--hnsw-m", o.hnsw_m);
  app.add_option("--hnsw-ef-construction", o.hnsw_ef_construction);
  app.add_option("--nprobe", o.nprobes, "nprobe sweep")->delimiter(',');
  app.add_option("--ef", o.efs, "hnswlib ef sweep")->delimiter(',');
  app.add_option("--clients", o.clients, "closed-loop concurrency values")->delimiter(',');
  app.add_option("--batch", o.batches, "queries per request values (0 or none: skip)")
      ->delimiter(',');
  app.add_option("--rate", o.rates, "open-loop arrival rates, requests/s")->delimiter(',');
  app.add_option("--open-loop-workers", o.open_loop_workers, "requests in flight at most");
  app.add_option("--open-loop-seconds", o.open_loop_seconds, "length of an open-loop point");
  app.add_option("--max-seconds", o.max_seconds,
                 "no new request after this long in one point (0 = none): bounds slow targets");
  app.add_option("--operating-recall", o.operating_recall,
                 "open-loop and cold points run at the smallest knob reaching this recall@10");
  app.add_flag("--quiet-check", o.quiet_check,
               "refuse to measure on a busy machine: load average > 1.5 before the run (waits up "
               "to 120 s), or other processes using > 0.3 cores during a point");
  app.add_flag("--cold", o.cold, "Shoal: also a cold pass (restart, page cache dropped)");
  app.add_option("--cpu-threads", o.cpu_threads, "threads for in-process targets and builds");
  app.add_option("--out", o.out_dir, "output directory (default bench/results/<date>)");
  app.add_option("--cache-dir", o.cache_dir, "ground truth and hnswlib graph cache");
  app.add_option("--shoald", o.shoald, "shoald binary the harness starts");
  app.add_option("--data-dir", o.data_root, "where the harness's shoald keeps collections");
  uint32_t server_cpu_threads = 0;
  uint64_t server_cache_bytes = 0;
  app.add_option("--server-cpu-threads", server_cpu_threads, "shoald's search CPU reservation");
  app.add_option("--server-cache-bytes", server_cache_bytes, "shoald's partition cache budget");
  app.add_option("--server-arg", o.server_args,
                 "flag passed to shoald, repeatable (e.g. --server-arg=--cpu-threads=1)");
  app.add_option("--target", o.target_addr, "use a running shoald at host:port instead");
  app.add_option("--metrics-url", o.metrics_url, "its /metrics URL (for bytes/query, hit ratio)");
  app.add_option("--server-pid", o.server_pid, "its pid (for CPU and RSS)");
  CLI11_PARSE(app, argc, argv);
  o.batches.erase(std::remove(o.batches.begin(), o.batches.end(), 0), o.batches.end());
  if (o.clients.empty()) o.clients = {1};
  if (server_cpu_threads > 0) {
    o.server_args.push_back(absl::StrCat("--cpu-threads=", server_cpu_threads));
  }
  if (server_cache_bytes > 0) {
    o.server_args.push_back(absl::StrCat("--cache-bytes=", server_cache_bytes));
  }
  std::vector<std::string> args(argv, argv + argc);
  return shoal::bench::Bench(std::move(o), absl::StrJoin(args, " ")).Run();
}
