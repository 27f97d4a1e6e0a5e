#include "storage/format/crc32c.h"

#include <isa-l/crc.h>

namespace shoal::storage {

// ISA-L's crc32_iscsi takes and returns the raw register; the standard CRC32C pre- and
// post-inverts, which is what callers expect when chaining.
uint32_t Crc32c(std::string_view data, uint32_t crc) {
  return ~crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())),
                      int(data.size()), ~crc);
}

}  // namespace shoal::storage
