// The partition cache charges what it really holds: partitions of odd sizes, read into
// power-of-two or coalesced I/O buffers, are kept as exact (4 KiB-rounded) copies, so the
// cache's bytes gauge equals the bytes of the buffers alive outside the I/O pool.
#include <future>
#include <random>

#include "core/exec/tbb_executor.h"
#include "gtest/gtest.h"
#include "storage/collection/segment.h"
#include "storage/collection/segment_builder.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::cache_accounting_test {
namespace {

constexpr uint32_t kDim = 5;  // 28-byte rows: no partition is a power of two

class CacheAccountingTest : public ::testing::Test {
 protected:
  // A segment of `nlist` partitions of odd sizes (exact slices of 3000..4000 rows each).
  std::shared_ptr<Segment> Write(const std::string& name, uint32_t nlist, IoScheduler* io,
                                 PartitionCache* cache) {
    auto b = SegmentBuilder::Create(DefaultFileSystem(), dir_.Sub("tmp"), kDim, 1 << 20);
    EXPECT_TRUE(b.ok());
    std::vector<float> v(kDim, 0.5f);
    for (uint64_t i = 0; i < uint64_t(nlist) * 3333; ++i)
      EXPECT_TRUE((*b)->Add(i, v.data(), "").ok());
    EXPECT_TRUE((*b)->FinishInput().ok());
    const absl::Status written = (*b)->Write(
        cpu_, core::MakeExactModel(kDim, core::Metric::kL2, nlist), dir_.Sub(name), nullptr);
    EXPECT_TRUE(written.ok()) << written;
    auto seg = Segment::Open(DefaultFileSystem(), dir_.Sub(name), 1, io, cache);
    EXPECT_TRUE(seg.ok()) << seg.status();
    return seg.ok() ? *seg : nullptr;
  }

  static uint64_t HeldOutsideThePool() {
    return AlignedBuffer::live_bytes() - BufferPool::idle_bytes_all();
  }

  testing::TempDir dir_;
  core::TbbExecutor cpu_{1};
};

TEST_F(CacheAccountingTest, TheCacheChargesTheBytesItsEntriesReallyHold) {
  for (bool coalesce : {false, true}) {
    SCOPED_TRACE(coalesce ? "coalesced reads" : "one read per partition");
    IoSchedulerOptions io;
    io.backend = IoBackendKind::kPread;
    io.direct_io = false;
    if (!coalesce) io.limits.max_request_bytes = 4096;
    auto scheduler = IoScheduler::Create(io);
    ASSERT_TRUE(scheduler.ok());
    PartitionCache cache(64 << 20);
    const uint64_t before = HeldOutsideThePool();
    auto seg = Write(coalesce ? "seg-coalesced" : "seg", 24, scheduler->get(), &cache);
    ASSERT_NE(seg, nullptr);
    // Every partition at once, so that neighbours can be merged into one read.
    std::vector<std::future<absl::StatusOr<core::PartitionData>>> fetched;
    std::vector<std::shared_ptr<std::promise<absl::StatusOr<core::PartitionData>>>> promises;
    for (uint32_t p = 0; p < seg->meta().nlist(); ++p) {
      auto promise = std::make_shared<std::promise<absl::StatusOr<core::PartitionData>>>();
      fetched.push_back(promise->get_future());
      core::PartitionFetch f;
      f.partition = p;
      f.query_seq = 1;
      f.rank = p;
      seg->Fetch(f, [promise](absl::StatusOr<core::PartitionData> d) {
        promise->set_value(std::move(d));
      });
    }
    uint64_t lengths = 0;
    for (auto& f : fetched) {
      auto d = f.get();
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_FALSE(d->cached);
    }
    for (const PartitionExtent& e : seg->meta().partitions) lengths += e.length;
    fetched.clear();  // unpinned; still cached
    // The I/O thread may still hold the last read's buffer while it unwinds: stop it.
    const size_t nlist = seg->meta().nlist();
    seg.reset();
    scheduler->reset();
    const CacheStats stats = cache.stats();
    EXPECT_EQ(stats.pinned_bytes, 0u);
    EXPECT_GE(stats.used_bytes, lengths);
    EXPECT_LT(stats.used_bytes, lengths + nlist * 4096);
    EXPECT_EQ(HeldOutsideThePool() - before, stats.used_bytes);
  }
}

}  // namespace
}  // namespace shoal::storage::cache_accounting_test
