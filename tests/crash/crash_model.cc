#include "tests/crash/crash_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "storage/collection/manifest_store.h"
#include "storage/io/file_system.h"

namespace shoal::crash {
namespace {

std::string Describe(bool present, const std::vector<float>& v) {
  return present ? absl::StrCat("[", absl::StrJoin(v, ","), "]") : "absent";
}

std::string Describe(bool present, const std::vector<float>& v, uint64_t seq) {
  return absl::StrCat(Describe(present, v), seq ? absl::StrCat(" (write #", seq, ")") : "");
}

// Whether what Get returned for slot i is one of the values the record allows.
bool Allowed(const Slot& s, bool present, const std::vector<float>& v) {
  auto same = [&](bool p, const std::vector<float>& want) {
    return p == present && (!p || want == v);
  };
  return same(s.present, s.vector) || (s.in_doubt && same(s.doubt_present, s.doubt_vector));
}

absl::Status CheckContents(Client& client, CollectionModel& m, VerifyCounts* counts) {
  const size_t n = m.slots.size();
  std::vector<bool> seen(n, false);
  std::vector<std::vector<float>> got(n);
  std::vector<Attributes> got_attrs(n);
  std::map<uint64_t, bool> doubt_outcome;  // write in doubt -> whether it was applied
  constexpr size_t kBatch = 512;
  for (size_t first = 0; first < n; first += kBatch) {
    std::vector<uint64_t> ids;
    for (size_t i = first; i < std::min(n, first + kBatch); ++i) ids.push_back(i + 1);
    auto points = client.Get(m.def.name, ids, /*include_vectors=*/true);
    if (!points.ok())
      return absl::Status(points.status().code(), "Get: " + points.status().ToString());
    for (const Point& p : *points) {
      if (p.id == 0 || p.id > n) {
        return absl::DataLossError(absl::StrCat(m.def.name, ": Get returned unasked id ", p.id));
      }
      seen[p.id - 1] = true;
      got[p.id - 1] = p.vector;
      got_attrs[p.id - 1] = p.attributes;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Slot& s = m.slots[i];
    if (!Allowed(s, seen[i], got[i])) {
      std::string want = Describe(s.present, s.vector, s.seq);
      if (s.in_doubt)
        absl::StrAppend(&want, " or ", Describe(s.doubt_present, s.doubt_vector, s.doubt_seq));
      return absl::DataLossError(absl::StrCat(m.def.name, ": id ", i + 1, " is ",
                                              Describe(seen[i], got[i]), ", expected ", want));
    }
    const bool is_old = s.present == seen[i] && (!seen[i] || s.vector == got[i]);
    const uint64_t value_seq = is_old ? s.seq : s.doubt_seq;
    if (seen[i] && got_attrs[i] != AttributesFor(value_seq)) {
      return absl::DataLossError(absl::StrCat(m.def.name, ": id ", i + 1,
                                              " has the vector of write #", value_seq,
                                              " but not its attributes"));
    }
    if (s.in_doubt) {
      // One write is one WAL record: all of its ids took it, or none did.
      const bool old_value = s.present == seen[i] && (!seen[i] || s.vector == got[i]);
      const bool new_value = s.doubt_present == seen[i] && (!seen[i] || s.doubt_vector == got[i]);
      if (old_value != new_value) {
        auto [it, first] = doubt_outcome.emplace(s.doubt_seq, new_value);
        if (!first && it->second != new_value) {
          return absl::DataLossError(absl::StrCat(m.def.name, ": write #", s.doubt_seq,
                                                  ", in doubt at the crash, was applied to some "
                                                  "of its ids only (id ",
                                                  i + 1, ")"));
        }
      }
      ++counts->doubts_resolved;
    }
    s.present = seen[i];
    s.seq = value_seq;
    s.vector = seen[i] ? got[i] : std::vector<float>();
    s.in_doubt = false;
    ++counts->ids_checked;
  }
  std::vector<uint64_t> poison;
  for (uint64_t k = 0; k < kPoisonIds; ++k) poison.push_back(kPoisonIdBase + k);
  auto points = client.Get(m.def.name, poison);
  if (!points.ok()) return points.status();
  if (!points->empty()) {
    return absl::DataLossError(
        absl::StrCat(m.def.name, ": id ", points->front().id,
                     " was only ever written by refused upserts, yet exists"));
  }
  return absl::OkStatus();
}

float L2(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t j = 0; j < a.size(); ++j) d += (a[j] - b[j]) * (a[j] - b[j]);
  return d;
}

absl::Status CheckSearch(Client& client, const CollectionModel& m, std::mt19937_64& rng,
                         VerifyCounts* counts) {
  std::normal_distribution<float> normal;
  // Three top-10 searches, then one whose k exceeds the live count: it must return every live
  // vector once and nothing else (a dead row that search still sees shows up here).
  uint64_t live = 0;
  for (const Slot& s : m.slots) live += s.present ? 1 : 0;
  // SQ8's distances are approximate: only the whole set of ids is checked.
  const bool approximate = m.def.type == IndexType::kIvfSq8 || m.def.type == IndexType::kIvfPq;
  for (int q = approximate ? 3 : 0; q < 4; ++q) {
    const uint32_t k = q < 3 ? 10 : uint32_t(live + 10);
    std::vector<float> query(m.def.dim);
    for (float& x : query) x = normal(rng);
    std::vector<std::pair<float, uint64_t>> exact;
    for (size_t i = 0; i < m.slots.size(); ++i) {
      if (m.slots[i].present) exact.push_back({L2(query, m.slots[i].vector), i + 1});
    }
    std::sort(exact.begin(), exact.end());
    exact.resize(std::min<size_t>(exact.size(), k));
    SearchOptions options{.k = k, .nprobe = std::max<uint32_t>(1, m.def.nlist)};
    auto result = client.Search(m.def.name, query, options);
    if (!result.ok())
      return absl::Status(result.status().code(), "Search: " + result.status().ToString());
    const auto& hits = result->hits;
    auto mismatch = [&](const std::string& why) {
      std::string got, want;
      for (const Hit& h : hits) absl::StrAppend(&got, h.id, ":", h.distance, " ");
      for (const auto& [d, id] : exact) absl::StrAppend(&want, id, ":", d, " ");
      return absl::DataLossError(absl::StrCat(m.def.name, ": search at nprobe = nlist ", why,
                                              "\n  got:   ", got, "\n  exact: ", want));
    };
    if (hits.size() != exact.size()) return mismatch("returned a different number of hits");
    if (approximate) {
      std::set<uint64_t> got, want;
      for (const Hit& h : hits) got.insert(h.id);
      for (const auto& e : exact) want.insert(e.second);
      if (got != want) return mismatch("did not return each live id once");
      ++counts->searches_checked;
      continue;
    }
    for (size_t r = 0; r < hits.size(); ++r) {
      const uint64_t id = hits[r].id;
      if (id == 0 || id > m.slots.size() || !m.slots[id - 1].present) {
        return mismatch(absl::StrCat("returned id ", id, ", which is not live"));
      }
      const float tol = 1e-4f * std::max(1.0f, exact[r].first);
      if (std::fabs(hits[r].distance - exact[r].first) > tol ||
          std::fabs(L2(query, m.slots[id - 1].vector) - hits[r].distance) > tol) {
        return mismatch(absl::StrCat("differs at rank ", r));
      }
    }
    ++counts->searches_checked;
  }
  return absl::OkStatus();
}

// Filtered searches and counts after the restart: the attributes in attrs.dat, the WAL and
// the memtable's columns must select exactly the live ids whose last write carried them.
absl::Status CheckFiltered(Client& client, const CollectionModel& m, std::mt19937_64& rng,
                           VerifyCounts* counts) {
  const uint64_t tag = rng() % 7;
  const std::pair<std::string, std::function<bool(uint64_t seq)>> cases[] = {
      {absl::StrCat("tag = \"w", tag, "\""),
       [tag](uint64_t seq) { return seq % 2 == 0 && seq % 7 == tag; }},
      {"not exists(seq) or seq < 40", [](uint64_t seq) { return seq % 2 == 1 || seq < 40; }},
  };
  for (const auto& [filter, pred] : cases) {
    std::set<uint64_t> want;
    for (size_t i = 0; i < m.slots.size(); ++i) {
      if (m.slots[i].present && pred(m.slots[i].seq)) want.insert(i + 1);
    }
    auto count = client.Count(m.def.name, filter);
    if (!count.ok())
      return absl::Status(count.status().code(), "Count: " + count.status().ToString());
    if (*count != want.size()) {
      return absl::DataLossError(absl::StrCat(m.def.name, ": Count(", filter, ") = ", *count,
                                              ", the record says ", want.size()));
    }
    std::vector<float> query(m.def.dim, 0.f);
    SearchOptions options{.k = uint32_t(std::min<size_t>(want.size() + 10, 10000)),
                          .nprobe = std::max<uint32_t>(1, m.def.nlist),
                          .filter = filter};
    auto result = client.Search(m.def.name, query, options);
    if (!result.ok()) {
      return absl::Status(result.status().code(), "filtered Search: " + result.status().ToString());
    }
    std::set<uint64_t> got;
    for (const Hit& h : result->hits) got.insert(h.id);
    if (got != want || result->hits.size() != want.size()) {
      return absl::DataLossError(absl::StrCat(
          m.def.name, ": search with filter ", filter, " returned ", result->hits.size(), " hits (",
          got.size(), " distinct), the record says ", want.size()));
    }
    ++counts->searches_checked;
  }
  return absl::OkStatus();
}

// The live count DescribeCollection reports against the record (just adopted from Get).
absl::Status CheckCount(Client& client, const CollectionModel& m) {
  uint64_t live = 0;
  for (const Slot& s : m.slots) live += s.present ? 1 : 0;
  auto info = client.DescribeCollection(m.def.name);
  if (!info.ok()) return info.status();
  if (info->num_vectors != live) {
    return absl::DataLossError(absl::StrCat(m.def.name, ": DescribeCollection counts ",
                                            info->num_vectors, " vectors, Get finds ", live));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FindOrphans(const std::string& data_dir) {
  storage::FileSystem* fs = storage::DefaultFileSystem();
  const std::string root = storage::JoinPath(data_dir, "collections");
  std::vector<std::string> orphans;
  auto names = fs->ListDir(root);
  if (!names.ok()) return names.status().ToString();
  for (const std::string& name : *names) {
    const std::string dir = storage::JoinPath(root, name);
    if (absl::StartsWith(name, ".")) {
      orphans.push_back(dir);
      continue;
    }
    auto loaded = storage::LoadManifest(fs, dir);
    if (!loaded.ok()) {
      orphans.push_back(absl::StrCat(dir, " (", loaded.status().ToString(), ")"));
      continue;
    }
    std::set<std::string> live = {"CURRENT", "wal", storage::ManifestFileName(loaded->number)};
    for (const auto& e : loaded->manifest.segments) {
      const std::string seg = absl::StrCat("seg-", e.id);
      live.insert(seg);
      if (!fs->Exists(storage::JoinPath(dir, seg))) orphans.push_back(dir + "/" + seg + " MISSING");
    }
    if (auto entries = fs->ListDir(dir); entries.ok()) {
      for (const std::string& e : *entries) {
        if (!live.count(e)) orphans.push_back(storage::JoinPath(dir, e));
      }
    }
    if (auto wals = fs->ListDir(storage::JoinPath(dir, "wal")); wals.ok()) {
      for (const std::string& w : *wals) {
        absl::string_view rest = w;
        uint64_t seq = 0;
        if (!absl::ConsumeSuffix(&rest, ".log") || !absl::SimpleAtoi(rest, &seq) ||
            seq < loaded->manifest.first_wal_seq) {
          orphans.push_back(storage::JoinPath(dir, "wal/" + w));
        }
      }
    }
  }
  return absl::StrJoin(orphans, ", ");
}

absl::Status Verify(Client& client, const std::string& data_dir, uint64_t seed,
                    std::vector<CollectionModel>& models, VerifyCounts* counts) {
  auto listed = client.ListCollections();
  if (!listed.ok()) return listed.status();
  for (CollectionModel& m : models) {
    auto it = std::find_if(listed->begin(), listed->end(),
                           [&](const CollectionInfo& c) { return c.name == m.def.name; });
    if (it == listed->end()) {
      if (m.created)
        return absl::DataLossError(m.def.name + ": an acknowledged collection is gone");
      continue;  // its create was in doubt and did not survive
    }
    if (it->index_state == "broken") {
      return absl::DataLossError(absl::StrCat(m.def.name, " is broken: ", it->error));
    }
    m.created = true;
  }
  if (std::string orphans = FindOrphans(data_dir); !orphans.empty()) {
    return absl::DataLossError("orphan files after recovery: " + orphans);
  }
  std::mt19937_64 rng(seed);
  for (CollectionModel& m : models) {
    if (!m.created) continue;
    if (absl::Status s = CheckContents(client, m, counts); !s.ok()) return s;
    if (absl::Status s = CheckSearch(client, m, rng, counts); !s.ok()) return s;
    if (absl::Status s = CheckFiltered(client, m, rng, counts); !s.ok()) return s;
    if (absl::Status s = CheckCount(client, m); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace shoal::crash
