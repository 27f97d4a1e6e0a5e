#include "dataset/vector_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace shoal::dataset {
namespace {

// A gzip-or-plain byte stream (zlib reads uncompressed files transparently).
class ByteStream {
 public:
  static absl::StatusOr<std::unique_ptr<ByteStream>> Open(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    gzbuffer(f, 1 << 20);
    return std::unique_ptr<ByteStream>(new ByteStream(path, f));
  }
  ~ByteStream() { gzclose(file_); }

  // Reads exactly n bytes; false at a clean end of stream (nothing read); error if cut short.
  absl::StatusOr<bool> ReadExact(void* buf, size_t n) {
    size_t done = 0;
    while (done < n) {
      int r = gzread(file_, static_cast<char*>(buf) + done, unsigned(n - done));
      if (r < 0) return absl::DataLossError(absl::StrCat(path_, ": read error"));
      if (r == 0) break;
      done += size_t(r);
    }
    if (done == 0 && n > 0) return false;
    if (done < n) return absl::InvalidArgumentError(absl::StrCat(path_, ": truncated file"));
    return true;
  }

  const std::string& path() const { return path_; }

 private:
  ByteStream(std::string path, gzFile f) : path_(std::move(path)), file_(f) {}
  std::string path_;
  gzFile file_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

std::optional<uint64_t> PlainFileSize(const std::string& path) {
  if (absl::EndsWith(path, ".gz")) return std::nullopt;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return uint64_t(st.st_size);
}

// fvecs, bvecs, ivecs: every vector carries its own int32 dim.
class VecsReader final : public VectorReader {
 public:
  enum class Element { kFloat, kByte, kInt };

  static absl::StatusOr<std::unique_ptr<VectorReader>> Open(const std::string& path,
                                                            Element element) {
    auto stream = ByteStream::Open(path);
    if (!stream.ok()) return stream.status();
    int32_t dim;
    auto got = (*stream)->ReadExact(&dim, 4);
    if (!got.ok()) return got.status();
    if (!*got) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
    if (dim <= 0 || dim > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad dimension ", dim));
    }
    std::optional<uint64_t> n;
    const size_t elem = element == Element::kByte ? 1 : 4;
    if (auto size = PlainFileSize(path)) n = *size / (4 + elem * uint64_t(dim));
    return std::unique_ptr<VectorReader>(
        new VecsReader(*std::move(stream), element, uint32_t(dim), n));
  }

  uint32_t dim() const override { return dim_; }
  std::optional<uint64_t> size_hint() const override { return size_; }

  absl::StatusOr<size_t> Read(size_t max, std::vector<float>* out) override {
    size_t n = 0;
    const size_t elem = element_ == Element::kByte ? 1 : 4;
    std::vector<unsigned char> raw(dim_ * elem);
    while (n < max) {
      if (!first_) {
        int32_t d;
        auto got = stream_->ReadExact(&d, 4);
        if (!got.ok()) return got.status();
        if (!*got) break;
        if (uint32_t(d) != dim_) {
          return absl::InvalidArgumentError(
              absl::StrCat(stream_->path(), ": vector ", count_, " has dim ", d, ", not ", dim_));
        }
      }
      first_ = false;
      auto got = stream_->ReadExact(raw.data(), raw.size());
      if (!got.ok()) return got.status();
      if (!*got) return absl::InvalidArgumentError(absl::StrCat(stream_->path(), ": truncated"));
      const size_t base = out->size();
      out->resize(base + dim_);
      for (uint32_t i = 0; i < dim_; ++i) {
        float v;
        if (element_ == Element::kFloat) {
          std::memcpy(&v, raw.data() + 4 * i, 4);
        } else if (element_ == Element::kByte) {
          v = float(raw[i]);
        } else {
          int32_t x;
          std::memcpy(&x, raw.data() + 4 * i, 4);
          v = float(x);
        }
        (*out)[base + i] = v;
      }
      ++n;
      ++count_;
    }
    return n;
  }

 private:
  VecsReader(std::unique_ptr<ByteStream> s, Element e, uint32_t dim, std::optional<uint64_t> n)
      : stream_(std::move(s)), element_(e), dim_(dim), size_(n) {}
  std::unique_ptr<ByteStream> stream_;
  const Element element_;
  const uint32_t dim_;
  const std::optional<uint64_t> size_;
  bool first_ = true;  // the first vector's dim was consumed by Open
  uint64_t count_ = 0;
};

// A fixed-layout body after a header: IDX and npy.
class DenseReader final : public VectorReader {
 public:
  enum class Element { kUint8, kFloat32LE, kFloat32BE };

  DenseReader(std::unique_ptr<ByteStream> s, Element e, uint32_t dim, uint64_t n)
      : stream_(std::move(s)), element_(e), dim_(dim), size_(n) {}

  uint32_t dim() const override { return dim_; }
  std::optional<uint64_t> size_hint() const override { return size_; }

  absl::StatusOr<size_t> Read(size_t max, std::vector<float>* out) override {
    const size_t elem = element_ == Element::kUint8 ? 1 : 4;
    // At most ~16 MiB per call, so a header that lies about the size cannot make us allocate
    // more than that before the stream runs dry.
    const size_t cap = std::max<size_t>(1, (16u << 20) / (size_t(dim_) * elem));
    const size_t n = size_t(std::min<uint64_t>({max, size_ - read_, cap}));
    if (n == 0) return 0;
    std::vector<unsigned char> raw(n * dim_ * elem);
    auto got = stream_->ReadExact(raw.data(), raw.size());
    if (!got.ok()) return got.status();
    if (!*got) return absl::InvalidArgumentError(absl::StrCat(stream_->path(), ": truncated"));
    const size_t base = out->size();
    out->resize(base + n * dim_);
    float* dst = out->data() + base;
    for (size_t i = 0; i < n * dim_; ++i) {
      if (element_ == Element::kUint8) {
        dst[i] = float(raw[i]);
      } else {
        unsigned char b[4];
        std::memcpy(b, raw.data() + 4 * i, 4);
        if (element_ == Element::kFloat32BE) std::swap(b[0], b[3]), std::swap(b[1], b[2]);
        std::memcpy(dst + i, b, 4);
      }
    }
    read_ += n;
    return n;
  }

 private:
  std::unique_ptr<ByteStream> stream_;
  const Element element_;
  const uint32_t dim_;
  const uint64_t size_;
  uint64_t read_ = 0;
};

absl::StatusOr<std::unique_ptr<VectorReader>> OpenIdx(const std::string& path) {
  auto stream = ByteStream::Open(path);
  if (!stream.ok()) return stream.status();
  unsigned char magic[4];
  auto got = (*stream)->ReadExact(magic, 4);
  if (!got.ok()) return got.status();
  const uint8_t type = magic[2], ndims = magic[3];
  if (!*got || magic[0] != 0 || magic[1] != 0 || ndims < 1 || ndims > 4 ||
      (type != 0x08 && type != 0x0D)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file of ubyte or float"));
  }
  unsigned char dims_raw[16];
  got = (*stream)->ReadExact(dims_raw, 4 * ndims);
  if (!got.ok()) return got.status();
  if (!*got) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated IDX header"));
  const uint64_t n = BigEndian32(dims_raw);
  uint64_t dim = 1;
  for (int i = 1; i < ndims; ++i) dim *= BigEndian32(dims_raw + 4 * i);
  if (dim == 0 || dim > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad IDX item size ", dim));
  }
  return std::unique_ptr<VectorReader>(new DenseReader(
      *std::move(stream),
      type == 0x08 ? DenseReader::Element::kUint8 : DenseReader::Element::kFloat32BE,
      uint32_t(dim), n));
}

// npy v1/v2/v3: magic, version, header length, then a Python dict literal.
absl::StatusOr<std::unique_ptr<VectorReader>> OpenNpy(const std::string& path) {
  auto stream = ByteStream::Open(path);
  if (!stream.ok()) return stream.status();
  unsigned char pre[8];
  auto got = (*stream)->ReadExact(pre, 8);
  if (!got.ok()) return got.status();
  if (!*got || std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npy file"));
  }
  uint32_t header_len = 0;
  unsigned char len_raw[4] = {0, 0, 0, 0};
  got = (*stream)->ReadExact(len_raw, pre[6] == 1 ? 2 : 4);
  if (!got.ok()) return got.status();
  std::memcpy(&header_len, len_raw, 4);
  if (header_len > (1u << 20)) return absl::InvalidArgumentError(absl::StrCat(path, ": bad header"));
  std::string header(header_len, '\0');
  got = (*stream)->ReadExact(header.data(), header_len);
  if (!got.ok()) return got.status();
  if (!absl::StrContains(header, "'descr': '<f4'") || !absl::StrContains(header, "'fortran_order': False")) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": only C-order little-endian float32 (<f4) arrays are supported"));
  }
  const size_t open = header.find("'shape': (");
  const size_t close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no shape in header"));
  }
  const std::string shape = header.substr(open + 10, close - open - 10);
  std::vector<uint64_t> dims;
  for (absl::string_view part : absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    uint64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape (", shape, ")"));
    }
    dims.push_back(d);
  }
  if (dims.size() != 2 || dims[1] == 0 || dims[1] > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": want a 2-D array, shape (", shape, ")"));
  }
  return std::unique_ptr<VectorReader>(new DenseReader(
      *std::move(stream), DenseReader::Element::kFloat32LE, uint32_t(dims[1]), dims[0]));
}

}  // namespace

absl::StatusOr<std::unique_ptr<VectorReader>> VectorReader::Open(const std::string& path) {
  std::string name(path);
  if (absl::EndsWith(name, ".gz")) name.resize(name.size() - 3);
  if (absl::EndsWith(name, ".fvecs")) return VecsReader::Open(path, VecsReader::Element::kFloat);
  if (absl::EndsWith(name, ".bvecs")) return VecsReader::Open(path, VecsReader::Element::kByte);
  if (absl::EndsWith(name, ".ivecs")) return VecsReader::Open(path, VecsReader::Element::kInt);
  if (absl::EndsWith(name, ".npy")) return OpenNpy(path);
  if (absl::StrContains(name, "-idx") || absl::EndsWith(name, ".idx")) return OpenIdx(path);
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown vector file format (want .fvecs, .bvecs, .ivecs, .npy or IDX, optionally .gz)"));
}

absl::StatusOr<std::vector<float>> ReadAllVectors(const std::string& path, size_t limit,
                                                  uint32_t* dim) {
  auto reader = VectorReader::Open(path);
  if (!reader.ok()) return reader.status();
  *dim = (*reader)->dim();
  std::vector<float> out;
  size_t total = 0;
  while (limit == 0 || total < limit) {
    const size_t want = limit == 0 ? 4096 : std::min<size_t>(4096, limit - total);
    auto n = (*reader)->Read(want, &out);
    if (!n.ok()) return n.status();
    if (*n == 0) break;
    total += *n;
  }
  return out;
}

}  // namespace shoal::dataset
