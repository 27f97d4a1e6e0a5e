// QuietCheck: shoal-bench's --quiet-check. A figure taken while something else runs on the
// machine is not a figure (README, "Performance"), so the harness refuses to measure unless:
//   - before the first point, the 1-minute load average is at most `max_load` (it waits up to
//     `wait_seconds` for a previous run's load to decay, printing what it waits for);
//   - during each point, processes outside the harness's own tree (this process and what it
//     started: shoald) used at most `max_foreign_cores` of CPU on average.
// A refusal names the busiest foreign processes, so the operator knows what to stop.
//
// Thread-safety: QuietCheck is not thread-safe (the harness's main thread owns it).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"

namespace shoal::bench {

struct QuietCheckOptions {
  double max_load = 1.5;
  double max_foreign_cores = 0.3;
  double wait_seconds = 120;
  pid_t server_pid = 0;  // a running shoald the harness did not start (--server-pid): also ours
};

// One process as /proc shows it: CPU so far (clock ticks), parent, name.
struct ProcSample {
  pid_t ppid = 0;
  uint64_t ticks = 0;
  std::string name;
};
using ProcTable = std::map<pid_t, ProcSample>;

// Reads every process of /proc.
ProcTable ReadProcTable();
// The machine's busy CPU so far (clock ticks, every CPU: /proc/stat's first line minus idle
// and iowait).
uint64_t ReadBusyTicks();
// The 1-minute load average; a negative value when /proc/loadavg is unreadable.
double ReadLoadAverage();

// The processes of `after` outside `root`'s tree that used CPU since `before`, busiest first,
// as "name (pid) 0.42 cores" joined by ", " (at most `limit`), over `seconds` of wall time.
std::string BusiestForeign(const ProcTable& before, const ProcTable& after, pid_t root,
                           double seconds, size_t limit = 3);
// CPU ticks of `root` and its descendants in `table`.
uint64_t TreeTicks(const ProcTable& table, pid_t root);

class QuietCheck {
 public:
  // `log` prints a progress line (the harness's Progress::Line).
  QuietCheck(QuietCheckOptions options, std::function<void(const std::string&)> log);

  // Before the first point: waits for the load average to fall to max_load, else refuses.
  absl::Status BeforeRun();
  // Around one point: Start before it, Finish after; Finish refuses when foreign processes
  // used more than max_foreign_cores meanwhile (`what` names the point).
  void Start();
  absl::Status Finish(const std::string& what);

  // What Finish judges: CPU since Start, in cores averaged over the wall time.
  struct Usage {
    double own_cores = 0;      // this process's tree and server_pid
    double foreign_cores = 0;  // the rest of the machine's busy time
    double seconds = 0;
    std::string busiest;  // BusiestForeign
  };
  Usage Measure() const;

 private:
  const QuietCheckOptions options_;
  const std::function<void(const std::string&)> log_;
  ProcTable start_table_;
  uint64_t start_busy_ = 0;
  double start_seconds_ = 0;
};

}  // namespace shoal::bench
