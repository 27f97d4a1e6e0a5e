// Progress: a one-line progress bar with rate and ETA, redrawn in place on a terminal and
// printed every few seconds as plain lines otherwise (logs, CI). Counts `unit`s ("vectors"),
// or percent of a phase when unit is "%" (build-index: the server reports phase and percent).
//
// Thread-safety: none; one thread drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace shoal::ctl {

class Progress {
 public:
  Progress(std::string what, std::optional<uint64_t> total, std::string unit = "vectors");
  void Update(uint64_t done);
  void Finish(uint64_t done);

 private:
  std::string Line(uint64_t done) const;
  const std::string what_;
  const std::optional<uint64_t> total_;
  const std::string unit_;
  const bool tty_;
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace shoal::ctl
