#include "storage/collection/memtable.h"

#include <thread>

#include "gtest/gtest.h"

namespace shoal::storage::memtable_test {
namespace {

PointRecord P(uint64_t id, float v, uint32_t dim = 4) {
  return {id, std::vector<float>(dim, v), ""};
}

size_t LiveRows(const core::FlatView& view) {
  size_t n = 0;
  for (const auto& b : view.blocks) {
    for (size_t i = 0; i < b.rows; ++i) n += b.dead[i].load() ? 0 : 1;
  }
  return n;
}

TEST(Memtable, UpsertGetDeleteAndOverwrite) {
  Memtable m(4);
  m.Upsert(P(1, 1.0f));
  m.Upsert({2, {2, 2, 2, 2}, "attrs"});
  EXPECT_EQ(m.live_count(), 2u);
  auto got = m.Get(2, true);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->vector, std::vector<float>(4, 2.0f));
  EXPECT_EQ(got->attributes, "attrs");
  EXPECT_TRUE(m.Get(1, false)->vector.empty());

  m.Upsert(P(1, 9.0f));  // overwrite: the old row dies
  EXPECT_EQ(m.live_count(), 2u);
  EXPECT_EQ(m.Get(1, true)->vector[0], 9.0f);
  EXPECT_EQ(LiveRows(m.Snapshot()), 2u);
  EXPECT_EQ(m.Snapshot().rows(), 3u);
  EXPECT_EQ(m.rows(), 3u);  // the dead row too

  EXPECT_TRUE(m.Delete(1));
  EXPECT_FALSE(m.Delete(1));
  EXPECT_FALSE(m.Get(1, false).has_value());
  EXPECT_EQ(m.live_count(), 1u);
  EXPECT_EQ(LiveRows(m.Snapshot()), 1u);
}

TEST(Memtable, SnapshotSpansChunksAndIgnoresLaterRows) {
  Memtable m(1024);  // 4 KiB rows: 1024 rows per 4 MiB chunk
  for (uint64_t i = 0; i < 2500; ++i) m.Upsert(P(i, float(i), 1024));
  core::FlatView view = m.Snapshot();
  EXPECT_EQ(view.blocks.size(), 3u);
  EXPECT_EQ(view.rows(), 2500u);
  EXPECT_EQ(view.blocks[2].ids[0], 2048u);
  EXPECT_EQ(view.blocks[2].vectors[0], 2048.0f);
  m.Upsert(P(9999, 1, 1024));
  EXPECT_EQ(view.rows(), 2500u);
  EXPECT_EQ(m.Snapshot().rows(), 2501u);
  EXPECT_GT(m.memory_bytes(), 2500u * 4096u);
}

// One writer and several readers at once (run under TSan in CI).
TEST(Memtable, ReadersRunConcurrentlyWithTheWriter) {
  Memtable m(8);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        core::FlatView view = m.Snapshot();
        double sum = 0;
        for (const auto& b : view.blocks) {
          for (size_t i = 0; i < b.rows; ++i) sum += b.vectors[i * 8] + (b.dead[i].load() ? 1 : 0);
        }
        (void)m.Get(5, true);
        ASSERT_GE(sum, 0);
      }
    });
  }
  for (uint64_t i = 0; i < 20000; ++i) {
    m.Upsert(P(i % 1000, float(i), 8));
    if (i % 7 == 0) m.Delete(i % 1000);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_LE(m.live_count(), 1000u);
}

}  // namespace
}  // namespace shoal::storage::memtable_test
