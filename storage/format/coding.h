// Little-endian fixed-width and varint encoding for on-disk formats, plus Decoder, a bounds-
// checked cursor: every Get* returns false instead of reading past the end, so a corrupt or
// truncated input is an error, never a crash (I-7).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace shoal::storage {

inline void PutFixed32(std::string* out, uint32_t v) {
  char buf[4];
  std::memcpy(buf, &v, 4);  // x86-64 and aarch64-linux are little-endian
  out->append(buf, 4);
}
inline void PutFixed64(std::string* out, uint64_t v) {
  char buf[8];
  std::memcpy(buf, &v, 8);
  out->append(buf, 8);
}
inline void PutVarint64(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(v | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}
inline void PutBytes(std::string* out, std::string_view bytes) {
  PutVarint64(out, bytes.size());
  out->append(bytes);
}
inline void PutFloats(std::string* out, const float* v, size_t n) {
  out->append(reinterpret_cast<const char*>(v), n * sizeof(float));
}

inline uint32_t DecodeFixed32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

class Decoder {
 public:
  explicit Decoder(std::string_view data) : data_(data) {}

  bool empty() const { return data_.empty(); }
  size_t remaining() const { return data_.size(); }

  bool GetFixed32(uint32_t* v) { return GetRaw(v, 4); }
  bool GetFixed64(uint64_t* v) { return GetRaw(v, 8); }
  bool GetByte(uint8_t* v) { return GetRaw(v, 1); }
  bool GetVarint64(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift <= 63 && !data_.empty(); shift += 7) {
      const uint8_t byte = uint8_t(data_.front());
      data_.remove_prefix(1);
      result |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }
  bool GetBytes(std::string_view* v) {
    uint64_t n;
    if (!GetVarint64(&n) || n > data_.size()) return false;
    *v = data_.substr(0, n);
    data_.remove_prefix(n);
    return true;
  }
  // A view of the next n bytes. The caller copies (the input may be unaligned).
  bool GetView(uint64_t n, std::string_view* v) {
    if (n > data_.size()) return false;
    *v = data_.substr(0, size_t(n));
    data_.remove_prefix(size_t(n));
    return true;
  }
  // A view of the next n*4 bytes as floats. The caller copies (the input may be unaligned).
  bool GetFloatBytes(size_t n, std::string_view* v) {
    if (n > data_.size() / sizeof(float)) return false;
    *v = data_.substr(0, n * sizeof(float));
    data_.remove_prefix(n * sizeof(float));
    return true;
  }

 private:
  template <typename T>
  bool GetRaw(T* v, size_t n) {
    if (data_.size() < n) return false;
    std::memcpy(v, data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  std::string_view data_;
};

}  // namespace shoal::storage
