// libFuzzer target: the dataset readers must reject malformed files with a Status. The first
// byte picks the format (by file name); the rest is the file.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "dataset/vector_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string dir = [] {
    char d[] = "/tmp/shoal-fuzz-XXXXXX";
    return std::string(mkdtemp(d));
  }();
  static const char* kNames[] = {"a.fvecs", "a.bvecs", "a.ivecs", "a.npy", "a-idx3-ubyte"};
  const std::string path = dir + "/" + kNames[data[0] % 5];
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), std::streamsize(size - 1));
  }
  uint32_t dim = 0;
  (void)shoal::dataset::ReadAllVectors(path, 64, &dim);  // bounded: at most 64 vectors
  return 0;
}
