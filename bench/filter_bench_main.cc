// shoal-filter-bench: filtered search (issue #24's sweep) — recall, QPS, bytes read and the
// plan Shoal chose, per filter and regime, against the unfiltered search on the same server
// and against FAISS IndexIVFFlat with an IDSelectorBitmap, in one run.
//
//   shoal-filter-bench --dataset fmnist --index ivf_flat --out DIR
//
// The workload (bench/harness/filter_workload.h): a selectivity sweep over a uniform int
// (0.01%..100%), categoricals, a timestamp range, and per-query filters near the query
// (correlated) and far from it (anti-correlated). Each system runs at the smallest nprobe of
// --nprobe reaching --operating-recall unfiltered, then every case in --reps interleaved
// repetitions (median QPS); requests carry up to --batch queries that share a filter, from
// --clients closed-loop threads. Then, per case, its first --cold-queries queries one at a time,
// each after a restart of shoald that drops its files' page cache: the bytes a query reads
// cold. It also counts queries answered with fewer than
// min(k, matches) neighbours (there must be none) and reports the attributes' memory.
// Writes DIR/filtered.md and DIR/filtered.csv.
#include <faiss/IndexFlat.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/impl/IDSelector.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/harness/dataset.h"
#include "bench/harness/filter_workload.h"
#include "bench/harness/quiet_check.h"
#include "bench/harness/shoal_target.h"

namespace shoal::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string dataset = "fmnist";
  size_t queries = 200;
  uint32_t k = 10;
  std::string index = "ivf_flat";
  uint32_t nlist = 256, refine = 0, pq_m = 0;
  std::vector<uint32_t> nprobes = {4, 8, 16, 32, 64};
  double operating_recall = 0.95;
  size_t batch = 10, clients = 2;
  int reps = 3;
  double min_seconds = 0.5;  // each measured run, at least (its requests again and again)
  size_t cold_queries = 5;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  bool quiet_check = false;
  std::string out_dir = "bench/results/filtered";
  std::string shoald = "build/bin/shoald";
  std::string data_root = "build/bench-data";
  std::vector<std::string> server_args;
  std::vector<std::string> only;  // case names to run (besides the unfiltered one); empty: all
};

// One system's answers to one case: every query's ids (k each), and per query Shoal's stats
// and hit count.
struct Answers {
  std::vector<int64_t> ids;
  std::vector<QueryStats> stats;
  std::vector<size_t> hits;
  double seconds = 0;
  uint64_t queries = 0;  // answered in `seconds`: the requests' first pass and any repeats
  double qps() const { return seconds > 0 ? double(queries) / seconds : 0; }
};

// Requests: runs of queries with the same filter group, at most `batch` each.
std::vector<std::vector<size_t>> Requests(const FilterCase& c, size_t batch) {
  std::map<uint32_t, std::vector<size_t>> by_group;
  for (size_t q = 0; q < c.group_of.size(); ++q) by_group[c.group_of[q]].push_back(q);
  std::vector<std::vector<size_t>> out;
  for (const auto& [group, queries] : by_group) {
    for (size_t i = 0; i < queries.size(); i += batch) {
      out.emplace_back(queries.begin() + long(i),
                       queries.begin() + long(std::min(queries.size(), i + batch)));
    }
  }
  return out;
}

// Runs `requests` from `clients` closed-loop threads, round and round until each ran once and
// `min_seconds` passed (a pass of a few dozen requests takes milliseconds: too short to time);
// `run(request, first)` answers one, `first` on its first run (the answers to keep). Sets
// a->seconds and a->queries.
template <typename Run>
absl::Status RunClosedLoop(const std::vector<std::vector<size_t>>& requests, size_t clients,
                           double min_seconds, Answers* a, Run run) {
  if (requests.empty()) return absl::OkStatus();
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> answered{0};
  std::vector<absl::Status> errors(clients);
  const Clock::time_point start = Clock::now();
  const Clock::time_point until = start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(min_seconds));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = next++; i < requests.size() || Clock::now() < until; i = next++) {
        const std::vector<size_t>& r = requests[i % requests.size()];
        errors[t] = run(r, i < requests.size());
        if (!errors[t].ok()) return;
        answered += r.size();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  a->seconds = std::chrono::duration<double>(Clock::now() - start).count();
  a->queries = answered.load();
  for (const absl::Status& s : errors) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<float> Gather(const Dataset& d, const std::vector<size_t>& queries) {
  std::vector<float> out;
  for (size_t q : queries) out.insert(out.end(), d.query(q), d.query(q) + d.dim);
  return out;
}

absl::StatusOr<Answers> RunShoal(ShoalTarget& shoal, const Dataset& d, const FilterCase& c,
                                 const Options& o) {
  Answers a;
  a.ids.assign(d.nq * o.k, -1);
  a.stats.resize(d.nq);
  a.hits.assign(d.nq, 0);
  const auto requests = Requests(c, o.batch);
  absl::Status s = RunClosedLoop(
      requests, o.clients, o.min_seconds, &a, [&](const std::vector<size_t>& r, bool first) {
        const std::vector<float> x = Gather(d, r);
        std::vector<int64_t> ids(r.size() * o.k);
        std::vector<QueryStats> stats(r.size());
        std::vector<size_t> hits(r.size());
        absl::Status st = shoal.SearchFiltered(x.data(), r.size(), o.k, c.filter[c.group_of[r[0]]],
                                               ids.data(), stats.data(), hits.data());
        for (size_t i = 0; i < r.size() && first; ++i) {
          std::copy(ids.begin() + long(i * o.k), ids.begin() + long((i + 1) * o.k),
                    a.ids.begin() + long(r[i] * o.k));
          a.stats[r[i]] = stats[i];
          a.hits[r[i]] = hits[i];
        }
        return st;
      });
  if (!s.ok()) return s;
  return a;
}

struct Faiss {
  std::unique_ptr<faiss::IndexFlatL2> quantizer;
  std::unique_ptr<faiss::IndexIVFFlat> ivf;
  uint32_t nprobe = 1;
};

absl::StatusOr<Answers> RunFaiss(Faiss& f, const Dataset& d, const FilterCase& c,
                                 const Options& o) {
  Answers a;
  a.ids.assign(d.nq * o.k, -1);
  a.hits.assign(d.nq, 0);
  std::vector<std::unique_ptr<faiss::IDSelectorBitmap>> selectors;
  for (const auto& bitmap : c.bitmap) {
    selectors.push_back(std::make_unique<faiss::IDSelectorBitmap>(bitmap.size(), bitmap.data()));
  }
  const bool unfiltered = c.regime == "none";
  const int per_client = std::max<int>(1, o.threads / int(o.clients));
  const auto requests = Requests(c, o.batch);
  absl::Status s = RunClosedLoop(
      requests, o.clients, o.min_seconds, &a, [&](const std::vector<size_t>& r, bool first) {
        omp_set_num_threads(per_client);
        const std::vector<float> x = Gather(d, r);
        std::vector<float> dist(r.size() * o.k);
        std::vector<faiss::Index::idx_t> ids(r.size() * o.k);
        faiss::SearchParametersIVF params;
        params.nprobe = f.nprobe;
        if (!unfiltered) params.sel = selectors[c.group_of[r[0]]].get();
        try {
          f.ivf->search(faiss::Index::idx_t(r.size()), x.data(), o.k, dist.data(), ids.data(),
                        &params);
        } catch (const std::exception& e) {
          return absl::InternalError(absl::StrCat("faiss search: ", e.what()));
        }
        for (size_t i = 0; i < r.size() && first; ++i) {
          for (uint32_t j = 0; j < o.k; ++j) {
            a.ids[r[i] * o.k + j] = ids[i * o.k + j];
            a.hits[r[i]] += ids[i * o.k + j] >= 0;
          }
        }
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  return a;
}

double MeanRecall(const Dataset& d, const FilterCase& c, const FilteredTruth& t, const Answers& a) {
  double sum = 0;
  for (size_t q = 0; q < d.nq; ++q) sum += FilteredRecall(d, c, t, q, &a.ids[q * t.k]);
  return sum / double(d.nq);
}

// Queries answered with fewer than min(k, matches) neighbours.
size_t Short(const FilterCase& c, const Answers& a, uint32_t k) {
  size_t n = 0;
  for (size_t q = 0; q < a.hits.size(); ++q) {
    n += a.hits[q] < std::min<uint64_t>(k, c.matches[c.group_of[q]]);
  }
  return n;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The unfiltered search sent as `c`'s requests (the same queries per request): a filter per
// query means requests of one to a few queries, and this is what such requests cost without it.
FilterCase UnfilteredAs(const FilterCase& none, const FilterCase& c) {
  FilterCase shaped = none;
  shaped.group_of = c.group_of;
  shaped.filter.assign(c.filter.size(), none.filter[0]);
  shaped.bitmap.assign(c.filter.size(), none.bitmap[0]);
  shaped.matches.assign(c.filter.size(), none.matches[0]);
  return shaped;
}

struct Row {
  const FilterCase* c = nullptr;
  double shoal_recall = 0, faiss_recall = 0;
  std::vector<double> shoal_qps, faiss_qps;
  std::vector<double> shaped_qps;  // a filter per query: UnfilteredAs(none, c), same rep
  size_t shoal_short = 0, faiss_short = 0;
  double bytes_per_query = 0, matching_scanned = 0;
  double cold_bytes_per_query = 0;  // mean over the cold queries
  std::map<std::string, size_t> plans;
};

std::string Plans(const Row& r) {
  std::string out;
  for (const auto& [plan, n] : r.plans) {
    absl::StrAppend(&out, out.empty() ? "" : " ", plan.empty() ? "-" : plan,
                    r.plans.size() > 1 ? absl::StrCat("(", n, ")") : "");
  }
  return out;
}

int Run(const Options& o) {
  std::optional<QuietCheck> quiet;
  if (o.quiet_check) {
    quiet.emplace(QuietCheckOptions{},
                  [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  }
  auto loaded = LoadDataset(o.dataset, "", o.queries);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dataset: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  const Dataset& d = *loaded;
  auto workload = MakeFilterWorkload(d, o.threads);
  if (!workload.ok()) {
    std::fprintf(stderr, "workload: %s\n", workload.status().ToString().c_str());
    return 1;
  }
  std::vector<FilterCase> cases = MakeFilterCases(d, *workload);
  if (!o.only.empty()) {
    std::erase_if(cases, [&](const FilterCase& c) {
      return c.regime != "none" && std::find(o.only.begin(), o.only.end(), c.name) == o.only.end();
    });
  }
  std::vector<FilteredTruth> truth;
  for (const FilterCase& c : cases) truth.push_back(ComputeFilteredTruth(d, c, o.k, o.threads));
  std::fprintf(stderr, "%s: %zu x %u, %zu queries, %zu cases, ground truth done\n", d.name.c_str(),
               d.n, d.dim, d.nq, cases.size());

  const std::optional<IndexType> index = IndexTypeFromName(o.index);
  if (!index) {
    std::fprintf(stderr, "--index: want flat, ivf_flat, ivf_sq8 or ivf_pq\n");
    return 1;
  }
  ShoalParams params;
  params.index = *index;
  params.nlist = o.nlist;
  params.pq_m = o.pq_m;
  params.refine_factor = o.refine;
  params.shoald_binary = o.shoald;
  params.data_root = o.data_root;
  params.server_args = o.server_args;
  params.attributes = [&](size_t row) { return workload->AttributesOf(row); };
  params.attributes_tag = "fw1";
  ShoalTarget shoal(params);
  if (absl::Status s = shoal.Build(d); !s.ok()) {
    std::fprintf(stderr, "shoal: %s\n", s.ToString().c_str());
    return 1;
  }
  Faiss faiss;
  try {
    omp_set_num_threads(o.threads);
    faiss.quantizer = std::make_unique<faiss::IndexFlatL2>(int(d.dim));
    faiss.ivf = std::make_unique<faiss::IndexIVFFlat>(faiss.quantizer.get(), d.dim, o.nlist);
    faiss.ivf->train(faiss::Index::idx_t(d.n), d.base.data());
    faiss.ivf->add(faiss::Index::idx_t(d.n), d.base.data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "faiss: %s\n", e.what());
    return 1;
  }

  // Each at the smallest nprobe reaching the operating recall unfiltered.
  const FilterCase& none = cases[0];
  uint32_t shoal_nprobe = o.nprobes.back(), faiss_nprobe = o.nprobes.back();
  for (auto it = o.nprobes.rbegin(); it != o.nprobes.rend(); ++it) {
    shoal.SetKnob(*it);
    auto a = RunShoal(shoal, d, none, o);
    if (a.ok() && MeanRecall(d, none, truth[0], *a) >= o.operating_recall) shoal_nprobe = *it;
    faiss.nprobe = *it;
    auto b = RunFaiss(faiss, d, none, o);
    if (b.ok() && MeanRecall(d, none, truth[0], *b) >= o.operating_recall) faiss_nprobe = *it;
  }
  shoal.SetKnob(shoal_nprobe);
  faiss.nprobe = faiss_nprobe;
  std::fprintf(stderr, "nprobe: shoal %u, faiss %u\n", shoal_nprobe, faiss_nprobe);

  std::vector<Row> rows(cases.size());
  if (quiet) {
    if (absl::Status s = quiet->BeforeRun(); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    quiet->Start();
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const FilterCase& c = cases[i];
      Row& row = rows[i];
      row.c = &c;
      auto a = RunShoal(shoal, d, c, o);
      auto b = RunFaiss(faiss, d, c, o);
      if (!a.ok() || !b.ok()) {
        std::fprintf(stderr, "%s: %s %s\n", c.name.c_str(), a.status().ToString().c_str(),
                     b.status().ToString().c_str());
        return 1;
      }
      row.shoal_qps.push_back(a->qps());
      row.faiss_qps.push_back(b->qps());
      if (c.filter.size() > 1) {
        auto shaped = RunShoal(shoal, d, UnfilteredAs(none, c), o);
        if (!shaped.ok()) {
          std::fprintf(stderr, "%s unfiltered: %s\n", c.name.c_str(),
                       shaped.status().ToString().c_str());
          return 1;
        }
        row.shaped_qps.push_back(shaped->qps());
      }
      if (rep == 0) {
        row.shoal_recall = MeanRecall(d, c, truth[i], *a);
        row.faiss_recall = MeanRecall(d, c, truth[i], *b);
        row.shoal_short = Short(c, *a, o.k);
        row.faiss_short = Short(c, *b, o.k);
      }
      if (rep + 1 < o.reps) continue;
      for (const QueryStats& s : a->stats) {  // the last run's: warm
        row.bytes_per_query += double(s.bytes_read) / double(d.nq);
        row.matching_scanned += double(s.matching_rows_scanned) / double(d.nq);
        ++row.plans[s.plan];
      }
    }
  }

  std::string quiet_result;
  if (quiet) {
    const absl::Status s = quiet->Finish("the sweep");
    quiet_result = s.ok() ? "passed" : s.ToString();
  }
  const size_t cold_queries = std::min(o.cold_queries, d.nq);
  for (size_t i = 0; i < cases.size() && cold_queries > 0; ++i) {
    for (size_t q = 0; q < cold_queries; ++q) {
      if (auto cold = shoal.MakeCold(); !cold.ok() || !*cold) {
        std::fprintf(stderr, "cold restart: %s\n",
                     cold.ok() ? "not our server" : cold.status().ToString().c_str());
        return 1;
      }
      int64_t ids[64];
      QueryStats stats;
      size_t hits = 0;
      const std::string& filter = cases[i].filter[cases[i].group_of[q]];
      if (absl::Status s = shoal.SearchFiltered(d.query(q), 1, std::min<uint32_t>(o.k, 64), filter,
                                                ids, &stats, &hits);
          !s.ok()) {
        std::fprintf(stderr, "%s cold: %s\n", cases[i].name.c_str(), s.ToString().c_str());
        return 1;
      }
      rows[i].cold_bytes_per_query += double(stats.bytes_read) / double(cold_queries);
    }
  }

  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  std::string md = absl::StrFormat(
      "# Filtered search: %s (%zu x %u), shoal:%s nlist %u (nprobe %u) vs FAISS IVFFlat + "
      "IDSelectorBitmap (nprobe %u)\n\n%zu queries, k = %u, batches of up to %zu sharing a filter, "
      "%zu clients, median of %d interleaved runs of at least %.1f s each; FAISS on %d threads. "
      "bytes/q: "
      "read by Shoal per query in the last run's first pass (warm partition cache); cold bytes/q: "
      "one query alone after a "
      "restart with its files' page cache dropped, mean of %zu per case. x same requests: "
      "against the unfiltered search sent in the case's requests (a filter per query makes "
      "requests of one to a few queries; the other cases' requests are the unfiltered "
      "ones).\n\n",
      d.name, d.n, d.dim, o.index, o.nlist, shoal_nprobe, faiss_nprobe, d.nq, o.k, o.batch,
      o.clients, o.reps, o.min_seconds, o.threads, cold_queries);
  absl::StrAppend(&md,
                  "| regime | filter | selectivity | plan | recall | QPS | x unfiltered | "
                  "x same requests | bytes/q | cold bytes/q | x unfiltered cold | "
                  "matches scanned/q | FAISS recall | FAISS QPS | Shoal/FAISS | "
                  "short (Shoal/FAISS) |\n"
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::string csv =
      "regime,filter,selectivity,plan,recall,qps,qps_vs_unfiltered,qps_vs_same_requests,"
      "bytes_per_query,cold_bytes_per_query,matching_rows_scanned,faiss_recall,faiss_qps,short,"
      "faiss_short\n";
  const double base_qps = Median(rows[0].shoal_qps);
  const double base_cold = std::max(1.0, rows[0].cold_bytes_per_query);
  for (const Row& r : rows) {
    const double qps = Median(r.shoal_qps), fqps = Median(r.faiss_qps);
    // Each rep's ratio against its own same-requests run, then the median.
    std::vector<double> shaped;
    for (size_t i = 0; i < r.shaped_qps.size(); ++i) {
      shaped.push_back(r.shoal_qps[i] / r.shaped_qps[i]);
    }
    const double same = shaped.empty() ? qps / base_qps : Median(shaped);
    absl::StrAppendFormat(&md,
                          "| %s | `%s` | %.4f%% | %s | %.3f | %.0f | %.2f | %.2f | %.0f | %.0f | "
                          "%.2f | %.0f | %.3f | %.0f | %.2f | %zu/%zu |\n",
                          r.c->regime, r.c->name, 100 * r.c->selectivity(d.n), Plans(r),
                          r.shoal_recall, qps, qps / base_qps, same, r.bytes_per_query,
                          r.cold_bytes_per_query, r.cold_bytes_per_query / base_cold,
                          r.matching_scanned, r.faiss_recall, fqps, qps / fqps, r.shoal_short,
                          r.faiss_short);
    absl::StrAppendFormat(
        &csv, "%s,\"%s\",%.6f,%s,%.4f,%.1f,%.3f,%.3f,%.0f,%.0f,%.0f,%.4f,%.1f,%zu,%zu\n",
        r.c->regime, r.c->name, r.c->selectivity(d.n), Plans(r), r.shoal_recall, qps,
        qps / base_qps, same, r.bytes_per_query, r.cold_bytes_per_query, r.matching_scanned,
        r.faiss_recall, fqps, r.shoal_short, r.faiss_short);
  }
  if (auto info = shoal.Describe(); info.ok()) {
    const double per_million = double(info->attribute_memory_bytes) / double(d.n) * 1e6;
    absl::StrAppendFormat(&md,
                          "\nAttributes in memory for filtering: %.1f MiB (%.1f MiB per million "
                          "rows; %d fields, %.1f MiB per million rows per field).\n",
                          double(info->attribute_memory_bytes) / (1 << 20), per_million / (1 << 20),
                          workload->rows[0].label >= 0 ? 6 : 5,
                          per_million / (1 << 20) / (workload->rows[0].label >= 0 ? 6 : 5));
  }
  if (quiet) absl::StrAppend(&md, "\nQuiet check: ", quiet_result, "\n");
  std::ofstream(o.out_dir + "/filtered.md") << md;
  std::ofstream(o.out_dir + "/filtered.csv") << csv;
  std::fputs(md.c_str(), stdout);
  size_t short_total = 0;
  for (const Row& r : rows) short_total += r.shoal_short;
  return short_total == 0 ? 0 : 3;  // fewer than min(k, matches) is a bug, not a figure
}

}  // namespace
}  // namespace shoal::bench

int main(int argc, char** argv) {
  shoal::bench::Options o;
  CLI::App app{"shoal-filter-bench: filtered search against unfiltered and FAISS"};
  app.add_option("--dataset", o.dataset, "fmnist, synthetic:n=...,dim=...,clusters=..., or a file");
  app.add_option("--queries", o.queries, "queries");
  app.add_option("-k,--k", o.k, "neighbours per query");
  app.add_option("--index", o.index, "Shoal's index type: ivf_flat, ivf_sq8, ivf_pq, flat");
  app.add_option("--nlist", o.nlist, "IVF partitions (both systems)");
  app.add_option("--refine", o.refine, "Shoal's re-rank factor for SQ8/PQ");
  app.add_option("--pq-m", o.pq_m, "Shoal's PQ sub-quantizers");
  app.add_option("--nprobe", o.nprobes, "nprobe candidates")->delimiter(',');
  app.add_option("--operating-recall", o.operating_recall, "unfiltered recall to reach");
  app.add_option("--batch", o.batch, "queries per request at most (same filter)");
  app.add_option("--clients", o.clients, "closed-loop client threads");
  app.add_option("--reps", o.reps, "interleaved repetitions (median)");
  app.add_option("--min-seconds", o.min_seconds,
                 "each measured run, at least: its requests again and again")
      ->check(CLI::Range(0.0, 600.0));
  app.add_option("--cold-queries", o.cold_queries,
                 "queries per case measured cold, each after a restart (0: none)");
  app.add_option("--threads", o.threads, "FAISS and ground-truth threads");
  app.add_flag("--quiet-check", o.quiet_check, "report whether anything else used the CPU");
  app.add_option("--out", o.out_dir, "output directory");
  app.add_option("--shoald", o.shoald, "shoald binary");
  app.add_option("--data-dir", o.data_root, "where the harness's shoald keeps collections");
  app.add_option("--server-arg", o.server_args, "flag passed to shoald, repeatable");
  app.add_option("--case", o.only, "run only this case (its name, e.g. 'u < 10'), repeatable");
  CLI11_PARSE(app, argc, argv);
  return shoal::bench::Run(o);
}
