// shoal-bench's parts: histogram arithmetic, datasets, ground truth and its cache, recall, the
// load driver's three modes, the in-process targets and the report.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "bench/harness/dataset.h"
#include "bench/harness/driver.h"
#include "bench/harness/faiss_target.h"
#include "bench/harness/ground_truth.h"
#include "bench/harness/hnsw_target.h"
#include "bench/harness/latency_histogram.h"
#include "bench/harness/process_usage.h"
#include "bench/harness/prometheus.h"
#include "bench/harness/report.h"
#include "bench/harness/shoal_target.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::bench::harness_test {
namespace {

using ::testing::HasSubstr;

Dataset Small(size_t n = 2000, uint32_t dim = 16, size_t nq = 50, uint64_t seed = 7) {
  return MakeSynthetic({.n = n, .dim = dim, .clusters = 10, .seed = seed}, nq);
}

// ---- LatencyHistogram ----------------------------------------------------------------------

TEST(LatencyHistogram, BucketsTileTheRangeWithBoundedRelativeError) {
  for (size_t b = 0; b < LatencyHistogram::BucketOf(LatencyHistogram::kMaxTrackableNs); ++b) {
    ASSERT_EQ(LatencyHistogram::BucketOf(LatencyHistogram::BucketLow(b)), b);
    ASSERT_EQ(LatencyHistogram::BucketOf(LatencyHistogram::BucketHigh(b)), b);
    ASSERT_EQ(LatencyHistogram::BucketHigh(b) + 1, LatencyHistogram::BucketLow(b + 1));
    const double low = double(LatencyHistogram::BucketLow(b));
    const double spread = double(LatencyHistogram::BucketHigh(b)) - low;  // values lumped
    if (low > 0) {
      ASSERT_LT(spread / low, 1.0 / 128) << b;
    }
  }
}

TEST(LatencyHistogram, PercentilesMatchSortedSamplesWithinOnePercent) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(std::log(200000.0), 1.0);  // ~0.2 ms, long tail
  std::vector<uint64_t> samples;
  LatencyHistogram parts[2];
  for (int i = 0; i < 50000; ++i) {
    samples.push_back(uint64_t(dist(rng)));
    parts[i % 2].Record(samples.back());
  }
  LatencyHistogram h;
  h.Merge(parts[0]);
  h.Merge(parts[1]);
  std::sort(samples.begin(), samples.end());
  ASSERT_EQ(h.count(), samples.size());
  EXPECT_EQ(h.min_ns(), samples.front());
  EXPECT_EQ(h.max_ns(), samples.back());
  for (double p : {0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0}) {
    const size_t rank = std::max<size_t>(1, size_t(std::ceil(p * double(samples.size()))));
    const double exact = double(samples[rank - 1]);
    EXPECT_NEAR(h.Percentile(p), exact, exact * 0.01) << p;
  }
  const auto cdf = h.Cdf();
  ASSERT_FALSE(cdf.empty());
  EXPECT_DOUBLE_EQ(cdf.back().second, 1.0);
  for (size_t i = 1; i < cdf.size(); ++i) {
    EXPECT_GT(cdf[i].first, cdf[i - 1].first);
    EXPECT_GT(cdf[i].second, cdf[i - 1].second);
  }
}

TEST(LatencyHistogram, EmptyAndHugeValues) {
  LatencyHistogram h;
  EXPECT_EQ(h.Percentile(0.5), 0);
  EXPECT_TRUE(h.Cdf().empty());
  h.Record(UINT64_MAX);  // clamped, not out of range
  EXPECT_EQ(h.max_ns(), LatencyHistogram::kMaxTrackableNs);
  EXPECT_EQ(h.Percentile(0.99), double(LatencyHistogram::kMaxTrackableNs));
}

// ---- Dataset -------------------------------------------------------------------------------

TEST(Dataset, SyntheticIsDeterministicPerSeed) {
  const Dataset a = Small(), b = Small(), c = Small(2000, 16, 50, 8);
  EXPECT_EQ(a.name, "synthetic-n2000-d16-c10-s7");
  EXPECT_EQ(a.n, 2000u);
  EXPECT_EQ(a.nq, 50u);
  EXPECT_EQ(a.base, b.base);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_NE(a.base, c.base);
  EXPECT_NE(a.checksum, c.checksum);
}

TEST(Dataset, ParsesSyntheticSpecs) {
  auto spec = ParseSyntheticSpec("dim=8,n=100,seed=3,clusters=4");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->n, 100u);
  EXPECT_EQ(spec->dim, 8u);
  EXPECT_EQ(spec->clusters, 4u);
  EXPECT_EQ(spec->seed, 3u);
  for (const char* bad : {"n=0", "dim=x", "colour=3", "n=10,clusters=11", "n"}) {
    EXPECT_FALSE(ParseSyntheticSpec(bad).ok()) << bad;
  }
  auto d = LoadDataset("synthetic:n=300,dim=4,clusters=3", "", 20);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->n, 300u);
  EXPECT_EQ(d->nq, 20u);
}

void WriteFvecs(const std::string& path, size_t rows, uint32_t dim, float offset) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < rows; ++i) {
    out.write(reinterpret_cast<const char*>(&dim), 4);
    for (uint32_t j = 0; j < dim; ++j) {
      const float v = offset + float(i) + float(j) / 100;
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
}

TEST(Dataset, FilesWithQueryFileOrHeldOutRows) {
  testing::TempDir dir;
  WriteFvecs(dir.Sub("base.fvecs"), 100, 4, 0);
  WriteFvecs(dir.Sub("q.fvecs"), 10, 4, 0.5f);
  WriteFvecs(dir.Sub("q8.fvecs"), 10, 8, 0.5f);
  auto held = LoadDataset(dir.Sub("base.fvecs"), "", 10);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->name, "base");
  EXPECT_EQ(held->n, 90u);
  EXPECT_EQ(held->nq, 10u);
  EXPECT_EQ(held->query(0)[0], 90.0f);  // the last rows, out of the base
  auto with_queries = LoadDataset(dir.Sub("base.fvecs"), dir.Sub("q.fvecs"), 5);
  ASSERT_TRUE(with_queries.ok());
  EXPECT_EQ(with_queries->n, 100u);
  EXPECT_EQ(with_queries->nq, 5u);
  EXPECT_FALSE(LoadDataset(dir.Sub("base.fvecs"), dir.Sub("q8.fvecs"), 5).ok());
  EXPECT_FALSE(LoadDataset(dir.Sub("missing.fvecs"), "", 5).ok());
}

// ---- Ground truth and recall ---------------------------------------------------------------

TEST(GroundTruth, MatchesBruteForceAndIsCachedByChecksum) {
  const Dataset d = Small(1500, 8, 30);
  const GroundTruth gt = ComputeGroundTruth(d, 20, 1);
  for (size_t q = 0; q < d.nq; ++q) {
    std::vector<std::pair<double, int64_t>> all;
    for (size_t i = 0; i < d.n; ++i) all.emplace_back(L2(d, q, i), int64_t(i));
    std::sort(all.begin(), all.end());
    for (size_t j = 0; j < gt.k; ++j) {
      EXPECT_NEAR(gt.dist_of(q)[j], all[j].first, 1e-5 * all[j].first);
    }
    std::vector<int64_t> ids(gt.ids_of(q), gt.ids_of(q) + gt.k);
    EXPECT_DOUBLE_EQ(RecallAt(d, gt, q, ids.data(), ids.size(), 10), 1.0);
  }

  testing::TempDir dir;
  bool cached = true;
  auto first = LoadOrComputeGroundTruth(d, 20, dir.path(), 1, &cached);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(cached);
  auto second = LoadOrComputeGroundTruth(d, 20, dir.path(), 1, &cached);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(cached);
  EXPECT_EQ(second->ids, first->ids);
  EXPECT_EQ(second->dist, first->dist);

  // Same name, other contents: the cache is stale and not used.
  Dataset changed = d;
  changed.base[0] += 1;
  changed.checksum ^= 1;
  auto third = LoadOrComputeGroundTruth(changed, 20, dir.path(), 1, &cached);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(cached);
  // A truncated cache is recomputed.
  std::filesystem::resize_file(GroundTruthPath(dir.path(), d, 20), 100);
  auto fourth = LoadOrComputeGroundTruth(d, 20, dir.path(), 1, &cached);
  ASSERT_TRUE(fourth.ok());
  EXPECT_FALSE(cached);
  EXPECT_EQ(fourth->ids, first->ids);
}

TEST(GroundTruth, RecallIsTieAwareAndIgnoresJunk) {
  // Base: 0 at distance 0 of the query, 1 and 2 tied at distance 1, 3 farther.
  Dataset d;
  d.dim = 1;
  d.base = {0, 1, -1, 5};
  d.queries = {0};
  d.n = 4;
  d.nq = 1;
  const GroundTruth gt = ComputeGroundTruth(d, 2, 1);
  const int64_t tie[] = {0, 2};  // the other member of the tie is as good
  EXPECT_DOUBLE_EQ(RecallAt(d, gt, 0, tie, 2, 2), 1.0);
  const int64_t dup[] = {0, 0};
  EXPECT_DOUBLE_EQ(RecallAt(d, gt, 0, dup, 2, 2), 0.5);
  const int64_t junk[] = {-1, 99};
  EXPECT_DOUBLE_EQ(RecallAt(d, gt, 0, junk, 2, 2), 0.0);
  const int64_t far[] = {3, 0};
  EXPECT_DOUBLE_EQ(RecallAt(d, gt, 0, far, 2, 1), 0.0);  // recall@1 looks at the first only
  EXPECT_DOUBLE_EQ(RecallAt(d, gt, 0, far, 2, 2), 0.5);
}

// ---- Driver --------------------------------------------------------------------------------

// Exact search over the dataset; every `fail_every`-th request fails.
class ExactTarget final : public Target {
 public:
  ExactTarget(const Dataset& d, size_t fail_every = 0) : d_(d), fail_every_(fail_every) {}
  std::string name() const override { return "exact"; }
  std::string knob_name() const override { return ""; }
  bool in_process() const override { return true; }
  absl::Status Build(const Dataset&) override { return absl::OkStatus(); }
  void SetKnob(uint32_t) override {}
  absl::Status Search(const float* queries, size_t count, uint32_t k, int threads,
                      int64_t* ids) override {
    max_threads_seen = std::max(max_threads_seen.load(), threads);
    if (fail_every_ && ++calls_ % fail_every_ == 0) return absl::UnavailableError("injected");
    for (size_t i = 0; i < count; ++i) {
      std::vector<std::pair<double, int64_t>> all;
      for (size_t r = 0; r < d_.n; ++r) {
        double s = 0;
        for (uint32_t j = 0; j < d_.dim; ++j) {
          const double diff = double(queries[i * d_.dim + j]) - double(d_.row(r)[j]);
          s += diff * diff;
        }
        all.emplace_back(s, int64_t(r));
      }
      std::partial_sort(all.begin(), all.begin() + k, all.end());
      for (uint32_t j = 0; j < k; ++j) ids[i * k + j] = all[j].second;
    }
    return absl::OkStatus();
  }
  ResourceUsage Usage() override { return {.cpu_seconds = double(++usage_calls_)}; }

  std::atomic<int> max_threads_seen{0};

 private:
  const Dataset& d_;
  const size_t fail_every_;
  std::atomic<size_t> calls_{0};
  int usage_calls_ = 0;
};

TEST(Driver, ClosedLoopAndBatchAnswerEveryQueryInOrder) {
  const Dataset d = Small(500, 8, 40);
  const GroundTruth gt = ComputeGroundTruth(d, 10, 1);
  ExactTarget target(d);
  for (LoadSpec spec : {LoadSpec{.clients = 4, .k = 10, .cpu_threads = 8},
                        LoadSpec{.clients = 1, .batch = 7, .k = 10, .cpu_threads = 8},
                        LoadSpec{.clients = 3, .batch = 5, .queries = 100, .k = 10}}) {
    const PointResult p = RunPoint(target, d, spec);
    const size_t total = spec.queries ? spec.queries : d.nq;
    EXPECT_EQ(p.queries, total);
    EXPECT_EQ(p.errors, 0u);
    EXPECT_EQ(p.latency.count(), (total + spec.batch - 1) / spec.batch);
    const Row row = MakeRow(d, gt, "exact", "", 0, "closed", spec, p);
    EXPECT_DOUBLE_EQ(row.recall10, 1.0);
    EXPECT_DOUBLE_EQ(row.recall1, 1.0);
    EXPECT_TRUE(std::isnan(row.recall100));  // k = 10 cannot tell
    EXPECT_GT(row.qps, 0);
    EXPECT_DOUBLE_EQ(p.after.cpu_seconds - p.before.cpu_seconds, 1);
  }
  // 4 clients share 8 threads; 1 client of batches gets them all.
  EXPECT_EQ(target.max_threads_seen.load(), 8);
}

TEST(Driver, OpenLoopKeepsTheScheduleAndCountsFailures) {
  const Dataset d = Small(300, 8, 20);
  ExactTarget target(d, /*fail_every=*/10);
  const auto start = std::chrono::steady_clock::now();
  const PointResult p = RunPoint(target, d, {.clients = 8, .rate = 400, .queries = 200, .k = 5});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // 200 arrivals at 400/s cannot finish before the last one is due (0.4975 s).
  EXPECT_GE(seconds, 0.49);
  EXPECT_EQ(p.errors, 20u);
  EXPECT_EQ(p.queries, 180u);
  EXPECT_THAT(p.first_error, HasSubstr("injected"));
  EXPECT_EQ(p.latency.count(), 200u);
}

// Answers after `delay`: a target too slow for the point's queries.
class SlowTarget final : public Target {
 public:
  explicit SlowTarget(std::chrono::milliseconds delay) : delay_(delay) {}
  std::string name() const override { return "slow"; }
  std::string knob_name() const override { return ""; }
  bool in_process() const override { return true; }
  absl::Status Build(const Dataset&) override { return absl::OkStatus(); }
  void SetKnob(uint32_t) override {}
  absl::Status Search(const float*, size_t count, uint32_t k, int, int64_t* ids) override {
    std::this_thread::sleep_for(delay_);
    std::fill(ids, ids + count * k, 0);
    return absl::OkStatus();
  }
  ResourceUsage Usage() override { return {}; }

 private:
  const std::chrono::milliseconds delay_;
};

TEST(Driver, MaxSecondsBoundsASlowTargetAndRecallCountsOnlyAnswers) {
  const Dataset d = Small(300, 8, 20);
  const GroundTruth gt = ComputeGroundTruth(d, 10, 1);
  SlowTarget slow(std::chrono::milliseconds(20));
  for (double rate : {0.0, 1000.0}) {
    const LoadSpec spec{.clients = 2, .rate = rate, .queries = 1000, .k = 10, .max_seconds = 0.2};
    const PointResult p = RunPoint(slow, d, spec);
    EXPECT_LT(p.queries, 100u) << rate;  // 1000 x 20 ms would take 10 s
    EXPECT_GT(p.queries, 0u);
    EXPECT_EQ(size_t(std::count(p.answered.begin(), p.answered.end(), 1)), p.queries);
    // Open loop: the 200 arrivals due in 0.2 s that were never sent are errors.
    EXPECT_EQ(p.errors, rate > 0 ? 200 - p.queries : 0u) << rate;
    const Row row = MakeRow(d, gt, "slow", "", 0, "closed", spec, p);
    EXPECT_EQ(row.queries, p.queries);
    EXPECT_LT(row.recall10, 0.2);  // id 0 everywhere: wrong, but averaged over answers only
  }
}

// ---- In-process targets --------------------------------------------------------------------

TEST(Targets, FaissAndHnswFindTheTrueNeighbours) {
  const Dataset d = Small(3000, 16, 40);
  const GroundTruth gt = ComputeGroundTruth(d, 10, 1);
  testing::TempDir dir;
  std::vector<std::unique_ptr<Target>> targets;
  targets.push_back(std::make_unique<FaissTarget>(FaissParams{.index = IndexType::kFlat}));
  targets.push_back(
      std::make_unique<FaissTarget>(FaissParams{.index = IndexType::kIvfFlat, .nlist = 16}));
  targets.push_back(
      std::make_unique<FaissTarget>(FaissParams{.index = IndexType::kIvfSq8, .nlist = 16}));
  targets.push_back(std::make_unique<FaissTarget>(
      FaissParams{.index = IndexType::kIvfPq, .nlist = 16, .pq_m = 8, .refine_factor = 8}));
  targets.push_back(std::make_unique<FaissTarget>(FaissParams{
      .index = IndexType::kIvfPq, .nlist = 16, .pq_m = 8, .refine_factor = 8, .fast_scan = true}));
  targets.push_back(std::make_unique<HnswTarget>(HnswParams{.cache_dir = dir.path()}));
  targets.push_back(std::make_unique<HnswTarget>(HnswParams{.cache_dir = dir.path()}));  // cached
  for (auto& t : targets) {
    ASSERT_TRUE(t->Build(d).ok()) << t->name();
    t->SetKnob(t->knob_name() == "ef" ? 200 : 16);  // all probes: exact up to quantization
    const PointResult p = RunPoint(*t, d, {.clients = 2, .k = 10, .cpu_threads = 2});
    const Row row = MakeRow(d, gt, t->name(), t->knob_name(), 16, "closed", {.k = 10}, p);
    EXPECT_EQ(p.errors, 0u) << t->name();
    // FAISS's fast-scan quantizes its distance tables to 8 bits per query and list; on these
    // 10 tight clusters in 16 dims that costs more than a refine of 80 candidates recovers
    // (0.65 at every nprobe here), so its row checks the plumbing, not the recall.
    const double want = t->name() == "faiss:ivf_sq8"          ? 0.9
                        : t->name() == "faiss:ivf_pqfs_m8_r8" ? 0.5
                                                              : 0.99;
    EXPECT_GE(row.recall10, want) << t->name();
    ASSERT_TRUE(t->Usage().index_heap_bytes.has_value());
    // At least the vectors or their codes (16 dims x 3000 rows x 1 byte).
    EXPECT_GE(*t->Usage().index_heap_bytes, 16u * 3000) << t->name();
  }
  EXPECT_EQ(targets[3]->name(), "faiss:ivf_pq_m8_r8");
  EXPECT_EQ(targets[4]->name(), "faiss:ivf_pqfs_m8_r8");
  EXPECT_FALSE(FaissTarget({.index = IndexType::kIvfPq, .nlist = 16, .pq_m = 1, .fast_scan = true})
                   .Build(d)
                   .ok());
  EXPECT_FALSE(FaissTarget({.index = IndexType::kIvfPq, .nlist = 16, .pq_m = 5}).Build(d).ok());
  EXPECT_FALSE(FaissTarget({.index = IndexType::kIvfFlat, .nlist = 5000}).Build(d).ok());
}

TEST(ProcessUsage, ReadsThisProcess) {
  const auto busy_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  volatile uint64_t spin = 0;
  while (std::chrono::steady_clock::now() < busy_until) spin = spin + 1;
  const ProcessUsage u = ReadProcessUsage(getpid());
  EXPECT_GT(u.cpu_seconds, 0);
  EXPECT_GT(u.rss_bytes, 0u);
  EXPECT_GE(u.peak_rss_bytes, u.rss_bytes);
  EXPECT_EQ(ReadProcessUsage(-1).rss_bytes, 0u);
}

// ---- Report --------------------------------------------------------------------------------

Row Point(const std::string& target, uint32_t knob, double recall, double qps) {
  Row r{.dataset = "ds", .target = target, .knob_name = "nprobe", .knob = knob, .mode = "closed"};
  r.recall10 = recall;
  r.qps = qps;
  return r;
}

TEST(Report, BestQpsRatiosCsvAndPlots) {
  const std::vector<Row> rows = {
      Point("shoal:ivf_flat", 4, 0.91, 3000),   Point("shoal:ivf_flat", 8, 0.96, 2000),
      Point("shoal:ivf_flat", 16, 0.995, 1000), Point("faiss:ivf_flat", 8, 0.93, 1500),
      Point("faiss:ivf_flat", 16, 0.97, 800),   Point("hnsw", 40, 0.999, 4000)};
  uint32_t knob = 0;
  EXPECT_EQ(BestQps(rows, "shoal:ivf_flat", "closed-c1-k10", 0.95, &knob), 2000);
  EXPECT_EQ(knob, 8u);
  EXPECT_EQ(BestQps(rows, "faiss:ivf_flat", "closed-c1-k10", 0.99, &knob), 0);
  const std::string md = MarkdownReport(rows, {.title = "t", .command = "cmd"}, {"a.png"});
  EXPECT_THAT(md, HasSubstr("| shoal:ivf_flat | 3000 (4) | 2000 (8) | 1000 (16) |"));
  EXPECT_THAT(md, HasSubstr("**2.00x** (shoal:ivf_flat vs faiss:ivf_flat)"));  // at 0.90
  EXPECT_THAT(md, HasSubstr("**0.50x** (shoal:ivf_flat vs hnsw)"));
  EXPECT_THAT(md, HasSubstr("`a.png`"));

  testing::TempDir dir;
  {
    CsvWriter csv;
    ASSERT_TRUE(csv.Open(dir.Sub("r.csv")).ok());
    for (const Row& r : rows) csv.Append(r);
  }
  std::ifstream in(dir.Sub("r.csv"));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), rows.size() + 1);
  for (const std::string& line : lines) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 26) << line;
  }
  EXPECT_THAT(lines[1], HasSubstr("ds,shoal:ivf_flat,nprobe,4,closed,1,1,"));

  WritePlots(rows, dir.path());
  std::ifstream gp(dir.Sub("plots/plots.gp"));
  std::stringstream script;
  script << gp.rdbuf();
  EXPECT_THAT(script.str(), HasSubstr("recall_qps_ds_closed-c1-k10.png"));
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("plots/ds_closed-c1-k10_hnsw.dat")));
}

TEST(Report, QueriesPerScanIsTheHistogramsMeanOverThePointAndADashWhenAbsent) {
  PointResult p;
  p.queries = 100;
  p.before.scan_queries_sum = 50;
  p.before.scans = 40;
  p.after.scan_queries_sum = 350;
  p.after.scans = 140;  // 300 queries over 100 scans in this point
  const Dataset d = Small(200, 4, 5);
  GroundTruth gt;
  Row shared = MakeRow(d, gt, "shoal:ivf_flat", "nprobe", 8, "closed", {}, p);
  EXPECT_DOUBLE_EQ(shared.queries_per_scan, 3.0);
  p.before.scans.reset();  // a server without the metric
  Row unknown =
      MakeRow(d, gt, "shoal:ivf_flat@search.share_scans=false", "nprobe", 8, "closed", {}, p);
  EXPECT_TRUE(std::isnan(unknown.queries_per_scan));
  const std::string md = MarkdownReport({shared, unknown}, {.title = "t"}, {});
  EXPECT_THAT(md, HasSubstr(" | 3.00 |  | 0 |\n"));  // allocs/q: empty, not counted
  EXPECT_THAT(md, HasSubstr(" | - |  | 0 |\n"));
}

TEST(Report, AllocationsPerQueryAreShoaldsCounterOverThePoint) {
  PointResult p;
  p.queries = 200;
  p.before.heap_allocations = 1000;
  p.after.heap_allocations = 7000;
  const Dataset d = Small(200, 4, 5);
  GroundTruth gt;
  Row row = MakeRow(d, gt, "shoal:ivf_pq", "nprobe", 8, "batch", {}, p);
  EXPECT_DOUBLE_EQ(row.allocs_per_query, 30.0);
  EXPECT_THAT(MarkdownReport({row}, {.title = "t"}, {}),
              HasSubstr(" | - | 30 | 0 |\n"));  // q/scan "-", allocs/q 30
  p.after.heap_allocations.reset();             // a server that does not count them
  EXPECT_TRUE(
      std::isnan(MakeRow(d, gt, "shoal:ivf_pq", "nprobe", 8, "batch", {}, p).allocs_per_query));
}

// ---- Shoal target: metrics, overrides --------------------------------------------------------

TEST(Prometheus, ReadsUnlabelledSamplesAndHistogramSumAndCount) {
  const std::string text =
      "# HELP shoal_search_queries_per_scan Queries scored by one partition scan\n"
      "# TYPE shoal_search_queries_per_scan histogram\n"
      "shoal_search_queries_per_scan_bucket{le=\"1\"} 3\n"
      "shoal_search_queries_per_scan_sum 1234.5\n"
      "shoal_search_queries_per_scan_count 321 1700000000000\n"
      "shoal_io_read_bytes_total{kind=\"raw\"} 9\n"
      "shoal_io_read_bytes_total 4096\n"
      "shoal_cache_hits_total_x 1\n";
  EXPECT_EQ(PrometheusSample(text, "shoal_search_queries_per_scan_sum"), 1234.5);
  EXPECT_EQ(PrometheusSample(text, "shoal_search_queries_per_scan_count"), 321);
  EXPECT_EQ(PrometheusSample(text, "shoal_io_read_bytes_total"), 4096);
  EXPECT_EQ(PrometheusSample(text, "shoal_search_queries_per_scan"), std::nullopt);
  EXPECT_EQ(PrometheusSample(text, "shoal_cache_hits_total"), std::nullopt);
  EXPECT_EQ(PrometheusSample("shoal_x junk\n", "shoal_x"), std::nullopt);
}

TEST(Prometheus, YamlLeafKeysFlattenPrintConfigsSections) {
  const std::set<std::string> keys = YamlLeafKeys(
      "# shoald effective config\n"
      "server:\n"
      "  grpc_addr: \"127.0.0.1:7700\"  # gRPC listen address. Default: x\n"
      "search:\n"
      "  share_scans: true  # comment: with a colon\n"
      "  nested:\n"
      "    deep: 1\n"
      "  max_inflight: 256\n"
      "log:\n"
      "  level: \"info\"\n");
  EXPECT_EQ(keys,
            (std::set<std::string>{"server.grpc_addr", "search.share_scans", "search.nested.deep",
                                   "search.max_inflight", "log.level"}));
}

TEST(ShoalTargetSpec, SplitsOverridesOffTheTargetName) {
  auto plain = SplitTargetOverrides("shoal:ivf_flat");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->first, "shoal:ivf_flat");
  EXPECT_TRUE(plain->second.empty());

  auto split = SplitTargetOverrides("shoal:ivf_pq4@search.share_scans=false@search.coalesce_us=0");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->first, "shoal:ivf_pq4");
  ASSERT_EQ(split->second.size(), 2u);
  EXPECT_EQ(split->second[0].key, "search.share_scans");
  EXPECT_EQ(split->second[0].value, "false");
  EXPECT_EQ(split->second[1].key, "search.coalesce_us");
  EXPECT_EQ(split->second[1].value, "0");
  EXPECT_TRUE(SplitTargetOverrides("shoal:flat@log.level=").ok());  // an empty value is a value

  for (const char* bad : {"shoal:flat@share_scans", "shoal:flat@=1", "shoal:flat@Search.x=1",
                          "shoal:flat@search..x=1", "shoal:flat@.x=1", "shoal:flat@x y=1"}) {
    EXPECT_EQ(SplitTargetOverrides(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ShoalTargetSpec, OverridesBecomeNestedQuotedYaml) {
  EXPECT_EQ(OverridesYaml({{"search.share_scans", "false"},
                           {"io.direct", "0"},
                           {"search.coalesce_us", "50"},
                           {"log.level", "say \"hi\" \\ bye"}}),
            "# shoal-bench config overrides\n"
            "search:\n"
            "  share_scans: \"false\"\n"
            "  coalesce_us: \"50\"\n"
            "io:\n"
            "  direct: \"0\"\n"
            "log:\n"
            "  level: \"say \\\"hi\\\" \\\\ bye\"\n");
}

TEST(ShoalTargetSpec, AKeyTheServerDoesNotPrintIsRefusedBeforeItStarts) {
  testing::TempDir dir;
  // A stand-in for shoald: its --print-config knows search.share_scans only.
  const std::string fake = dir.Sub("fake-shoald");
  std::ofstream(fake) << "#!/bin/sh\nprintf 'search:\\n  share_scans: true  # x\\n'\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  const Dataset d = Small(200, 4, 5);
  ShoalTarget target(
      {.shoald_binary = fake,
       .data_root = dir.Sub("data"),
       .config_overrides = {{"search.share_scans", "false"}, {"search.coalesce_us", "0"}}});
  EXPECT_EQ(target.name(), "shoal:ivf_flat@search.share_scans=false@search.coalesce_us=0");
  const absl::Status s = target.Build(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("has no setting search.coalesce_us"));

  ShoalTarget external(
      {.config_overrides = {{"search.share_scans", "false"}}, .external_addr = "127.0.0.1:1"});
  EXPECT_THAT(std::string(external.Build(d).message()), HasSubstr("harness's own shoald"));
}

}  // namespace
}  // namespace shoal::bench::harness_test
