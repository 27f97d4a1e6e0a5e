#include "client/shoalctl/progress.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"

namespace shoal::ctl {
namespace {

std::string Duration(double seconds) {
  if (seconds < 60) return absl::StrFormat("%.0fs", seconds);
  if (seconds < 3600) return absl::StrFormat("%dm%02ds", int(seconds) / 60, int(seconds) % 60);
  return absl::StrFormat("%dh%02dm", int(seconds) / 3600, (int(seconds) % 3600) / 60);
}

}  // namespace

Progress::Progress(std::string what, std::optional<uint64_t> total, std::string unit)
    : what_(std::move(what)),
      total_(total),
      unit_(std::move(unit)),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string Progress::Line(uint64_t done) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? double(done) / elapsed : 0;
  if (!total_ || *total_ == 0) {
    return absl::StrFormat("%s %d %s  %.0f %s/s  %s", what_, done, unit_, rate, unit_,
                           Duration(elapsed));
  }
  const double fraction = std::min(1.0, double(done) / double(*total_));
  constexpr int kWidth = 30;
  const int filled = int(fraction * kWidth);
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  const double eta = rate > 0 ? double(*total_ - std::min(done, *total_)) / rate : 0;
  if (unit_ == "%") {
    return absl::StrFormat("%s [%s] %3.0f%%  %.1f %%/s  ETA %s", what_, bar, fraction * 100, rate,
                           rate > 0 ? Duration(eta) : "?");
  }
  return absl::StrFormat("%s [%s] %3.0f%% %d/%d  %.0f %s/s  ETA %s", what_, bar, fraction * 100,
                         done, *total_, rate, unit_, Duration(eta));
}

void Progress::Update(uint64_t done) {
  const auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(5000);
  if (now - last_draw_ < every) return;
  last_draw_ = now;
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", Line(done).c_str());
  } else {
    std::fprintf(stderr, "%s\n", Line(done).c_str());
  }
}

void Progress::Finish(uint64_t done) {
  std::fprintf(stderr, tty_ ? "\r%s\033[K\n" : "%s\n", Line(done).c_str());
}

}  // namespace shoal::ctl
