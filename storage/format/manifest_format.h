// Manifest format: the durable description of one collection (schema and the WAL files that
// hold its data). Stored as MANIFEST-<n> with CURRENT naming the live one (see
// storage/collection/manifest_store.h).
//
//   "SHOALMAN" fixed32 version
//   bytes name, varint dim, uint8 metric, uint8 index type, varint nlist, varint pq_m,
//   varint default_nprobe, varint first_wal_seq
//   fixed32 masked crc of everything before it
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/base/metric.h"
#include "core/index/index_spec.h"

namespace shoal::storage {

inline constexpr std::string_view kManifestMagic = "SHOALMAN";
inline constexpr uint32_t kManifestVersion = 1;

struct CollectionManifest {
  std::string name;
  uint32_t dim = 0;
  core::Metric metric = core::Metric::kL2;
  core::IndexSpec index;
  uint64_t first_wal_seq = 1;  // WAL files numbered below this are obsolete
};

std::string EncodeManifest(const CollectionManifest& manifest);
// DATA_LOSS on a bad checksum or truncation; FAILED_PRECONDITION on an unknown version.
absl::StatusOr<CollectionManifest> DecodeManifest(std::string_view data);

}  // namespace shoal::storage
