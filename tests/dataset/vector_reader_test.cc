#include "dataset/vector_reader.h"

#include <zlib.h>

#include <cstring>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/fakes/temp_dir.h"

namespace shoal::dataset::vector_reader_test {
namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void AppendBE32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(char((v >> shift) & 0xff));
}

const std::vector<float> kExpected = {1, 2, 3, 4, 5, 6};  // 2 vectors of dim 3

TEST(VectorReader, ReadsFvecsBvecsIvecsPlainAndGzipped) {
  testing::TempDir dir;
  std::string f, b, i;
  for (int v = 0; v < 2; ++v) {
    Append<int32_t>(&f, 3);
    Append<int32_t>(&b, 3);
    Append<int32_t>(&i, 3);
    for (int j = 0; j < 3; ++j) {
      Append<float>(&f, float(v * 3 + j + 1));
      b.push_back(char(v * 3 + j + 1));
      Append<int32_t>(&i, v * 3 + j + 1);
    }
  }
  Write(dir.Sub("x.fvecs"), f);
  Write(dir.Sub("x.bvecs"), b);
  Write(dir.Sub("x.ivecs"), i);
  WriteGz(dir.Sub("y.fvecs.gz"), f);
  for (const char* name : {"x.fvecs", "x.bvecs", "x.ivecs", "y.fvecs.gz"}) {
    SCOPED_TRACE(name);
    uint32_t dim = 0;
    auto data = ReadAllVectors(dir.Sub(name), 0, &dim);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(dim, 3u);
    EXPECT_EQ(*data, kExpected);
  }
  auto reader = VectorReader::Open(dir.Sub("x.fvecs"));
  EXPECT_EQ((*reader)->size_hint(), 2u);
  EXPECT_FALSE((*VectorReader::Open(dir.Sub("y.fvecs.gz")))->size_hint().has_value());
  uint32_t dim;
  EXPECT_EQ(ReadAllVectors(dir.Sub("x.fvecs"), 1, &dim)->size(), 3u);
}

TEST(VectorReader, ReadsIdxUbyteAndFloat) {
  testing::TempDir dir;
  std::string u = {0, 0, 0x08, 3};
  AppendBE32(&u, 2);
  AppendBE32(&u, 1);
  AppendBE32(&u, 3);
  for (int v = 1; v <= 6; ++v) u.push_back(char(v));
  WriteGz(dir.Sub("train-idx3-ubyte.gz"), u);
  std::string fl = {0, 0, 0x0D, 2};
  AppendBE32(&fl, 2);
  AppendBE32(&fl, 3);
  for (int v = 1; v <= 6; ++v) {
    float x = float(v);
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    AppendBE32(&fl, bits);
  }
  Write(dir.Sub("f.idx"), fl);
  for (const char* name : {"train-idx3-ubyte.gz", "f.idx"}) {
    SCOPED_TRACE(name);
    uint32_t dim = 0;
    auto data = ReadAllVectors(dir.Sub(name), 0, &dim);
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(dim, 3u);
    EXPECT_EQ(*data, kExpected);
  }
}

TEST(VectorReader, ReadsNpyFloat32) {
  testing::TempDir dir;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string npy = "\x93NUMPY";
  npy.push_back(1);
  npy.push_back(0);
  Append<uint16_t>(&npy, uint16_t(header.size()));
  npy += header;
  for (float v : kExpected) Append<float>(&npy, v);
  Write(dir.Sub("a.npy"), npy);
  uint32_t dim = 0;
  auto data = ReadAllVectors(dir.Sub("a.npy"), 0, &dim);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(dim, 3u);
  EXPECT_EQ(*data, kExpected);
}

TEST(VectorReader, RejectsMalformedFilesWithAReason) {
  testing::TempDir dir;
  uint32_t dim;
  EXPECT_EQ(ReadAllVectors(dir.Sub("missing.fvecs"), 0, &dim).status().code(),
            absl::StatusCode::kNotFound);
  Write(dir.Sub("a.txt"), "x");
  EXPECT_EQ(VectorReader::Open(dir.Sub("a.txt")).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string f;
  Append<int32_t>(&f, 3);
  Append<float>(&f, 1);
  Write(dir.Sub("short.fvecs"), f);
  EXPECT_FALSE(ReadAllVectors(dir.Sub("short.fvecs"), 0, &dim).ok());
  std::string mixed;
  Append<int32_t>(&mixed, 1);
  Append<float>(&mixed, 1);
  Append<int32_t>(&mixed, 2);
  Append<float>(&mixed, 1);
  Append<float>(&mixed, 1);
  Write(dir.Sub("mixed.fvecs"), mixed);
  EXPECT_FALSE(ReadAllVectors(dir.Sub("mixed.fvecs"), 0, &dim).ok());
  std::string neg;
  Append<int32_t>(&neg, -1);
  Write(dir.Sub("neg.fvecs"), neg);
  EXPECT_FALSE(VectorReader::Open(dir.Sub("neg.fvecs")).ok());
  Write(dir.Sub("bad.npy"), "\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'}");
  EXPECT_FALSE(VectorReader::Open(dir.Sub("bad.npy")).ok());
  Write(dir.Sub("bad-idx3-ubyte"), std::string("\x01\x02\x03\x04", 4));
  EXPECT_FALSE(VectorReader::Open(dir.Sub("bad-idx3-ubyte")).ok());
  Write(dir.Sub("empty.fvecs"), "");
  EXPECT_FALSE(VectorReader::Open(dir.Sub("empty.fvecs")).ok());
}

TEST(VectorReader, ReadsTheFashionMnistPackageWhenInstalled) {
  const std::string path = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  auto reader = VectorReader::Open(path);
  if (!reader.ok()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  EXPECT_EQ((*reader)->dim(), 784u);
  EXPECT_EQ((*reader)->size_hint(), 10000u);
}

}  // namespace
}  // namespace shoal::dataset::vector_reader_test
