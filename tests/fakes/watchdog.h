// Watchdog: fails the test process loudly if a scope takes longer than a bound, so a
// deadlock shows up as a failure with a message instead of a CI timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace shoal::testing {

class Watchdog {
 public:
  Watchdog(std::chrono::seconds bound, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, bound] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, bound, [this] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: '%s' did not finish in %lld s: deadlock?\n", what_.c_str(),
                     static_cast<long long>(bound.count()));
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace shoal::testing
