// Manifest format: the durable description of one collection (schema and the WAL files that
// hold its data). Stored as MANIFEST-<n> with CURRENT naming the live one (see
// storage/collection/manifest_store.h).
//
//   "SHOALMAN" fixed32 version
//   bytes name, varint dim, uint8 metric, uint8 index type, varint nlist, varint pq_m,
//   varint default_nprobe, varint first_wal_seq
//   version 2 adds: varint write_seq, varint next_segment_id,
//     varint #segments, per segment: varint id, varint seq, varint num_vectors
//     varint #tombstones, per tombstone: fixed64 id, varint seq
//   version 3 adds: varint pq_bits (IndexSpec.pq_bits; 0 in older manifests)
//   fixed32 masked crc of everything before it
//
// Version 1 and 2 manifests are still read.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/metric.h"
#include "core/index/index_spec.h"

namespace shoal::storage {

inline constexpr std::string_view kManifestMagic = "SHOALMAN";
inline constexpr uint32_t kManifestVersion = 3;

// An immutable IVF segment (seg-<id>/ under the collection directory). It holds the live
// vectors of every write with sequence number <= seq.
struct SegmentEntry {
  uint64_t id = 0;
  uint64_t seq = 0;
  uint64_t num_vectors = 0;
};

// An id written (upserted again or deleted) at `seq`: rows of segments with a smaller seq
// that carry this id are dead.
struct Tombstone {
  uint64_t id = 0;
  uint64_t seq = 0;
};

struct CollectionManifest {
  std::string name;
  uint32_t dim = 0;
  core::Metric metric = core::Metric::kL2;
  core::IndexSpec index;
  uint64_t first_wal_seq = 1;  // WAL files numbered below this are obsolete
  uint64_t write_seq = 0;      // writes up to this sequence number are in segments
  uint64_t next_segment_id = 1;
  std::vector<SegmentEntry> segments;  // oldest first
  std::vector<Tombstone> tombstones;
};

std::string EncodeManifest(const CollectionManifest& manifest);
// DATA_LOSS on a bad checksum or truncation; FAILED_PRECONDITION on an unknown version.
absl::StatusOr<CollectionManifest> DecodeManifest(std::string_view data);

}  // namespace shoal::storage
