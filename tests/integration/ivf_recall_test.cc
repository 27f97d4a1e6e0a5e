// IVF recall on real data through the real server: Fashion-MNIST (dataset-fashion-mnist),
// 60000 base vectors, the first 1000 test images as queries, ground truth computed here with
// FAISS's exact flat index. Then the same answers after a restart, and the deadlock-freedom
// end-to-end check: shoald pinned to one CPU (taskset), one arena thread, a 1 MiB cache, both
// I/O backends, 64 concurrent clients x 50 single-query requests.
//
// Label "recall": run by the release test pass only (the sanitizer passes would spend minutes
// in FAISS training for no new coverage).
#include <algorithm>
#include <thread>

#include "client/client.h"
#include "dataset/vector_reader.h"
#include "faiss/IndexFlat.h"
#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::ivf_recall_test {
namespace {

constexpr char kTrain[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr char kTest[] = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
constexpr size_t kQueries = 1000, kK = 10;

struct FashionMnist {
  uint32_t dim = 0;
  std::vector<float> base, queries;
  std::vector<float> kth;  // per query: the true 10th-nearest squared distance
  size_t n() const { return base.size() / dim; }
  std::vector<float> Query(size_t q) const {
    return {queries.begin() + long(q * dim), queries.begin() + long((q + 1) * dim)};
  }
};

const FashionMnist& Data() {
  static const FashionMnist* data = [] {
    auto* d = new FashionMnist;
    auto base = dataset::ReadAllVectors(kTrain, 60000, &d->dim);
    auto queries = dataset::ReadAllVectors(kTest, kQueries, &d->dim);
    if (!base.ok() || !queries.ok()) return d;
    d->base = *std::move(base);
    d->queries = *std::move(queries);
    faiss::IndexFlatL2 exact(int(d->dim));
    exact.add(faiss::Index::idx_t(d->n()), d->base.data());
    std::vector<float> dist(kQueries * kK);
    std::vector<faiss::Index::idx_t> ids(kQueries * kK);
    exact.search(kQueries, d->queries.data(), kK, dist.data(), ids.data());
    for (size_t q = 0; q < kQueries; ++q) d->kth.push_back(dist[q * kK + kK - 1]);
    return d;
  }();
  return *data;
}

// Tie-aware recall@10: a hit counts when its true distance is within the true 10th distance.
double Recall(const FashionMnist& d, const std::vector<SearchResult>& results) {
  size_t found = 0;
  for (size_t q = 0; q < results.size(); ++q) {
    for (const Hit& hit : results[q].hits) {
      if (hit.id >= d.n()) {
        ADD_FAILURE() << "query " << q << ": id " << hit.id << " does not exist";
        return 0;
      }
      const float* v = d.base.data() + hit.id * d.dim;
      const float* x = d.queries.data() + q * d.dim;
      double dist = 0;
      for (size_t j = 0; j < d.dim; ++j) dist += double(x[j] - v[j]) * double(x[j] - v[j]);
      if (dist <= double(d.kth[q]) * (1 + 1e-5)) ++found;
    }
  }
  return double(found) / double(results.size() * kK);
}

void Load(Client& client, const std::string& name, const FashionMnist& d) {
  auto writer = client.OpenUpsertStream(name);
  ASSERT_TRUE(writer.ok());
  for (size_t first = 0; first < d.n(); first += 1000) {
    std::vector<Point> points;
    for (size_t i = first; i < std::min(d.n(), first + 1000); ++i) {
      points.push_back(
          {i, {d.base.begin() + long(i * d.dim), d.base.begin() + long((i + 1) * d.dim)}, {}});
    }
    ASSERT_TRUE((*writer)->Write(points).ok());
  }
  ASSERT_EQ(*(*writer)->Finish(), d.n());
}

std::vector<SearchResult> SearchAll(Client& client, const std::string& name, const FashionMnist& d,
                                    SearchOptions options) {
  // Batches of 250 queries: refine reads k * refine raw vectors per query into one buffer
  // (I-9 prices it), and 1000 queries at refine 10 would be 300 MiB, over
  // limits.max_request_bytes.
  std::vector<SearchResult> all;
  for (size_t q0 = 0; q0 < kQueries; q0 += 250) {
    std::vector<std::vector<float>> batch;
    for (size_t q = q0; q < std::min(kQueries, q0 + 250); ++q) batch.push_back(d.Query(q));
    auto results = client.SearchBatch(name, batch, options);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok()) return {};
    all.insert(all.end(), results->begin(), results->end());
  }
  return all;
}

std::vector<uint64_t> Ids(const std::vector<SearchResult>& results) {
  std::vector<uint64_t> ids;
  for (const SearchResult& r : results) {
    for (const Hit& h : r.hits) ids.push_back(h.id);
  }
  return ids;
}

struct Case {
  const char* name;
  IndexType type;
  uint32_t pq_m;
  uint32_t refine;
  double min_recall;
};
constexpr Case kCases[] = {{"ivf_flat", IndexType::kIvfFlat, 0, 0, 0.98},
                           {"ivf_sq8", IndexType::kIvfSq8, 0, 4, 0.97},
                           {"ivf_pq", IndexType::kIvfPq, 56, 10, 0.95}};

TEST(IvfRecall, FashionMnistTargetsHoldAndSurviveRestart) {
  const FashionMnist& d = Data();
  ASSERT_EQ(d.n(), 60000u) << "install dataset-fashion-mnist (make test does)";
  testing::TempDir dir;
  std::vector<std::vector<uint64_t>> before;
  {
    auto server = testing::ShoaldProcess::Start(dir.Sub("data"), {"--cpu-threads", "2"});
    ASSERT_NE(server, nullptr);
    Client client(server->addr());
    for (const Case& c : kCases) {
      ASSERT_TRUE(
          client.CreateCollection({c.name, d.dim, Metric::kL2, {c.type, 1024, c.pq_m}}).ok());
      Load(client, c.name, d);
      auto built = client.BuildIndex(c.name);
      ASSERT_TRUE(built.ok()) << built.status();
      std::printf("%s: %s\n", c.name, built->c_str());
      const auto results =
          SearchAll(client, c.name, d, {.k = kK, .nprobe = 16, .refine_factor = c.refine});
      const double recall = Recall(d, results);
      std::printf("%s nprobe 16 refine %u: recall@10 %.4f\n", c.name, c.refine, recall);
      EXPECT_GE(recall, c.min_recall) << c.name;
      before.push_back(Ids(results));
    }
    EXPECT_EQ(server->Terminate(), 0);
  }
  auto server = testing::ShoaldProcess::Start(dir.Sub("data"), {"--cpu-threads", "2"});
  ASSERT_NE(server, nullptr);
  Client client(server->addr());
  for (size_t i = 0; i < std::size(kCases); ++i) {
    const Case& c = kCases[i];
    EXPECT_EQ(Ids(SearchAll(client, c.name, d, {.k = kK, .nprobe = 16, .refine_factor = c.refine})),
              before[i])
        << c.name << ": results changed across a restart";
  }
  EXPECT_EQ(server->Terminate(), 0);

  // I-3 end to end: one CPU, one arena thread, a cache far smaller than one query's probes.
  for (const char* backend : {"uring", "pread"}) {
    auto pinned = testing::ShoaldProcess::Start(
        dir.Sub("data"),
        {"--cpu-threads", "1", "--cache-bytes", "1048576", "--io-backend", backend},
        {"taskset", "-c", "0"});
    ASSERT_NE(pinned, nullptr) << backend;
    Client pinned_client(pinned->addr());
    const size_t clients = 64, per_client = 50;
    std::vector<std::vector<SearchResult>> got(clients);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < clients; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = 0; i < per_client; ++i) {
          const size_t q = (t * per_client + i) % kQueries;
          auto r = pinned_client.Search("ivf_sq8", d.Query(q),
                                        {.k = kK, .nprobe = 16, .refine_factor = 4});
          got[t].push_back(r.ok() ? *r : SearchResult{});
        }
      });
    }
    for (auto& th : threads) th.join();
    // Every request answered, with the unpinned run's answer.
    for (size_t t = 0; t < clients; ++t) {
      for (size_t i = 0; i < per_client; ++i) {
        const size_t q = (t * per_client + i) % kQueries;
        std::vector<uint64_t> ids;
        for (const Hit& h : got[t][i].hits) ids.push_back(h.id);
        const std::vector<uint64_t> want(before[1].begin() + long(q * kK),
                                         before[1].begin() + long((q + 1) * kK));
        ASSERT_EQ(ids, want) << backend << " client " << t << " request " << i;
      }
    }
    EXPECT_EQ(pinned->Terminate(), 0) << backend;
  }
}

}  // namespace
}  // namespace shoal::ivf_recall_test
