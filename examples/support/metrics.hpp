// Per-epoch metrics: a CSV file and, beside it, an SVG chart of the losses and
// the held-out accuracy (same name, .svg), both rewritten after every epoch.
#pragma once
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
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
};

struct EpochMetrics {
  int epoch;
  double train_loss, eval_loss, eval_accuracy;  // eval: on the held-out split
  double per_sec, seconds;                      // per_sec: units of MetricNames per second
};

inline std::string metrics_csv(const std::vector<EpochMetrics>& rows, const MetricNames& names) {
  std::string s = fmt::format("epoch,train_loss,{0}_loss,{0}_accuracy,{1}_per_sec,seconds\n", names.split, names.unit);
  for (auto& r : rows)
    s += fmt::format("{},{:.6f},{:.6f},{:.6f},{:.1f},{:.2f}\n", r.epoch, r.train_loss, r.eval_loss, r.eval_accuracy,
                     r.per_sec, r.seconds);
  return s;
}

// The rows of an earlier run's CSV up to `epochs`, so a resumed run keeps its history.
inline std::vector<EpochMetrics> read_metrics(const std::string& path, std::int64_t epochs) {
  std::vector<EpochMetrics> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    EpochMetrics r{};
    if (std::sscanf(line.c_str(), "%d,%lf,%lf,%lf,%lf,%lf", &r.epoch, &r.train_loss, &r.eval_loss, &r.eval_accuracy,
                    &r.per_sec, &r.seconds) == 6 &&
        r.epoch <= epochs)
      rows.push_back(r);
  }
  return rows;
}

// Two panels: losses (train and held-out) and held-out accuracy, per epoch.
inline std::string metrics_svg(const std::string& title, const std::vector<EpochMetrics>& rows,
                               const MetricNames& names) {
  const double W = 900, H = 380, top = 50, bottom = 50, left = 60, gap = 80, pw = (W - 2 * left - gap) / 2,
               ph = H - top - bottom;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
      W, H, W / 2, title);
  auto panel = [&](double x0, const std::string& name, std::vector<std::pair<std::string, std::vector<double>>> series,
                   std::vector<std::string> colors) {
    double lo = 1e300, hi = -1e300;
    for (auto& [n, v] : series)
      for (double y : v) lo = std::min(lo, y), hi = std::max(hi, y);
    if (!(hi > lo)) hi = lo + 1, lo -= 1;
    double pad = (hi - lo) * 0.08;
    lo -= pad, hi += pad;
    const int n = int(rows.size());
    auto X = [&](int i) { return x0 + (n > 1 ? pw * (i - 1) / (n - 1) : pw / 2); };
    auto Y = [&](double y) { return top + ph * (hi - y) / (hi - lo); };
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", x0, top,
                     pw, ph);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x0 + pw / 2, top - 8, name);
    for (int k = 0; k <= 4; ++k) {
      double y = lo + (hi - lo) * k / 4;
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f}</text>\n",
                       x0, x0 + pw, Y(y), Y(y), x0 - 6, Y(y) + 4, y);
    }
    for (int i = 1; i <= n; ++i)
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(i), top + ph + 18, i);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">epoch</text>\n", x0 + pw / 2, top + ph + 38);
    for (std::size_t j = 0; j < series.size(); ++j) {
      std::string pts;
      for (int i = 0; i < n; ++i) pts += fmt::format("{:.1f},{:.1f} ", X(i + 1), Y(series[j].second[std::size_t(i)]));
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, colors[j]);
      for (int i = 0; i < n; ++i)
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(i + 1),
                         Y(series[j].second[std::size_t(i)]), colors[j]);
      s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>"
                       "<text x=\"{}\" y=\"{}\">{}</text>\n",
                       x0 + 10, x0 + 30, top + 14 + 16 * j, top + 14 + 16 * j, colors[j], x0 + 36, top + 18 + 16 * j,
                       series[j].first);
    }
  };
  std::vector<double> train, eval, acc;
  for (auto& r : rows) train.push_back(r.train_loss), eval.push_back(r.eval_loss), acc.push_back(r.eval_accuracy);
  const std::string split = names.split_title;
  panel(left, "loss", {{"train loss", train}, {split + " loss", eval}}, {"#1f77b4", "#d62728"});
  panel(left + pw + gap, split + " accuracy", {{split + " accuracy", acc}}, {"#2ca02c"});
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
