// SegmentBuilder: the streamed, budget-bounded segment write (segment_builder.h) produces the
// same segment whatever the budget, keeps every row and attribute, and slices exact segments.
#include "storage/collection/segment_builder.h"

#include <fstream>
#include <random>

#include "core/exec/tbb_executor.h"
#include "gtest/gtest.h"
#include "storage/attributes/attribute_file.h"
#include "storage/collection/segment.h"
#include "storage/format/crc32c.h"
#include "storage/format/segment_format.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::storage::segment_builder_test {
namespace {

constexpr uint32_t kDim = 32;
constexpr size_t kRows = 5000;

std::vector<float> Vectors() {
  std::mt19937 rng(7);
  std::normal_distribution<float> g;
  std::vector<float> v(kRows * kDim);
  for (float& x : v) x = g(rng);
  return v;
}

// EncodeAttributes bytes, as the server writes them (a segment decodes them at open).
std::string AttrsOf(uint64_t id) {
  return id % 3 == 0 ? EncodeAttributes({{"n", int64_t(id)}}) : "";
}

class SegmentBuilderTest : public ::testing::Test {
 protected:
  std::unique_ptr<SegmentBuilder> Fill(const std::string& tmp, uint64_t budget) {
    auto b = SegmentBuilder::Create(DefaultFileSystem(), dir_.Sub(tmp), kDim, budget);
    EXPECT_TRUE(b.ok()) << b.status();
    for (size_t i = 0; i < kRows; ++i) {
      EXPECT_TRUE((*b)->Add(1000 + i, vectors_.data() + i * kDim, AttrsOf(1000 + i)).ok());
    }
    EXPECT_TRUE((*b)->FinishInput().ok());
    return *std::move(b);
  }

  core::IvfModel Train(const SegmentBuilder& b, core::VectorEncoding encoding) {
    auto sample = b.Sample(16 * 256, 1234);
    EXPECT_TRUE(sample.ok());
    core::IvfTrainOptions options;
    options.nlist = 16;
    options.encoding = encoding;
    auto model = core::TrainIvfModel(sample->data(), sample->size() / kDim, kDim, core::Metric::kL2,
                                     options);
    EXPECT_TRUE(model.ok()) << model.status();
    return *model;
  }

  std::string File(const std::string& seg, const char* name) {
    auto s = ReadFileToString(DefaultFileSystem(), JoinPath(dir_.Sub(seg), name));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : "";
  }

  // Opens a written segment for reading (pread, buffered: the test's temp dir may be tmpfs).
  absl::StatusOr<std::shared_ptr<Segment>> OpenSegment(const std::string& name) {
    if (!io_) {
      IoSchedulerOptions io;
      io.backend = IoBackendKind::kPread;
      io.direct_io = false;
      auto scheduler = IoScheduler::Create(io);
      if (!scheduler.ok()) return scheduler.status();
      io_ = *std::move(scheduler);
    }
    return Segment::Open(DefaultFileSystem(), dir_.Sub(name), 1, io_.get(), &cache_);
  }

  testing::TempDir dir_;
  std::unique_ptr<IoScheduler> io_;
  PartitionCache cache_{1 << 20};
  const std::vector<float> vectors_ = Vectors();
  core::TbbExecutor cpu_{2};
};

TEST_F(SegmentBuilderTest, ATinyBudgetWritesTheSameSegmentAsAnUnboundedOne) {
  auto small = Fill("tmp-small", 64 << 10);
  auto large = Fill("tmp-large", 1ull << 30);
  // 64 KiB: chunks of 256 rows and write groups of 32 KiB, so dozens of scans and groups.
  EXPECT_EQ(small->plan().chunk_rows, 256u);
  EXPECT_LT(small->plan().group_bytes * 20, kRows * (8 + kDim + kDim * 4));  // SQ8 + raw
  const core::IvfModel model = Train(*large, core::VectorEncoding::kSq8);
  ASSERT_TRUE(small->Write(cpu_, model, dir_.Sub("seg-small"), nullptr).ok());
  ASSERT_TRUE(large->Write(cpu_, model, dir_.Sub("seg-large"), nullptr).ok());
  for (const char* f : {"lists.dat", "raw.dat", "attrs.dat", "ivf.meta"}) {
    EXPECT_EQ(File("seg-small", f), File("seg-large", f)) << f;
  }
  // The spill directory goes with the builder.
  small.reset();
  EXPECT_FALSE(DefaultFileSystem()->Exists(dir_.Sub("tmp-small")));
}

TEST_F(SegmentBuilderTest, TheSegmentHoldsEveryRowWithItsVectorAndAttributes) {
  auto b = Fill("tmp", 64 << 10);
  const core::IvfModel model = Train(*b, core::VectorEncoding::kFlat);
  ASSERT_TRUE(b->Write(cpu_, model, dir_.Sub("seg"), nullptr).ok());
  auto seg = OpenSegment("seg");
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*seg)->meta().num_vectors, kRows);
  size_t seen = 0;
  ASSERT_TRUE((*seg)
                  ->ForEachRow([&](uint64_t id, const float* v, const std::string& attrs) {
                    const size_t i = id - 1000;
                    ASSERT_LT(i, kRows);
                    EXPECT_EQ(0, std::memcmp(v, vectors_.data() + i * kDim, kDim * sizeof(float)))
                        << id;
                    EXPECT_EQ(attrs, AttrsOf(id));
                    ++seen;
                  })
                  .ok());
  EXPECT_EQ(seen, kRows);
  // Rows sit in the partition of their nearest centroid.
  std::vector<uint32_t> assign(kRows);
  ASSERT_TRUE(core::AssignToCentroids(model, vectors_.data(), kRows, assign.data()).ok());
  std::vector<uint64_t> counts(16);
  for (uint32_t p : assign) ++counts[p];
  for (uint32_t p = 0; p < 16; ++p) EXPECT_EQ((*seg)->meta().partitions[p].count, counts[p]);
}

class NoneDead : public core::IdFilter {
 public:
  bool IsDead(uint64_t) const override { return false; }
};

// The ids a filter selects in a segment, and each row's attributes as ReadPoint answers them.
void ExpectFilteredAndReadBack(const Segment& seg) {
  auto filter = core::filter::Filter::Parse("n < 2500");
  ASSERT_TRUE(filter.ok());
  auto selection = seg.Select(*filter, NoneDead(), {});
  EXPECT_EQ(selection->matches(), 500u);  // ids 1000..2499 that are multiples of 3
  for (uint64_t id = 1000; id < 1000 + kRows; id += 7) {
    auto p = seg.ReadPoint(id, /*include_vector=*/false);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->attributes, AttrsOf(id)) << id;
  }
}

// attrs.dat is written in row order group by group (a 64 KiB budget makes several groups);
// the open segment filters on its columns and reads each row's attributes from the file.
TEST_F(SegmentBuilderTest, TheSegmentFiltersOnItsColumnsAndReadsAttributesFromItsFile) {
  auto b = Fill("tmp", 64 << 10);
  ASSERT_TRUE(b->Write(cpu_, Train(*b, core::VectorEncoding::kSq8), dir_.Sub("seg"), nullptr).ok());
  auto seg = OpenSegment("seg");
  ASSERT_TRUE(seg.ok()) << seg.status();
  ExpectFilteredAndReadBack(**seg);
}

// Segments written before attrs.dat version 2 still open, filter and answer Get and rebuilds.
TEST_F(SegmentBuilderTest, AVersion1AttributeFileIsStillRead) {
  auto b = Fill("tmp", 64 << 10);
  ASSERT_TRUE(
      b->Write(cpu_, Train(*b, core::VectorEncoding::kFlat), dir_.Sub("seg"), nullptr).ok());
  std::string v1(kAttributeFileMagic);
  PutFixed32(&v1, 1);
  std::string entries;
  uint64_t n = 0;
  for (uint64_t id = 1000; id < 1000 + kRows; ++id) {
    if (AttrsOf(id).empty()) continue;
    PutFixed64(&entries, id);
    PutBytes(&entries, AttrsOf(id));
    ++n;
  }
  PutVarint64(&v1, n);
  v1 += entries;
  PutFixed32(&v1, MaskCrc(Crc32c(v1)));
  std::ofstream(JoinPath(dir_.Sub("seg"), "attrs.dat"), std::ios::binary | std::ios::trunc) << v1;
  auto seg = OpenSegment("seg");
  ASSERT_TRUE(seg.ok()) << seg.status();
  ExpectFilteredAndReadBack(**seg);
  size_t seen = 0;
  ASSERT_TRUE((*seg)
                  ->ForEachRow([&](uint64_t id, const float*, const std::string& attrs) {
                    EXPECT_EQ(attrs, AttrsOf(id));
                    ++seen;
                  })
                  .ok());
  EXPECT_EQ(seen, kRows);
}

// A flipped byte in a row's attributes is DATA_LOSS naming the segment when the row is read,
// not a wrong answer; a flipped byte in a column stops the open.
TEST_F(SegmentBuilderTest, ACorruptAttributeFileIsDataLossWhereItIsRead) {
  auto b = Fill("tmp", 64 << 10);
  ASSERT_TRUE(
      b->Write(cpu_, Train(*b, core::VectorEncoding::kFlat), dir_.Sub("seg"), nullptr).ok());
  const std::string path = JoinPath(dir_.Sub("seg"), "attrs.dat");
  const std::string good = File("seg", "attrs.dat");
  std::string bad = good;
  bad[kAttributeFileHeaderBytes + 1] ^= 0x08;  // inside the first row with attributes, or its CRC
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  {
    auto seg = OpenSegment("seg");
    ASSERT_TRUE(seg.ok()) << seg.status();
    absl::Status s = (*seg)->ForEachRow([](uint64_t, const float*, const std::string&) {});
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find(dir_.Sub("seg")), absl::string_view::npos) << s;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  auto file = DefaultFileSystem()->NewRandomAccessFile(path);
  ASSERT_TRUE(file.ok());
  auto layout = ReadAttributeLayout(**file);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_FALSE(layout->fields.empty());
  bad = good;
  bad[layout->fields.front().offset + 2] ^= 0x08;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  auto seg = OpenSegment("seg");
  EXPECT_EQ(seg.status().code(), absl::StatusCode::kDataLoss) << seg.status();
  // A flipped version is corruption (the footer's CRC covers the header), not a newer file.
  bad = good;
  bad[kAttributeFileMagic.size()] ^= 0x04;  // version 2 -> 6
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
  seg = OpenSegment("seg");
  EXPECT_EQ(seg.status().code(), absl::StatusCode::kDataLoss) << seg.status();
}

// A merge or rebuild reads rows through ForEachRow: a flipped bit in a partition stops it with
// DATA_LOSS instead of being re-encoded under a fresh, valid checksum (I-5).
TEST_F(SegmentBuilderTest, ReadingRowsOfACorruptPartitionIsDataLoss) {
  auto b = Fill("tmp", 64 << 10);
  ASSERT_TRUE(
      b->Write(cpu_, Train(*b, core::VectorEncoding::kFlat), dir_.Sub("seg"), nullptr).ok());
  auto meta = DecodeIvfMeta(File("seg", "ivf.meta"));
  ASSERT_TRUE(meta.ok());
  std::string lists = File("seg", "lists.dat");
  lists[meta->partitions[3].offset + 100] ^= 0x10;
  std::ofstream(JoinPath(dir_.Sub("seg"), "lists.dat"), std::ios::binary | std::ios::trunc)
      << lists;
  auto seg = OpenSegment("seg");
  ASSERT_TRUE(seg.ok()) << seg.status();
  absl::Status s = (*seg)->ForEachRow([](uint64_t, const float*, const std::string&) {});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("partition 3"), absl::string_view::npos) << s;
}

// An exact model's groups read only their own run of rows: still the same files as one group.
TEST_F(SegmentBuilderTest, AnExactSegmentIsTheSameWhateverTheBudget) {
  auto small = Fill("tmp-small", 64 << 10);
  auto large = Fill("tmp-large", 1ull << 30);
  const core::IvfModel model = core::MakeExactModel(kDim, core::Metric::kL2, 40);
  ASSERT_TRUE(small->Write(cpu_, model, dir_.Sub("seg-small"), nullptr).ok());
  ASSERT_TRUE(large->Write(cpu_, model, dir_.Sub("seg-large"), nullptr).ok());
  for (const char* f : {"lists.dat", "attrs.dat", "ivf.meta"}) {
    EXPECT_EQ(File("seg-small", f), File("seg-large", f)) << f;
  }
}

TEST_F(SegmentBuilderTest, AnExactModelSlicesTheRowsEvenlyInOrder) {
  auto b = Fill("tmp", 64 << 10);
  const core::IvfModel model = core::MakeExactModel(kDim, core::Metric::kL2, 7);
  ASSERT_TRUE(b->Write(cpu_, model, dir_.Sub("seg"), nullptr).ok());
  auto meta = DecodeIvfMeta(File("seg", "ivf.meta"));
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_TRUE(meta->model.exact);
  EXPECT_FALSE(DefaultFileSystem()->Exists(JoinPath(dir_.Sub("seg"), "raw.dat")));
  uint64_t first_id_offset = 0;
  for (const PartitionExtent& e : meta->partitions) {
    EXPECT_NEAR(double(e.count), double(kRows) / 7, 1.0);
    // Slice p starts with row sum(counts before p): ids are in insertion order.
    const std::string lists = File("seg", "lists.dat");
    uint64_t id = 0;
    std::memcpy(&id, lists.data() + e.offset, 8);
    EXPECT_EQ(id, 1000 + first_id_offset);
    first_id_offset += e.count;
  }
}

TEST_F(SegmentBuilderTest, TheSampleDependsOnTheSeedAloneAndIsCappedByTheBudget) {
  auto a = Fill("tmp-a", 64 << 10);
  auto c = Fill("tmp-c", 1ull << 30);
  auto sa = a->Sample(200, 9);
  auto sc = c->Sample(200, 9);
  ASSERT_TRUE(sa.ok() && sc.ok());
  EXPECT_EQ(sa->size(), 200 * kDim);
  EXPECT_EQ(*sa, *sc);
  EXPECT_NE(*sa, *c->Sample(200, 10));
  // 64 KiB holds 256 vectors of 128 bytes in its training half.
  EXPECT_EQ(a->Sample(5000, 9)->size(), a->plan().max_sample_rows * kDim);
  EXPECT_EQ(c->Sample(1 << 20, 9)->size(), kRows * kDim);
}

TEST_F(SegmentBuilderTest, ZeroRowsMakeASegmentOfEmptyPartitions) {
  auto b = SegmentBuilder::Create(DefaultFileSystem(), dir_.Sub("tmp"), kDim, 1 << 20);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->FinishInput().ok());
  ASSERT_TRUE(
      (*b)->Write(cpu_, core::MakeExactModel(kDim, core::Metric::kL2, 1), dir_.Sub("seg"), nullptr)
          .ok());
  auto meta = DecodeIvfMeta(File("seg", "ivf.meta"));
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->num_vectors, 0u);
}

}  // namespace
}  // namespace shoal::storage::segment_builder_test
