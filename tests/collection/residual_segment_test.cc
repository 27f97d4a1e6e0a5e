// Segments on disk across the residual-codes format change (segment_format.h, version 3): a
// build writes version 3 residual segments that answer the same after a restart; a version 2
// segment (raw-vector PQ codes, as shoald wrote before) is still searched correctly, and
// flushes, merges and a rebuild over it keep working (the rebuild moves it to residual codes).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>

#include "core/exec/tbb_executor.h"
#include "core/index/ivf_search.h"
#include "gtest/gtest.h"
#include "storage/collection/collection.h"
#include "storage/collection/segment_builder.h"
#include "storage/format/coding.h"
#include "storage/format/crc32c.h"
#include "storage/format/segment_format.h"
#include "tests/fakes/collection_calls.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::residual_segment_test {
namespace {

using testing::UpsertAndWait;

constexpr uint32_t kDim = 16, kClusters = 12, kNlist = 16, kPqM = 8;
constexpr size_t kRows = 3000, kQueries = 20;

// Tight clusters: where raw codes and residual codes differ.
std::vector<PointRecord> Points(uint64_t first, uint64_t n) {
  std::mt19937 centres_rng(99);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> centres(kClusters * kDim);
  for (float& c : centres) c = u(centres_rng);
  std::mt19937 rng{uint32_t(first + 1)};
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<PointRecord> points;
  for (uint64_t id = first; id < first + n; ++id) {
    PointRecord p{id, std::vector<float>(kDim), ""};
    for (uint32_t d = 0; d < kDim; ++d)
      p.vector[d] = centres[(id % kClusters) * kDim + d] + noise(rng);
    points.push_back(std::move(p));
  }
  return points;
}

class ResidualSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto scheduler = testing::BufferedPreadScheduler();
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    io_ = *std::move(scheduler);
    for (const PointRecord& p : Points(1000000, kQueries)) {
      queries_.insert(queries_.end(), p.vector.begin(), p.vector.end());
    }
  }

  CollectionOptions Options() {
    CollectionOptions options;
    options.scheduler = io_.get();
    options.cache = &cache_;
    return options;
  }

  std::unique_ptr<Collection> Create() {
    CollectionManifest m;
    m.name = "c";
    m.dim = kDim;
    m.index.type = core::IndexType::kIvfPq;
    m.index.nlist = kNlist;
    m.index.pq_m = kPqM;
    auto c = Collection::Create(DefaultFileSystem(), path_, m, Options());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  std::unique_ptr<Collection> Open() {
    auto c = Collection::Open(DefaultFileSystem(), path_, Options());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  std::vector<core::QueryResult> Search(const Collection& c, uint32_t refine) {
    core::IvfSearchRequest r;
    SearchSnapshot snap = c.SearchView();
    r.segments = std::move(snap.segments);
    r.memtable = std::move(snap.memtable);
    r.queries = queries_;
    r.num_queries = kQueries;
    r.dim = kDim;
    r.k = 10;
    r.nprobe = 4;
    r.refine_factor = refine;
    std::promise<absl::StatusOr<std::vector<core::QueryResult>>> promise;
    core::IvfSearch(cpu_, std::move(r), [&](absl::StatusOr<std::vector<core::QueryResult>> res) {
      promise.set_value(std::move(res));
    });
    auto got = promise.get_future().get();
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? *got : std::vector<core::QueryResult>{};
  }

  // Upserts Points(first, n), remembered for Recall.
  absl::Status Add(Collection& c, uint64_t first, uint64_t n) {
    std::vector<PointRecord> points = Points(first, n);
    live_.insert(live_.end(), points.begin(), points.end());
    return UpsertAndWait(c, std::move(points));
  }

  // Recall@10 against brute force over every row added.
  double Recall(const std::vector<core::QueryResult>& results) {
    const std::vector<PointRecord>& live = live_;
    size_t hits = 0;
    for (size_t q = 0; q < kQueries; ++q) {
      std::vector<std::pair<float, uint64_t>> d;
      for (const PointRecord& p : live) {
        float s = 0;
        for (uint32_t j = 0; j < kDim; ++j) {
          const float x = p.vector[j] - queries_[q * kDim + j];
          s += x * x;
        }
        d.push_back({s, p.id});
      }
      std::partial_sort(d.begin(), d.begin() + 10, d.end());
      for (const core::Neighbor& n : results[q].neighbors) {
        hits += std::count_if(d.begin(), d.begin() + 10, [&](auto& e) { return e.second == n.id; });
      }
    }
    return double(hits) / double(kQueries * 10);
  }

  std::vector<std::string> SegmentDirs() {
    std::vector<std::string> dirs;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      if (e.path().filename().string().rfind("seg-", 0) == 0) dirs.push_back(e.path().string());
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
  }

  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  static uint32_t MetaVersion(const std::string& seg_dir) {
    return DecodeFixed32(Slurp(seg_dir + "/ivf.meta").data() + kIvfMetaMagic.size());
  }

  // Rewrites `seg_dir` as the version 2 segment shoald wrote before residual codes: the same
  // rows, PQ codes of the raw vectors, ivf.meta version 2.
  void RewriteAsVersionTwo(const std::string& seg_dir, uint64_t rows) {
    auto b = SegmentBuilder::Create(DefaultFileSystem(), dir_.Sub("spill"), kDim, 64 << 20);
    ASSERT_TRUE(b.ok()) << b.status();
    for (const PointRecord& p : Points(0, rows))
      ASSERT_TRUE((*b)->Add(p.id, p.vector.data(), "").ok());
    ASSERT_TRUE((*b)->FinishInput().ok());
    auto sample = (*b)->Sample(rows, 1);
    ASSERT_TRUE(sample.ok());
    core::IvfTrainOptions o;
    o.nlist = kNlist;
    o.encoding = core::VectorEncoding::kPq;
    o.pq_m = kPqM;
    o.residual = false;
    auto model = core::TrainIvfModel(sample->data(), rows, kDim, core::Metric::kL2, o);
    ASSERT_TRUE(model.ok()) << model.status();
    std::filesystem::remove_all(seg_dir);
    ASSERT_TRUE((*b)->Write(cpu_, *model, seg_dir, nullptr).ok());
    std::string meta = Slurp(seg_dir + "/ivf.meta");
    meta.resize(meta.size() - 4);
    std::string v2;
    PutFixed32(&v2, 2);
    meta.replace(kIvfMetaMagic.size(), 4, v2);
    PutFixed32(&meta, MaskCrc(Crc32c(meta)));
    std::ofstream(seg_dir + "/ivf.meta", std::ios::binary | std::ios::trunc) << meta;
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.Sub("c");
  std::unique_ptr<IoScheduler> io_;
  PartitionCache cache_{64 << 20};
  core::TbbExecutor cpu_{2};
  std::vector<float> queries_;
  std::vector<PointRecord> live_;
};

TEST_F(ResidualSegmentTest, ABuildWritesVersionThreeResidualCodesThatSurviveARestart) {
  std::vector<core::QueryResult> before;
  {
    auto c = Create();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(Add(*c, 0, kRows).ok());
    auto built = c->BuildIndex(cpu_);
    ASSERT_TRUE(built.ok()) << built.status();
    const auto snap = c->SearchView();
    ASSERT_EQ(snap.segments.size(), 1u);
    EXPECT_TRUE(snap.segments[0].model->residual);
    before = Search(*c, 4);
    EXPECT_GE(Recall(before), 0.9);
    ASSERT_TRUE(c->Close().ok());
  }
  ASSERT_EQ(SegmentDirs().size(), 1u);
  EXPECT_EQ(MetaVersion(SegmentDirs()[0]), 3u);
  auto c = Open();
  ASSERT_NE(c, nullptr);
  const auto after = Search(*c, 4);
  ASSERT_EQ(after.size(), before.size());
  for (size_t q = 0; q < kQueries; ++q) {
    ASSERT_EQ(after[q].neighbors.size(), before[q].neighbors.size());
    for (size_t i = 0; i < after[q].neighbors.size(); ++i) {
      EXPECT_EQ(after[q].neighbors[i].id, before[q].neighbors[i].id) << q;
    }
  }
}

TEST_F(ResidualSegmentTest, AVersionTwoSegmentIsSearchedFlushedMergedAndRebuilt) {
  {
    auto c = Create();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(Add(*c, 0, kRows).ok());
    ASSERT_TRUE(c->BuildIndex(cpu_).ok());
    ASSERT_TRUE(c->Close().ok());
  }
  ASSERT_EQ(SegmentDirs().size(), 1u);
  RewriteAsVersionTwo(SegmentDirs()[0], kRows);
  ASSERT_EQ(MetaVersion(SegmentDirs()[0]), 2u);

  auto c = Open();
  ASSERT_NE(c, nullptr);
  ASSERT_FALSE(c->SearchView().segments[0].model->residual);
  // Raw codes scored as raw codes: a sound approximate order, exact after refine.
  EXPECT_GE(Recall(Search(*c, 0)), 0.3);
  EXPECT_GE(Recall(Search(*c, 10)), 0.9);

  // Flushes reuse the old model (raw codes, version 3 without the residual bit); the fifth
  // segment triggers a merge, still with that model.
  uint64_t rows = kRows;
  for (size_t i = 0; i < Collection::kMaxSegments; ++i) {
    ASSERT_TRUE(Add(*c, rows, 300).ok());
    rows += 300;
    auto flushed = c->Flush(cpu_);
    ASSERT_TRUE(flushed.ok()) << flushed.status();
  }
  auto snap = c->SearchView();
  ASSERT_EQ(snap.segments.size(), 1u) << "the flushes should have merged";
  EXPECT_FALSE(snap.segments[0].model->residual);
  EXPECT_GE(Recall(Search(*c, 10)), 0.9);

  // A rebuild trains a residual model.
  ASSERT_TRUE(c->BuildIndex(cpu_).ok());
  snap = c->SearchView();
  ASSERT_EQ(snap.segments.size(), 1u);
  EXPECT_TRUE(snap.segments[0].model->residual);
  EXPECT_GE(Recall(Search(*c, 10)), 0.9);
  ASSERT_TRUE(c->Close().ok());
  for (const std::string& d : SegmentDirs()) EXPECT_EQ(MetaVersion(d), 3u) << d;
}

}  // namespace
}  // namespace shoal::storage::residual_segment_test
