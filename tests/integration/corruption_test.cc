// Integration: bit flips in one collection's files while shoald is down. shoald must still
// start; the damaged collection is reported (and droppable), the others keep answering, and
// a damaged partition fails only the queries that probe it.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/format/segment_format.h"
#include "tests/fakes/temp_dir.h"
#include "tests/integration/shoald_process.h"

namespace shoal::corruption_test {
namespace {

using ::testing::HasSubstr;
using testing::ShoaldProcess;

constexpr uint32_t kDim = 8;
constexpr uint64_t kPoints = 400;

// Four blobs with deterministic noise: every IVF partition gets rows.
std::vector<Point> Blobs() {
  std::vector<Point> points;
  uint64_t state = 12345;
  auto noise = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float((state >> 33) % 2001) / 1000.0f - 1.0f;
  };
  for (uint64_t i = 0; i < kPoints; ++i) {
    Point p;
    p.id = i + 1;
    for (uint32_t j = 0; j < kDim; ++j) p.vector.push_back((j == i % 4 ? 20.0f : 0.0f) + noise());
    points.push_back(std::move(p));
  }
  return points;
}

std::string CollectionDir(const std::string& data, const std::string& name) {
  return data + "/collections/" + name;
}

// The only segment directory of a freshly built collection.
std::string SegmentDir(const std::string& data, const std::string& name) {
  for (const auto& entry : std::filesystem::directory_iterator(CollectionDir(data, name))) {
    if (entry.path().filename().string().rfind("seg-", 0) == 0) return entry.path().string();
  }
  ADD_FAILURE() << name << " has no segment";
  return "";
}

void FlipByteAt(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(std::streamoff(offset));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x04;
  f.seekp(std::streamoff(offset));
  f.write(&c, 1);
  ASSERT_TRUE(f) << path << " at " << offset;
}

void FlipMiddleByte(const std::string& path) {
  FlipByteAt(path, std::filesystem::file_size(path) / 2);
}

storage::IvfMeta ReadMeta(const std::string& segment_dir) {
  auto meta = storage::DecodeIvfMeta(testing::ReadWholeFile(segment_dir + "/ivf.meta"));
  EXPECT_TRUE(meta.ok()) << meta.status();
  return meta.ok() ? *meta : storage::IvfMeta{};
}

std::vector<uint64_t> PartitionIds(const std::string& segment_dir,
                                   const storage::PartitionExtent& e) {
  std::vector<uint64_t> ids(e.count);
  std::ifstream f(segment_dir + "/lists.dat", std::ios::binary);
  f.seekg(std::streamoff(e.offset));
  f.read(reinterpret_cast<char*>(ids.data()), std::streamsize(e.count * 8));
  return ids;
}

std::vector<float> Centroid(const storage::IvfMeta& meta, size_t p) {
  const auto& c = meta.model.centroids;
  return std::vector<float>(c.begin() + p * kDim, c.begin() + (p + 1) * kDim);
}

// The exact k nearest (L2) among `ids`, as ids in ascending order.
std::vector<uint64_t> ExactAmong(const std::vector<Point>& points, const std::vector<uint64_t>& ids,
                                 const std::vector<float>& q, size_t k) {
  std::vector<std::pair<float, uint64_t>> scored;
  for (uint64_t id : ids) {
    float d = 0;
    for (uint32_t j = 0; j < kDim; ++j) {
      const float x = points[id - 1].vector[j] - q[j];
      d += x * x;
    }
    scored.push_back({d, id});
  }
  std::sort(scored.begin(), scored.end());
  std::vector<uint64_t> out;
  for (size_t i = 0; i < std::min(k, scored.size()); ++i) out.push_back(scored[i].second);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> SortedIds(const SearchResult& r) {
  std::vector<uint64_t> ids;
  for (const Hit& h : r.hits) ids.push_back(h.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

void ExpectDataLoss(const absl::Status& s, const std::string& file, const char* rpc) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << rpc << ": " << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(file)) << rpc;
}

// Every data RPC on a broken collection answers DATA_LOSS naming the damaged file.
void ExpectEveryDataRpcFails(Client& client, const std::string& name, const std::string& file) {
  const std::vector<float> q(kDim, 1.0f);
  ExpectDataLoss(client.Upsert(name, {{1, q, {}}}).status(), file, "Upsert");
  ExpectDataLoss(client.Delete(name, {1}).status(), file, "Delete");
  ExpectDataLoss(client.Get(name, {1}, true).status(), file, "Get");
  ExpectDataLoss(client.Search(name, q).status(), file, "Search");
  ExpectDataLoss(client.BuildIndex(name).status(), file, "BuildIndex");
  ExpectDataLoss(client.Flush(name).status(), file, "Flush");
  auto stream = client.OpenUpsertStream(name);
  if (stream.ok()) {
    (void)(*stream)->Write({{1, q, {}}});
    ExpectDataLoss((*stream)->Finish().status(), file, "UpsertStream");
  } else {
    ExpectDataLoss(stream.status(), file, "UpsertStream");
  }
}

TEST(Corruption, OneDamagedCollectionNeitherStopsShoaldNorTheOthers) {
  testing::TempDir dir;
  const std::string data = dir.Sub("data");
  const std::vector<Point> points = Blobs();
  const std::vector<std::string> names = {"manifest_bad", "meta_bad", "lists_bad", "healthy"};
  std::vector<float> probe(kDim, 0.0f);
  probe[1] = 20.0f;
  std::vector<uint64_t> healthy_before;
  {
    auto server = ShoaldProcess::Start(data, {"--cpu-threads", "2"});
    ASSERT_NE(server, nullptr);
    Client client(server->addr());
    for (const std::string& name : names) {
      ASSERT_TRUE(
          client.CreateCollection({name, kDim, Metric::kL2, {IndexType::kIvfFlat, 4}}).ok());
      ASSERT_EQ(*client.Upsert(name, points), kPoints);
      auto built = client.BuildIndex(name);
      ASSERT_TRUE(built.ok()) << built.status();
    }
    auto before = client.Search("healthy", probe, {.k = 10, .nprobe = 4});
    ASSERT_TRUE(before.ok()) << before.status();
    healthy_before = SortedIds(*before);
    ASSERT_EQ(server->Terminate(), 0);
  }

  // The manifest CURRENT names.
  std::string current = testing::ReadWholeFile(CollectionDir(data, "manifest_bad") + "/CURRENT");
  current.erase(current.find_last_not_of("\n") + 1);
  const std::string manifest = CollectionDir(data, "manifest_bad") + "/" + current;
  FlipMiddleByte(manifest);
  const std::string meta_file = SegmentDir(data, "meta_bad") + "/ivf.meta";
  FlipMiddleByte(meta_file);
  // One partition of lists_bad: flip its first code byte (after the ids).
  const std::string segment = SegmentDir(data, "lists_bad");
  const storage::IvfMeta meta = ReadMeta(segment);
  ASSERT_EQ(meta.nlist(), 4u);
  std::vector<size_t> nonempty;
  for (size_t p = 0; p < meta.nlist(); ++p) {
    if (meta.partitions[p].count > 0) nonempty.push_back(p);
  }
  ASSERT_GE(nonempty.size(), 2u);
  const size_t bad = nonempty[0], good = nonempty[1];
  const storage::PartitionExtent& hit = meta.partitions[bad];
  FlipByteAt(segment + "/lists.dat", hit.offset + hit.count * 8);

  auto server = ShoaldProcess::Start(data, {"--cpu-threads", "2"});
  ASSERT_NE(server, nullptr) << "shoald must start with one damaged collection";
  Client client(server->addr());

  // Listed with their state and the reason, naming the file.
  auto list = client.ListCollections();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 4u);
  std::map<std::string, CollectionInfo> infos;
  for (const CollectionInfo& info : *list) infos[info.name] = info;
  EXPECT_EQ(infos["manifest_bad"].index_state, "broken");
  EXPECT_THAT(infos["manifest_bad"].error, HasSubstr(manifest));
  EXPECT_EQ(infos["meta_bad"].index_state, "broken");
  EXPECT_THAT(infos["meta_bad"].error, HasSubstr(meta_file));
  EXPECT_EQ(infos["meta_bad"].dim, kDim);  // its manifest is intact
  EXPECT_EQ(infos["lists_bad"].index_state, "ready");
  EXPECT_EQ(infos["healthy"].index_state, "ready");
  auto described = client.DescribeCollection("meta_bad");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->index_state, "broken");
  EXPECT_THAT(described->error, HasSubstr(meta_file));

  EXPECT_EQ(*client.Health(), HealthStatus::kServing);
  EXPECT_EQ(*client.Health("manifest_bad"), HealthStatus::kNotServing);
  EXPECT_EQ(*client.Health("meta_bad"), HealthStatus::kNotServing);
  EXPECT_EQ(*client.Health("lists_bad"), HealthStatus::kServing);
  EXPECT_EQ(*client.Health("healthy"), HealthStatus::kServing);

  ExpectEveryDataRpcFails(client, "manifest_bad", manifest);
  ExpectEveryDataRpcFails(client, "meta_bad", meta_file);

  // The damaged partition fails only the queries that probe it.
  const std::vector<float> good_query = Centroid(meta, good);
  auto answered = client.Search("lists_bad", good_query, {.k = 5, .nprobe = 1});
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_EQ(SortedIds(*answered),
            ExactAmong(points, PartitionIds(segment, meta.partitions[good]), good_query, 5));
  auto refused = client.Search("lists_bad", Centroid(meta, bad), {.k = 5, .nprobe = 1});
  ExpectDataLoss(refused.status(), segment + "/lists.dat", "Search probing the bad partition");
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("partition " + std::to_string(bad)));
  // ... and the same query keeps failing (an error is never cached as data).
  EXPECT_EQ(client.Search("lists_bad", Centroid(meta, bad), {.k = 5, .nprobe = 1}).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(client.Get("lists_bad", {1, 2}).ok());

  auto healthy = client.Search("healthy", probe, {.k = 10, .nprobe = 4});
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(SortedIds(*healthy), healthy_before);

  // Dropping a broken collection removes it, files and all; its name is free again.
  for (const std::string name : {"manifest_bad", "meta_bad"}) {
    ASSERT_TRUE(client.DropCollection(name).ok()) << name;
    EXPECT_FALSE(std::filesystem::exists(CollectionDir(data, name))) << name;
    EXPECT_EQ(client.DescribeCollection(name).status().code(), absl::StatusCode::kNotFound);
  }
  EXPECT_EQ(client.ListCollections()->size(), 2u);
  ASSERT_TRUE(client.CreateCollection({"meta_bad", kDim, Metric::kL2, {IndexType::kIvfFlat}}).ok());
  EXPECT_EQ(*client.Upsert("meta_bad", {points[0]}), 1u);
  EXPECT_EQ(server->Terminate(), 0);
}

}  // namespace
}  // namespace shoal::corruption_test
