#include "bench/harness/quiet_check.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shoal::bench {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double TicksPerSecond() { return double(sysconf(_SC_CLK_TCK)); }

bool InTree(const ProcTable& table, pid_t pid, pid_t root) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    if (pid == root) return true;
    auto it = table.find(pid);
    if (it == table.end()) return false;
    pid = it->second.ppid;
  }
  return pid == root;
}

}  // namespace

ProcTable ReadProcTable() {
  ProcTable table;
  DIR* dir = opendir("/proc");
  if (!dir) return table;
  while (dirent* e = readdir(dir)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (name) state ppid ...": the name may hold spaces and parentheses.
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    ProcSample s;
    s.name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 4) s.ppid = pid_t(std::atoi(field.c_str()));
      if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
    }
    s.ticks = utime + stime;
    table.emplace(pid, std::move(s));
  }
  closedir(dir);
  return table;
}

uint64_t ReadBusyTicks() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;  // "cpu": the sum over every CPU
  uint64_t v[8] = {};
  for (uint64_t& x : v) stat >> x;
  // user nice system idle iowait irq softirq steal
  return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
}

double ReadLoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

uint64_t TreeTicks(const ProcTable& table, pid_t root) {
  uint64_t ticks = 0;
  for (const auto& [pid, s] : table) {
    if (InTree(table, pid, root)) ticks += s.ticks;
  }
  return ticks;
}

std::string BusiestForeign(const ProcTable& before, const ProcTable& after, pid_t root,
                           double seconds, size_t limit) {
  std::vector<std::pair<double, std::string>> busy;
  for (const auto& [pid, s] : after) {
    if (InTree(after, pid, root)) continue;
    auto it = before.find(pid);
    const uint64_t used = s.ticks - (it != before.end() ? std::min(it->second.ticks, s.ticks) : 0);
    if (used == 0) continue;
    const double cores = double(used) / TicksPerSecond() / std::max(seconds, 1e-3);
    busy.push_back({cores, absl::StrFormat("%s (%d) %.2f cores", s.name, pid, cores)});
  }
  std::sort(busy.begin(), busy.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (size_t i = 0; i < busy.size() && i < limit; ++i) {
    absl::StrAppend(&out, i ? ", " : "", busy[i].second);
  }
  return out.empty() ? "none seen (short-lived processes or the kernel)" : out;
}

QuietCheck::QuietCheck(QuietCheckOptions options, std::function<void(const std::string&)> log)
    : options_(options), log_(std::move(log)) {}

absl::Status QuietCheck::BeforeRun() {
  const double deadline = NowSeconds() + options_.wait_seconds;
  for (bool told = false;; told = true) {
    const double load = ReadLoadAverage();
    if (load < 0) return absl::FailedPreconditionError("--quiet-check: /proc/loadavg unreadable");
    if (load <= options_.max_load) return absl::OkStatus();
    // What is running now: CPU over the next second.
    const ProcTable before = ReadProcTable();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const std::string busiest = BusiestForeign(before, ReadProcTable(), getpid(), 1.0);
    if (NowSeconds() >= deadline) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--quiet-check: the load average is %.2f, above %.2f, after waiting %.0f s; not "
          "measuring on a busy machine (busiest now: %s)",
          load, options_.max_load, options_.wait_seconds, busiest));
    }
    if (!told) {
      log_(
          absl::StrFormat("--quiet-check: load average %.2f > %.2f, waiting up to %.0f s "
                          "(busiest now: %s)",
                          load, options_.max_load, options_.wait_seconds, busiest));
    }
    std::this_thread::sleep_for(std::chrono::seconds(4));
  }
}

void QuietCheck::Start() {
  start_table_ = ReadProcTable();
  start_busy_ = ReadBusyTicks();
  start_seconds_ = NowSeconds();
}

QuietCheck::Usage QuietCheck::Measure() const {
  const ProcTable table = ReadProcTable();
  const uint64_t busy = ReadBusyTicks() - start_busy_;
  Usage u;
  u.seconds = std::max(NowSeconds() - start_seconds_, 1e-3);
  const pid_t self = getpid();
  // Our tree's CPU meanwhile; a process that started during the point counts from zero.
  uint64_t own = 0;
  for (const auto& [pid, s] : table) {
    if (!InTree(table, pid, self) && pid != options_.server_pid) continue;
    auto it = start_table_.find(pid);
    own += s.ticks - (it != start_table_.end() ? std::min(it->second.ticks, s.ticks) : 0);
  }
  u.own_cores = double(own) / TicksPerSecond() / u.seconds;
  u.foreign_cores = double(busy > own ? busy - own : 0) / TicksPerSecond() / u.seconds;
  u.busiest = BusiestForeign(start_table_, table, self, u.seconds);
  return u;
}

absl::Status QuietCheck::Finish(const std::string& what) {
  const Usage u = Measure();
  if (u.foreign_cores <= options_.max_foreign_cores) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--quiet-check: other processes used %.2f cores during %s (at most %.2f allowed); the "
      "figure is not kept (busiest: %s)",
      u.foreign_cores, what, options_.max_foreign_cores, u.busiest));
}

}  // namespace shoal::bench
