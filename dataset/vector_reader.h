// VectorReader: streams float vectors out of the dataset files users have at hand.
//
// Formats, chosen by file name (a trailing .gz is decompressed transparently):
//   .fvecs / .bvecs / .ivecs  (int32 dim, then dim float32 / uint8 / int32) per vector
//   IDX (MNIST family: "*-idx3-ubyte", ".idx"), uint8 or float32 items, big-endian header;
//                          each item flattened into one vector (28x28 -> 784)
//   .npy                   2-D little-endian float32, C order
//
// Thread-safety: none; one reader per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shoal::dataset {

class VectorReader {
 public:
  virtual ~VectorReader() = default;

  // Opens `path`; INVALID_ARGUMENT for an unknown or malformed format.
  static absl::StatusOr<std::unique_ptr<VectorReader>> Open(const std::string& path);

  virtual uint32_t dim() const = 0;
  // Total vectors when the header says so (IDX, npy, uncompressed *vecs); nullopt otherwise.
  virtual std::optional<uint64_t> size_hint() const = 0;
  // Appends up to `max` vectors (dim floats each) to `out`; returns how many. 0 means the end.
  virtual absl::StatusOr<size_t> Read(size_t max, std::vector<float>* out) = 0;
};

// Reads up to `limit` vectors (all when 0) of a file: returns row-major floats, sets *dim.
absl::StatusOr<std::vector<float>> ReadAllVectors(const std::string& path, size_t limit,
                                                  uint32_t* dim);

}  // namespace shoal::dataset
