// Per-epoch metrics: a CSV file and, beside it, an SVG chart of the losses and
// the held-out accuracy (same name, .svg), both rewritten after every epoch.
// A trainer without an accuracy (the autoencoder) has no accuracy column and
// no accuracy panel.
#pragma once
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace example {

// What a trainer's held-out split and throughput are: the MNIST trainers
// evaluate on the test set and count images, char_lm validates on held-out
// text and counts tokens.
struct MetricNames {
  std::string split = "test";        // CSV columns <split>_loss, <split>_accuracy
  std::string split_title = "test";  // the chart's word for it
  std::string unit = "samples";      // CSV column <unit>_per_sec
  bool accuracy = true;              // false: no <split>_accuracy column and no accuracy panel
};

struct EpochMetrics {
  int epoch;
  double train_loss, eval_loss, eval_accuracy;  // eval: on the held-out split (accuracy unused without one)
  double per_sec, seconds;                      // per_sec: units of MetricNames per second
};

inline std::string metrics_csv(const std::vector<EpochMetrics>& rows, const MetricNames& names) {
  std::string s = names.accuracy
                      ? fmt::format("epoch,train_loss,{0}_loss,{0}_accuracy,{1}_per_sec,seconds\n", names.split, names.unit)
                      : fmt::format("epoch,train_loss,{0}_loss,{1}_per_sec,seconds\n", names.split, names.unit);
  for (auto& r : rows)
    s += names.accuracy ? fmt::format("{},{:.6f},{:.6f},{:.6f},{:.1f},{:.2f}\n", r.epoch, r.train_loss, r.eval_loss,
                                      r.eval_accuracy, r.per_sec, r.seconds)
                        : fmt::format("{},{:.6f},{:.6f},{:.1f},{:.2f}\n", r.epoch, r.train_loss, r.eval_loss,
                                      r.per_sec, r.seconds);
  return s;
}

// The rows of an earlier run's CSV up to `epochs`, so a resumed run keeps its history.
inline std::vector<EpochMetrics> read_metrics(const std::string& path, std::int64_t epochs,
                                              const MetricNames& names = {}) {
  std::vector<EpochMetrics> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    EpochMetrics r{};
    const bool read = names.accuracy ? std::sscanf(line.c_str(), "%d,%lf,%lf,%lf,%lf,%lf", &r.epoch, &r.train_loss,
                                                   &r.eval_loss, &r.eval_accuracy, &r.per_sec, &r.seconds) == 6
                                     : std::sscanf(line.c_str(), "%d,%lf,%lf,%lf,%lf", &r.epoch, &r.train_loss,
                                                   &r.eval_loss, &r.per_sec, &r.seconds) == 5;
    if (read && r.epoch <= epochs) rows.push_back(r);
  }
  return rows;
}

// A value axis from lo to hi in round steps (1, 2 or 5 times a power of ten),
// about four of them, padded so no point sits on the frame, and kept within
// [min, max] (an accuracy axis within [0, 1]).
struct Axis {
  double lo, hi, step;
};
inline Axis nice_axis(double lo, double hi, double min, double max) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;  // no finite value to show
  const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::abs(lo) * 0.05, 0.01);  // one value: a band around it
  lo = std::max(lo - pad, min), hi = std::min(hi + pad, max);
  const double raw = (hi - lo) / 4, magnitude = std::pow(10.0, std::floor(std::log10(raw))), f = raw / magnitude;
  const double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  return {std::max(min, std::floor(lo / step) * step), std::min(max, std::ceil(hi / step) * step), step};
}

// Two panels: losses (train and held-out) and held-out accuracy, per epoch;
// the loss panel alone without an accuracy. Each panel's legend is below it, off the data.
inline std::string metrics_svg(const std::string& title, const std::vector<EpochMetrics>& rows,
                               const MetricNames& names) {
  const double W = names.accuracy ? 900 : 480, H = 410, top = 50, bottom = 80, left = 60, gap = 80,
               pw = names.accuracy ? (W - 2 * left - gap) / 2 : W - 2 * left, ph = H - top - bottom;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
      W, H, W / 2, title);
  auto panel = [&](double x0, const std::string& name, std::vector<std::pair<std::string, std::vector<double>>> series,
                   std::vector<std::string> colors, double min, double max) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (auto& [n, v] : series)
      for (double y : v)
        if (std::isfinite(y)) lo = std::min(lo, y), hi = std::max(hi, y);
    const Axis axis = nice_axis(lo, hi, min, max);
    const int n = int(rows.size());
    auto X = [&](int i) { return x0 + (n > 1 ? pw * (i - 1) / (n - 1) : pw / 2); };
    auto Y = [&](double y) { return top + ph * (axis.hi - std::clamp(y, axis.lo, axis.hi)) / (axis.hi - axis.lo); };
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", x0, top,
                     pw, ph);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x0 + pw / 2, top - 8, name);
    const int decimals = std::max(0, int(-std::floor(std::log10(axis.step) + 1e-9)));
    const int ticks = int(std::lround((axis.hi - axis.lo) / axis.step));
    for (int k = 0; k <= ticks; ++k) {
      const double y = axis.lo + axis.step * k;
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.{}f}</text>\n",
                       x0, x0 + pw, Y(y), Y(y), x0 - 6, Y(y) + 4, y + 0.0, decimals);  // + 0.0: no "-0.00"
    }
    const int every = std::max(1, (n + 9) / 10);  // at most about ten epoch labels
    for (int i = 1; i <= n; ++i)
      if ((i - 1) % every == 0 || i == n)
        s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(i), top + ph + 18, i);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">epoch</text>\n", x0 + pw / 2, top + ph + 36);
    double legend_x = x0;
    const double legend_y = top + ph + 60;
    for (std::size_t j = 0; j < series.size(); ++j) {
      std::string pts, dots;
      for (int i = 0; i < n; ++i) {
        const double v = series[j].second[std::size_t(i)];
        if (!std::isfinite(v)) continue;  // a diverged epoch (nan, inf) has no point
        pts += fmt::format("{:.1f},{:.1f} ", X(i + 1), Y(v));
        dots += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(i + 1), Y(v), colors[j]);
      }
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, colors[j]);
      s += dots;
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>"
                       "<text x=\"{}\" y=\"{}\">{}</text>\n",
                       legend_x, legend_x + 20, legend_y - 4, legend_y - 4, colors[j], legend_x + 26, legend_y,
                       series[j].first);
      legend_x += 46 + 7.0 * double(series[j].first.size());  // past the label (about 7 px a character)
    }
  };
  std::vector<double> train, eval, acc;
  for (auto& r : rows) train.push_back(r.train_loss), eval.push_back(r.eval_loss), acc.push_back(r.eval_accuracy);
  const std::string split = names.split_title;
  const double inf = std::numeric_limits<double>::infinity();
  panel(left, "loss", {{"train loss", train}, {split + " loss", eval}}, {"#1f77b4", "#d62728"}, 0, inf);
  if (names.accuracy) panel(left + pw + gap, split + " accuracy", {{split + " accuracy", acc}}, {"#2ca02c"}, 0, 1);
  return s + "</svg>\n";
}

// Rewrites `csv_path` and the chart beside it (each atomically).
inline void write_metrics(const std::string& csv_path, const std::string& title, const std::vector<EpochMetrics>& rows,
                          const MetricNames& names = {}) {
  rumus::io::write_file_atomic(csv_path, metrics_csv(rows, names));
  rumus::io::write_file_atomic(std::filesystem::path(csv_path).replace_extension(".svg").string(),
                               metrics_svg(title, rows, names));
}

}  // namespace example
