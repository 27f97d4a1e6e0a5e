// The crash harness's record of what shoald promised (tests/crash/README in docs/failpoints.md):
// for every id of every collection, the value of the last acknowledged write, and the value of a
// write whose outcome the crash left unknown. After a restart, Verify() reads everything back
// through the public API and checks it against that record:
//   - every acknowledged write is present with its latest value (Get with vectors);
//   - no deleted id comes back, and nothing the client was told failed appears;
//   - an id with a write in doubt holds either its old or its new value;
//   - a search at nprobe = nlist equals an exact search over the expected contents;
//   - the data directory holds no file that the live manifests do not name.
// Then it adopts what it read (each doubt resolved), so the next cycle starts exact.
//
// Thread-safety: each Slot belongs to the one writer thread that owns its id range while the
// workload runs; Verify runs with no writer running.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"

namespace shoal::crash {

struct CollectionDef {
  std::string name;
  IndexType type;
  uint32_t dim;
  uint32_t nlist;  // 0 for FLAT
};

// The expected state of one id.
struct Slot {
  bool present = false;
  std::vector<float> vector;
  uint64_t seq = 0;  // the harness's sequence number of the write that set it (0: never)
  // A write sent but neither acknowledged nor refused when shoald died.
  bool in_doubt = false;
  bool doubt_present = false;
  std::vector<float> doubt_vector;
  uint64_t doubt_seq = 0;
};

struct CollectionModel {
  CollectionDef def;
  bool created = false;     // CreateCollection acknowledged
  std::vector<Slot> slots;  // id i + 1 lives in slots[i]
};

// Ids that only ever receive writes shoald must refuse (a wrong dimension).
inline constexpr uint64_t kPoisonIdBase = 1'000'000;
inline constexpr uint64_t kPoisonIds = 8;

// The attributes an upsert with harness sequence number `seq` sends (every other one has some),
// so that Get can check attrs.dat as well as the vectors.
inline Attributes AttributesFor(uint64_t seq) {
  if (seq % 2) return {};
  return {{"seq", int64_t(seq)}, {"tag", std::string("w") + std::to_string(seq % 7)}};
}

struct VerifyCounts {
  uint64_t ids_checked = 0;
  uint64_t doubts_resolved = 0;
  uint64_t searches_checked = 0;
};

// Checks one restarted shoald against `models` (see the file comment) and adopts what it read.
// `data_dir` is shoald's --data-dir; `seed` picks the search queries.
absl::Status Verify(Client& client, const std::string& data_dir, uint64_t seed,
                    std::vector<CollectionModel>& models, VerifyCounts* counts);

// Entries of <data_dir>/collections that no live manifest names ("" when there are none).
std::string FindOrphans(const std::string& data_dir);

}  // namespace shoal::crash
