#include "bench/harness/process_usage.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace shoal::bench {

ProcessUsage ReadProcessUsage(pid_t pid) {
  ProcessUsage u;
  const std::string dir = "/proc/" + std::to_string(pid);
  {
    std::ifstream stat(dir + "/stat");
    std::string line;
    std::getline(stat, line);
    // Fields after the parenthesised command name (which may hold spaces): state is field 3,
    // utime 14, stime 15.
    const size_t close = line.rfind(')');
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      unsigned long long utime = 0, stime = 0;
      for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
      }
      u.cpu_seconds = double(utime + stime) / double(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "VmRSS: %llu kB", &kb) == 1) u.rss_bytes = kb * 1024;
    if (std::sscanf(line.c_str(), "VmHWM: %llu kB", &kb) == 1) u.peak_rss_bytes = kb * 1024;
  }
  return u;
}

bool ResetPeakRss(pid_t pid) {
  std::ofstream out("/proc/" + std::to_string(pid) + "/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

}  // namespace shoal::bench
