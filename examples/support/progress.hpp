// Progress of one epoch on stderr. On a terminal, one line redrawn in place
// (at most ten times a second) with a bar; otherwise (a log file, a pipe, CI)
// plain lines, one every few seconds and one at the end, so logs stay readable.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace example {

// The loss shown is the mean train loss of the epoch's steps so far, labelled
// so: at the end of the epoch, the train loss the epoch's summary reports.
struct ProgressOptions {
  std::string unit = "samples";       // what the rate counts, per second
  std::string loss = "train loss";    // what the loss is: "rank 0 train loss" where ranks differ
  double line_interval_seconds = 5.0;  // between plain lines (no terminal)
};

class Progress {
 public:
  // `total` steps of the epoch; the clock starts now.
  Progress(std::string label, std::int64_t total, ProgressOptions options = {})
      : label_(std::move(label)), total_(total), options_(std::move(options)) {}

  // After each step: steps and samples (options' unit) done so far, and that step's loss.
  void update(std::int64_t done, std::int64_t samples, double loss) {
    loss_sum_ += loss;
    mean_loss_ = loss_sum_ / double(std::max<std::int64_t>(done, 1));
    done_ = done;
    samples_ = samples;
    const double now = seconds();
    if (now - shown_at_ < (terminal_ ? 0.1 : options_.line_interval_seconds) && done != total_) return;
    show(now);
  }

  // Whether update(done, ...) would draw: a loop that keeps its losses on a
  // device reads them (and waits for the device) only then.
  bool due(std::int64_t done) const {
    return done == total_ || seconds() - shown_at_ >= (terminal_ ? 0.1 : options_.line_interval_seconds);
  }

  // After each step, with the mean loss of the epoch's steps so far (read
  // only when due): the same display without a per-step value.
  void advance(std::int64_t done, std::int64_t samples, double mean_loss) {
    mean_loss_ = mean_loss;
    done_ = done;
    samples_ = samples;
    show(seconds());
  }

  // Ends the display: the final state, then a new line on a terminal.
  void finish() {
    if (shown_done_ != done_) show(seconds());
    if (terminal_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  void show(double now) {
    const double rate = samples_ / std::max(now, 1e-9);
    const double eta = done_ > 0 ? now / double(done_) * double(total_ - done_) : 0;
    char eta_text[32];
    std::snprintf(eta_text, sizeof eta_text, "%02d:%02d", int(eta) / 60, int(eta) % 60);
    if (terminal_) {
      const int width = 30;
      const int filled = int(width * done_ / std::max<std::int64_t>(total_, 1));
      std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.0f %s/s  %s %.4f (epoch mean)  ETA %s ", label_.c_str(),
                   std::string(std::size_t(filled), '=').c_str(), std::string(std::size_t(width - filled), ' ').c_str(),
                   (long long)done_, (long long)total_, rate, options_.unit.c_str(), options_.loss.c_str(), mean_loss_,
                   eta_text);
    } else {
      std::fprintf(stderr, "%s: %lld/%lld batches, %.0f %s/s, %s %.4f (epoch mean), ETA %s\n", label_.c_str(),
                   (long long)done_, (long long)total_, rate, options_.unit.c_str(), options_.loss.c_str(), mean_loss_,
                   eta_text);
    }
    std::fflush(stderr);
    shown_at_ = now;
    shown_done_ = done_;
  }

  std::string label_;
  std::int64_t total_;
  ProgressOptions options_;
  bool terminal_ = isatty(fileno(stderr)) != 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double shown_at_ = 0;  // the first line comes after one interval, not at the first step
  std::int64_t shown_done_ = -1, done_ = 0, samples_ = 0;
  double loss_sum_ = 0, mean_loss_ = 0;
};

}  // namespace example
