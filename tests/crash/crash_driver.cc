// shoal-crash: the crash harness (after RocksDB's db_crashtest). Each cycle starts the real
// shoald on a temporary data directory, checks everything the previous cycles were promised
// (crash_model.h), then streams upserts, overwrites and deletes from several clients into a FLAT
// and three IVF collections (two IVF_FLAT, one IVF_SQ8) while a maintenance thread runs Flush and
// BuildIndex (and with them merges), and ends shoald with kill -9: either at a failpoint armed
// through SHOAL_FAILPOINTS (core/base/failpoint.h), or at a random moment. A last start checks the
// last cycle.
//
//   shoal-crash --cycles 20 --seed 1 [--failpoints NAME,...] [--shoald build/bin/shoald]
//               [--work DIR] [--keep]
//
// A rotation arms every failpoint (or those --failpoints names) once, in an order the seed picks,
// each in a cycle whose workload reaches it (Harness::Eligible); one that was armed and did not
// fire is armed again, at its first hit, after the rest of the rotation. Once each has fired,
// cycles arm a random one, or none (a timed kill), one time in four. With 20 cycles (ctest's
// crash_test) the rotation covers every failpoint. Exit 0 when every check held and every armed
// failpoint fired at least once; 1 on a failure, with the seed, the cycle and the failpoint; 2 on
// bad arguments, an unknown failpoint name among them (core/base/failpoint.h's kFailPointNames is
// the list).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/failpoint.h"
#include "tests/crash/crash_model.h"
#include "tests/support/local_shoald.h"

namespace shoal::crash {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every failpoint (core/base/failpoint.h's kFailPointNames, docs/failpoints.md), with the highest
// hit a cycle arms it at: a crash at a later hit lands at a different moment of the run. The
// harness refuses to start (exit 2) when this table and kFailPointNames disagree.
struct FailPointDef {
  const char* name;
  uint64_t max_nth;
};
constexpr FailPointDef kFailPoints[] = {
    {"wal.after_write", 60},
    {"wal.after_sync", 60},
    {"wal.rotate", 4},
    {"segment.mid_file", 3},
    {"segment.before_meta", 3},
    {"build.after_freeze", 2},
    {"build.after_train", 2},
    {"build.before_install", 2},
    {"flush.after_freeze", 3},
    {"flush.before_install", 3},
    {"merge.before_install", 1},
    {"merge.after_install", 1},
    {"manifest.before_current", 6},
    {"manifest.before_rename", 6},
    {"manifest.before_dir_sync", 6},
    {"recovery.between_removals", 1},  // "recovery.*" crash the start after a crash
    {"recovery.after_replay", 4},
    {"manifest.before_old_removed", 6},
    {"cleanup.between_deletions", 4},
};

const std::vector<CollectionDef> kCollections = {
    {"flat_a", IndexType::kFlat, 8, 0},
    {"ivf_a", IndexType::kIvfFlat, 8, 8},
    {"ivf_b", IndexType::kIvfFlat, 12, 4},
    // Wide enough that, under the 1 MiB build budget below, a built or merged segment is
    // written in several groups: segment.mid_file then lands between two of them.
    {"sq8_a", IndexType::kIvfSq8, 1024, 4},
};
constexpr int kWriters = 4;
constexpr uint64_t kIdsPerWriter = 150;

struct Options {
  int cycles = 20;
  uint64_t seed = 0;
  std::vector<std::string> failpoints;  // the rotation's; empty: every one
  std::string shoald;
  std::string work;
  bool keep = false;
};

struct Totals {
  uint64_t acked = 0, refused = 0, in_doubt = 0, maintenance = 0;
  VerifyCounts verify;
  std::map<std::string, std::pair<int, int>> fp;  // name -> {cycles armed, cycles it crashed}
};

// A write shoald answered with one of these was not applied (validation, admission, a missing
// collection); any other failure (UNAVAILABLE, DEADLINE_EXCEEDED, ...) leaves it in doubt.
bool Refused(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

// One writer: upserts (new ids and overwrites) and deletes on its own ids, one request at a
// time, so each id's writes are ordered. Stops at the first write whose outcome is unknown.
class Writer {
 public:
  Writer(int index, uint64_t seed, std::vector<CollectionModel>* models, std::atomic<uint64_t>* seq,
         std::atomic<bool>* stop)
      : index_(index), rng_(seed), models_(models), seq_(seq), stop_(stop) {}

  void Run(Client& client) {
    while (!stop_->load()) {
      CollectionModel& m = (*models_)[rng_() % models_->size()];
      const int dice = int(rng_() % 100);
      const absl::Status status = dice < 3    ? Poison(client, m)
                                  : dice < 75 ? Upsert(client, m)
                                              : Delete(client, m);
      if (status.ok()) {
        ++acked;
      } else if (Refused(status)) {
        ++refused;
      } else {
        ++in_doubt;
        break;
      }
    }
  }

  uint64_t acked = 0, refused = 0, in_doubt = 0;

 private:
  std::vector<uint64_t> PickIds(size_t n) {
    std::vector<uint64_t> ids;
    while (ids.size() < n) {
      const uint64_t id = index_ * kIdsPerWriter + rng_() % kIdsPerWriter + 1;
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
  }

  // Records the outcome of a write of `present`/`vectors` to `ids` in the model.
  void Record(const absl::Status& s, CollectionModel& m, uint64_t seq,
              const std::vector<uint64_t>& ids, bool present,
              const std::vector<std::vector<float>>& vectors) {
    if (Refused(s)) return;
    for (size_t i = 0; i < ids.size(); ++i) {
      Slot& slot = m.slots[ids[i] - 1];
      const std::vector<float> v = present ? vectors[i] : std::vector<float>();
      if (s.ok()) {
        slot.present = present, slot.vector = v, slot.seq = seq;
      } else {
        slot.in_doubt = true, slot.doubt_present = present, slot.doubt_vector = v;
        slot.doubt_seq = seq;
      }
    }
  }

  absl::Status Upsert(Client& client, CollectionModel& m) {
    const uint64_t seq = ++*seq_;
    std::normal_distribution<float> normal;
    std::vector<Point> points;
    std::vector<uint64_t> ids = PickIds(1 + rng_() % 8);
    std::vector<std::vector<float>> vectors;
    for (uint64_t id : ids) {
      Point p{.id = id, .vector = std::vector<float>(m.def.dim), .attributes = AttributesFor(seq)};
      for (float& x : p.vector) x = normal(rng_);
      vectors.push_back(p.vector);
      points.push_back(std::move(p));
    }
    const absl::Status s = client.Upsert(m.def.name, points).status();
    Record(s, m, seq, ids, true, vectors);
    return s;
  }

  absl::Status Delete(Client& client, CollectionModel& m) {
    const uint64_t seq = ++*seq_;
    const std::vector<uint64_t> ids = PickIds(1 + rng_() % 4);
    const absl::Status s = client.Delete(m.def.name, ids).status();
    Record(s, m, seq, ids, false, {});
    return s;
  }

  // A write shoald must refuse: the wrong dimension, to ids nothing else writes.
  absl::Status Poison(Client& client, CollectionModel& m) {
    ++*seq_;
    Point p{.id = kPoisonIdBase + rng_() % kPoisonIds,
            .vector = std::vector<float>(m.def.dim + 1, 1.0f)};
    const absl::Status s = client.Upsert(m.def.name, {p}).status();
    if (s.ok()) return absl::InternalError("an upsert of the wrong dimension was acknowledged");
    return s;
  }

  const uint64_t index_;
  std::mt19937_64 rng_;
  std::vector<CollectionModel>* models_;
  std::atomic<uint64_t>* seq_;
  std::atomic<bool>* stop_;
};

// Flush (which merges past four segments) and BuildIndex on random collections.
void Maintain(Client& client, uint64_t seed, const std::atomic<bool>& stop, uint64_t* count) {
  std::mt19937_64 rng(seed);
  while (!stop.load()) {
    std::this_thread::sleep_for(milliseconds(20 + rng() % 120));
    const CollectionDef& def = kCollections[rng() % kCollections.size()];
    const bool build = def.type != IndexType::kFlat && rng() % 100 < 30;
    auto r = build ? client.BuildIndex(def.name) : client.Flush(def.name);
    ++*count;
    if (!r.ok() && !Refused(r.status())) return;  // shoald is gone
  }
}

absl::Status EnsureCollections(Client& client, std::vector<CollectionModel>& models) {
  for (CollectionModel& m : models) {
    if (m.created) continue;
    CollectionSpec spec{.name = m.def.name, .dim = m.def.dim, .metric = Metric::kL2};
    spec.index.type = m.def.type;
    spec.index.nlist = m.def.nlist;
    const absl::Status s = client.CreateCollection(spec);
    if (!s.ok() && s.code() != absl::StatusCode::kAlreadyExists) return s;
    m.created = true;
  }
  return absl::OkStatus();
}

// Whether the child `pid` has exited, without reaping it (LocalShoald reaps it).
bool Exited(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

class Harness {
 public:
  explicit Harness(Options o) : o_(std::move(o)), rng_(o_.seed) {
    for (const CollectionDef& def : kCollections) {
      models_.push_back({def, false, std::vector<Slot>(kWriters * kIdsPerWriter)});
    }
    data_dir_ = o_.work + "/data";
    std::filesystem::create_directories(data_dir_);
    for (const FailPointDef& f : kFailPoints) {
      if (o_.failpoints.empty() ||
          std::find(o_.failpoints.begin(), o_.failpoints.end(), f.name) != o_.failpoints.end()) {
        rotation_.push_back(&f);
      }
    }
    std::shuffle(rotation_.begin(), rotation_.end(), rng_);
    pending_ = rotation_;
  }

  int Run() {
    for (int cycle = 0; cycle < o_.cycles; ++cycle) {
      const auto [fp, nth] = PickFailPoint();
      std::string armed;
      if (fp) armed = absl::StrCat(fp->name, ":crash@", nth);
      if (absl::Status s = Cycle(cycle, armed); !s.ok()) return Fail(s);
      if (!fp) continue;
      // Fired: done. Missed: to the back of the rotation, so one that never fires does not
      // keep the others from their cycles.
      const bool was_pending = std::find(pending_.begin(), pending_.end(), fp) != pending_.end();
      pending_.erase(std::remove(pending_.begin(), pending_.end(), fp), pending_.end());
      if (last_fired_ != fp->name) {
        missed_.insert(fp->name);
        if (was_pending) pending_.push_back(fp);
      }
    }
    if (absl::Status s = Cycle(o_.cycles, "", /*last=*/true); !s.ok()) {
      return Fail(s);
    }
    Report();
    if (absl::Status s = CheckEveryFailPointFired(); !s.ok()) return Fail(s);
    if (!o_.keep) std::filesystem::remove_all(o_.work);
    return 0;
  }

 private:
  static const FailPointDef* Named(absl::string_view name) {
    for (const FailPointDef& f : kFailPoints) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  // Whether this cycle's workload (or, for recovery.*, its start) certainly reaches `f`. Every
  // step of storage/ runs in every cycle's workload (the writers append to the WAL; Flush and
  // BuildIndex freeze, write segments in groups, install manifests and clean up; flat_a is
  // never rebuilt, so its flushes pass four segments and merge within a cycle) except two that
  // run at start-up only:
  // - recovery.after_replay runs once per collection opened: before every collection exists
  //   (a cycle-0 start has none, and a manifest.* crash can cut the creates short) a start may
  //   not reach its Nth hit.
  // - recovery.between_removals runs once per leftover file removed: only a crash at
  //   manifest.before_old_removed is certain to leave one (the old MANIFEST-<n>), so it is armed
  //   in the cycle right after that one fired.
  bool Eligible(const FailPointDef& f) const {
    const absl::string_view name = f.name;
    if (name == "recovery.after_replay") {
      return std::all_of(models_.begin(), models_.end(),
                         [](const CollectionModel& m) { return m.created; });
    }
    if (name == "recovery.between_removals") return last_fired_ == "manifest.before_old_removed";
    return true;
  }

  // The rotation: the first failpoint that has not fired yet and this cycle reaches (at a random
  // hit, or at the first if it was armed before and missed: those go last); when only
  // recovery.between_removals is left, its set-up, manifest.before_old_removed; once every one
  // has fired, a random one, or none (a timed kill) one time in four.
  std::pair<const FailPointDef*, uint64_t> PickFailPoint() {
    auto at = [&](const FailPointDef* f) {
      return std::make_pair(f, missed_.count(f->name) ? 1 : 1 + rng_() % f->max_nth);
    };
    const FailPointDef* removals = Named("recovery.between_removals");
    const bool removals_pending =
        std::find(pending_.begin(), pending_.end(), removals) != pending_.end();
    if (removals_pending && Eligible(*removals)) return at(removals);  // its chance is now
    for (const FailPointDef* f : pending_) {
      if (Eligible(*f)) return at(f);
    }
    if (removals_pending) return at(Named("manifest.before_old_removed"));
    if (!pending_.empty()) return {nullptr, 0};  // a timed kill; the next cycle may reach them
    if (rng_() % 4 == 0) return {nullptr, 0};
    return at(rotation_[rng_() % rotation_.size()]);
  }

  absl::StatusOr<std::unique_ptr<LocalShoald>> StartShoald(const std::string& armed) {
    return LocalShoald::Start({.binary = o_.shoald,
                               .data_dir = data_dir_,
                               .extra_args = {"--build-memory-bytes", "1048576"},
                               .env = {"SHOAL_FAILPOINTS=" + armed}});
  }

  // Starts shoald (armed with `armed`), verifies, then (unless `last`) writes until it dies. A
  // "recovery.*" failpoint crashes the start itself: shoald then starts again, unarmed, and the
  // cycle ends with a timed kill.
  absl::Status Cycle(int cycle, std::string armed, bool last = false) {
    std::string name = armed.substr(0, armed.find(':'));
    last_fired_.clear();
    if (!name.empty()) ++totals_.fp[name].first;
    auto started = StartShoald(armed);
    // A failure from here to the end of Verify is the previous crash's.
    blame_ = last_crash_;
    const bool at_start = absl::StartsWith(name, "recovery.");
    if (at_start && !started.ok() &&
        started.status().message().find("failpoint " + name + " hit") != std::string::npos) {
      ++totals_.fp[name].second;
      last_fired_ = name;
      last_crash_ = blame_ = absl::StrCat(last_crash_, ", then cycle ", cycle, ", ", armed,
                                          " while recovering from it");
      std::printf("cycle %d: %s (during recovery)\n", cycle, armed.c_str());
      started = StartShoald("");
      armed.clear(), name.clear();
    } else if (at_start) {
      std::printf("cycle %d: %s (not reached at start)\n", cycle, armed.c_str());
      armed.clear(), name.clear();
    }
    if (!started.ok()) return started.status();
    std::unique_ptr<LocalShoald> server = *std::move(started);
    ClientOptions copts;
    copts.timeout = milliseconds(60000);  // verification: generous on a loaded CI machine
    copts.retry.max_retries = 0;
    Client client(server->grpc_addr(), copts);
    if (absl::Status s =
            Verify(client, data_dir_, o_.seed * 1000003 + cycle, models_, &totals_.verify);
        !s.ok()) {
      return s;
    }
    totals_.verified_acked = totals_.acked;
    blame_ = absl::StrCat("cycle ", cycle, ", ", armed.empty() ? "timed kill -9" : armed);
    if (last) {
      server->Kill9();
      return absl::OkStatus();
    }
    const size_t log_before = server->ReadLog().size();
    // A create can meet the armed failpoint (manifest.*): shoald is then gone, and the
    // workload below only finds that out.
    if (absl::Status s = EnsureCollections(client, models_); !s.ok() && Refused(s)) return s;
    Workload(cycle, *server, !armed.empty());
    const std::string log = server->ReadLog().substr(log_before);
    const size_t at = log.find("failpoint " + name + " hit");
    if (!name.empty() && at != std::string::npos) ++totals_.fp[name].second, last_fired_ = name;
    if (absl::Status s = Fatal(log); !s.ok()) return s;
    last_crash_ = absl::StrCat("cycle ", cycle, ", ", armed.empty() ? "timed kill -9" : armed,
                               !armed.empty() && at == std::string::npos ? " (not reached)" : "");
    std::printf("cycle %d: %s%s\n", cycle, armed.empty() ? "timed kill -9" : armed.c_str(),
                armed.empty() || at != std::string::npos ? "" : " (not reached: timed kill -9)");
    std::fflush(stdout);
    return absl::OkStatus();
  }

  // A failpoint crash is expected; anything else that ended shoald (an abort, a check) is not.
  static absl::Status Fatal(const std::string& log) {
    for (const char* bad : {"Assertion", "terminate called", "AddressSanitizer", "Segmentation"}) {
      if (log.find(bad) != std::string::npos) {
        return absl::InternalError(
            absl::StrCat("shoald died of '", bad, "':\n",
                         log.substr(log.size() > 4000 ? log.size() - 4000 : 0)));
      }
    }
    return absl::OkStatus();
  }

  // Writers and maintenance until shoald dies at its failpoint, or a kill -9 (a random moment
  // for a timed cycle; a bound for a failpoint the run did not reach).
  void Workload(int cycle, LocalShoald& server, bool armed) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t>& seq = seq_;
    std::vector<std::unique_ptr<Writer>> writers;
    std::vector<std::thread> threads;
    ClientOptions copts;
    copts.timeout = milliseconds(10000);
    copts.retry.max_retries = 0;
    Client client(server.grpc_addr(), copts);
    for (int w = 0; w < kWriters; ++w) {
      writers.push_back(
          std::make_unique<Writer>(w, o_.seed ^ (uint64_t(cycle) << 8 | w), &models_, &seq, &stop));
    }
    // Every writer exists before any thread starts: push_back must not move them under a thread.
    for (auto& w : writers)
      threads.emplace_back([&client, writer = w.get()] { writer->Run(client); });
    uint64_t maintenance = 0;
    threads.emplace_back([&] { Maintain(client, o_.seed + cycle, stop, &maintenance); });
    const auto limit =
        Clock::now() + (armed ? milliseconds(15000) : milliseconds(300 + rng_() % 2500));
    while (Clock::now() < limit && !Exited(server.pid()))
      std::this_thread::sleep_for(milliseconds(5));
    server.Kill9();  // reaps a process a failpoint ended; kills one that is still running
    stop = true;
    for (std::thread& t : threads) t.join();
    for (const auto& w : writers) {
      totals_.acked += w->acked, totals_.refused += w->refused, totals_.in_doubt += w->in_doubt;
    }
    totals_.maintenance += maintenance;
  }

  // `blame_` names the crash whose recovery failed (or the cycle that was running).
  int Fail(const absl::Status& s) {
    std::fprintf(stderr,
                 "\nshoal-crash FAILED: seed %lu, %s\n%s\n"
                 "data directory and shoald log kept in %s (rerun: shoal-crash --seed %lu "
                 "--cycles %d%s%s)\n",
                 (unsigned long)o_.seed, blame_.c_str(), s.ToString().c_str(), o_.work.c_str(),
                 (unsigned long)o_.seed, o_.cycles, o_.failpoints.empty() ? "" : " --failpoints ",
                 absl::StrJoin(o_.failpoints, ",").c_str());
    return 1;
  }

  void Report() {
    std::printf("\nshoal-crash: seed %lu, %d crash cycles, all recovered\n", (unsigned long)o_.seed,
                o_.cycles);
    std::printf(
        "  writes acknowledged and verified: %lu (refused: %lu, in doubt at a crash: %lu,"
        " resolved: %lu)\n",
        (unsigned long)totals_.verified_acked, (unsigned long)totals_.refused,
        (unsigned long)totals_.in_doubt, (unsigned long)totals_.verify.doubts_resolved);
    std::printf("  ids checked: %lu, exact searches checked: %lu, maintenance calls: %lu\n",
                (unsigned long)totals_.verify.ids_checked,
                (unsigned long)totals_.verify.searches_checked, (unsigned long)totals_.maintenance);
    std::printf("  %-30s %7s %7s %s\n", "failpoint", "armed", "crashed", "recovered");
    for (const FailPointDef& f : kFailPoints) {
      const auto [armed, hit] = totals_.fp[f.name];
      std::printf("  %-30s %7d %7d %s\n", f.name, armed, hit,
                  !armed ? "-"
                  : hit  ? "ok"
                         : "NOT REACHED");
    }
  }

  // Every failpoint armed is armed in a cycle that reaches it (Eligible), and one that missed
  // is armed again at its first hit: one that still never fired was moved off the path the
  // workload takes (or the workload stopped taking it), and the harness would test nothing at
  // that step. With as many cycles as the rotation has failpoints, every one must have been
  // armed.
  absl::Status CheckEveryFailPointFired() {
    std::vector<std::string> silent, unarmed;
    for (const FailPointDef& f : kFailPoints) {
      const auto [armed, hit] = totals_.fp[f.name];
      if (armed > 0 && hit == 0) silent.push_back(absl::StrCat(f.name, " (armed ", armed, ")"));
    }
    if (size_t(o_.cycles) >= rotation_.size()) {
      for (const FailPointDef* f : rotation_) {
        if (totals_.fp[f->name].first == 0) unarmed.push_back(f->name);
      }
    }
    if (!silent.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("armed and never fired: ", absl::StrJoin(silent, ", ")));
    }
    if (!unarmed.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("never armed in ", o_.cycles,
                       " cycles (misses were re-armed): ", absl::StrJoin(unarmed, ", ")));
    }
    return absl::OkStatus();
  }

  struct Counts : Totals {
    uint64_t verified_acked = 0;
  };

  const Options o_;
  std::mt19937_64 rng_;
  std::vector<CollectionModel> models_;
  std::string data_dir_;
  std::vector<const FailPointDef*> rotation_;  // shuffled by the seed
  std::vector<const FailPointDef*> pending_;   // of rotation_, in order: not fired yet
  std::set<std::string> missed_;               // armed in a cycle that ended without them
  std::string last_fired_;                     // the failpoint that fired in the last cycle
  std::string last_crash_ = "first start (no crash yet)";
  std::string blame_;
  std::atomic<uint64_t> seq_{0};
  Counts totals_;
};

// kFailPoints and core's registry name the same failpoints, and --failpoints only those: a
// misspelt name is refused rather than never armed.
absl::Status CheckFailPointNames(const std::vector<std::string>& chosen) {
  for (const FailPointDef& f : kFailPoints) {
    if (!core::IsFailPointName(f.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kFailPoints names '", f.name, "', which kFailPointNames does not"));
    }
  }
  auto bounded = [](absl::string_view name) {
    return std::any_of(std::begin(kFailPoints), std::end(kFailPoints),
                       [&](const FailPointDef& f) { return f.name == name; });
  };
  for (std::string_view known : core::kFailPointNames) {
    const absl::string_view name(known.data(), known.size());
    if (!bounded(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("failpoint '", name, "' has no entry (a highest hit) in kFailPoints"));
    }
  }
  for (const std::string& name : chosen) {
    if (!core::IsFailPointName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--failpoints: unknown failpoint '", name, "' (known: ",
                       absl::StrJoin(core::kFailPointNames, ", ",
                                     [](std::string* out, std::string_view n) { out->append(n); }),
                       ")"));
    }
  }
  return absl::OkStatus();
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  o.seed = std::random_device{}();
  const char* bin = std::getenv("SHOAL_BIN_DIR");
  o.shoald = std::string(bin ? bin : "build/bin") + "/shoald";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--cycles" && absl::SimpleAtoi(v, &o.cycles)) {
      ++i;
    } else if (a == "--seed" && absl::SimpleAtoi(v, &o.seed)) {
      ++i;
    } else if (a == "--failpoints" && *v != '\0') {
      o.failpoints = absl::StrSplit(v, ','), ++i;
    } else if (a == "--shoald") {
      o.shoald = v, ++i;
    } else if (a == "--work") {
      o.work = v, ++i;
    } else if (a == "--keep") {
      o.keep = true;
    } else {
      std::fprintf(stderr,
                   "usage: shoal-crash [--cycles N] [--seed S] [--failpoints NAME,...] "
                   "[--shoald PATH] [--work DIR] [--keep]\n");
      std::exit(2);
    }
  }
  if (absl::Status s = CheckFailPointNames(o.failpoints); !s.ok()) {
    std::fprintf(stderr, "shoal-crash: %s\n", std::string(s.message()).c_str());
    std::exit(2);
  }
  if (o.work.empty()) {
    char tmpl[] = "/tmp/shoal-crash-XXXXXX";
    o.work = mkdtemp(tmpl);
  }
  return o;
}

}  // namespace
}  // namespace shoal::crash

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  shoal::crash::Options o = shoal::crash::ParseArgs(argc, argv);
  std::printf("shoal-crash: seed %lu, %d cycles, work dir %s\n", (unsigned long)o.seed, o.cycles,
              o.work.c_str());
  std::fflush(stdout);
  return shoal::crash::Harness(std::move(o)).Run();
}
