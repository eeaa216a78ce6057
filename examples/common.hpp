// What mnist_mlp and mnist_cnn share: options, the training loop, a progress
// bar, and the metrics CSV with its SVG chart.
#pragma once
#include <rumus/rumus.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace example {

using namespace rumus;

struct Config {
  std::string name;  // program name, used for default file names
  std::string data = "/usr/share/datasets/fashion-mnist";
  int epochs = 5;
  std::int64_t batch_size = 64;
  double lr = 0;  // 0: the optimizer's default below
  std::string optimizer = "adamw";
  std::string schedule = "onecycle";
  double weight_decay = -1;  // < 0: the optimizer's default
  bool nesterov = true;      // sgd only
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::uint64_t seed = 0;
  std::string device = "cpu";
  std::string save, resume, checkpoint, metrics;
  std::int64_t limit = 0;  // train examples per epoch (0 = all), for quick runs and benchmarks
};

inline void usage(const Config& c) {
  std::printf(
      "usage: %s [options]\n"
      "  --data DIR          MNIST-format IDX files, raw or .gz (default %s)\n"
      "  --epochs N          default %d\n"
      "  --batch-size N      default %lld\n"
      "  --lr X              peak learning rate (default: per optimizer, see README)\n"
      "  --optimizer NAME    sgd (momentum 0.9, nesterov), adam, adamw or rmsprop (default %s)\n"
      "  --schedule NAME     onecycle, cosine or constant (default %s)\n"
      "  --weight-decay X    default: 5e-4 for sgd, 0.05 for adamw, 0 otherwise\n"
      "  --nesterov 0|1      Nesterov momentum for sgd (default 1)\n"
      "  --threads N         CPU threads for OpenMP and OpenBLAS (default %d)\n"
      "  --seed N            seeds initialisation, shuffling and dropout (default %llu)\n"
      "  --device D          cpu, vulkan or vulkan:N (default %s)\n"
      "  --save PATH         final model, safetensors (default %s.safetensors)\n"
      "  --checkpoint PATH   checkpoint written after every epoch (default %s.ckpt.safetensors)\n"
      "  --resume PATH       continue from a checkpoint\n"
      "  --metrics CSV       per-epoch metrics; an SVG chart is written beside it (default %s_metrics.csv)\n"
      "  --limit N           train on the first N examples of each epoch's order (default: all)\n",
      c.name.c_str(), c.data.c_str(), c.epochs, (long long)c.batch_size, c.optimizer.c_str(), c.schedule.c_str(),
      c.threads, (unsigned long long)c.seed, c.device.c_str(), c.name.c_str(), c.name.c_str(), c.name.c_str());
}

// Returns false after printing a message when the command line is wrong.
inline bool parse(Config& c, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(c);
      std::exit(0);
    }
    if (i + 1 >= argc || a.rfind("--", 0) != 0) {
      std::fprintf(stderr, "%s: unknown or incomplete option '%s' (try --help)\n", c.name.c_str(), a.c_str());
      return false;
    }
    std::string v = argv[++i];
    try {
      if (a == "--data") c.data = v;
      else if (a == "--epochs") c.epochs = std::stoi(v);
      else if (a == "--batch-size") c.batch_size = std::stoll(v);
      else if (a == "--lr") c.lr = std::stod(v);
      else if (a == "--optimizer") c.optimizer = v;
      else if (a == "--schedule") c.schedule = v;
      else if (a == "--weight-decay") c.weight_decay = std::stod(v);
      else if (a == "--nesterov") c.nesterov = std::stoi(v) != 0;
      else if (a == "--threads") c.threads = std::stoi(v);
      else if (a == "--seed") c.seed = std::stoull(v);
      else if (a == "--device") c.device = v;
      else if (a == "--save") c.save = v;
      else if (a == "--checkpoint") c.checkpoint = v;
      else if (a == "--resume") c.resume = v;
      else if (a == "--metrics") c.metrics = v;
      else if (a == "--limit") c.limit = std::stoll(v);
      else {
        std::fprintf(stderr, "%s: unknown option '%s' (try --help)\n", c.name.c_str(), a.c_str());
        return false;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: option %s expects a number, got '%s'\n", c.name.c_str(), a.c_str(), v.c_str());
      return false;
    }
  }
  if (c.epochs < 1 || c.batch_size < 1 || c.limit < 0) {
    std::fprintf(stderr, "%s: --epochs and --batch-size must be >= 1, --limit >= 0\n", c.name.c_str());
    return false;
  }
  if (c.save.empty()) c.save = c.name + ".safetensors";
  if (c.checkpoint.empty()) c.checkpoint = c.name + ".ckpt.safetensors";
  if (c.metrics.empty()) c.metrics = c.name + "_metrics.csv";
  return true;
}

// One line on stderr, redrawn in place at most ten times a second.
class ProgressBar {
 public:
  ProgressBar(std::string label, std::int64_t total) : label_(std::move(label)), total_(total) {}
  void update(std::int64_t done, std::int64_t samples, double loss, bool force = false) {
    double t = seconds();
    if (!force && t - last_ < 0.1) return;
    last_ = t;
    double rate = samples / std::max(t, 1e-9);
    double eta = done > 0 ? t / double(done) * double(total_ - done) : 0;
    const int width = 30;
    int filled = int(width * done / std::max<std::int64_t>(total_, 1));
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld  %.0f samples/s  loss %.4f  ETA %02d:%02d ", label_.c_str(),
                 std::string(std::size_t(filled), '=').c_str(), std::string(std::size_t(width - filled), ' ').c_str(),
                 (long long)done, (long long)total_, rate, loss, int(eta) / 60, int(eta) % 60);
    std::fflush(stderr);
  }
  void finish() { std::fprintf(stderr, "\n"); }
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::string label_;
  std::int64_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double last_ = -1;
};

struct EpochMetrics {
  int epoch;
  double train_loss, test_loss, test_accuracy, samples_per_sec, seconds;
};

inline void write_csv(const std::string& path, const std::vector<EpochMetrics>& rows) {
  std::string s = "epoch,train_loss,test_loss,test_accuracy,samples_per_sec,seconds\n";
  for (auto& r : rows)
    s += fmt::format("{},{:.6f},{:.6f},{:.6f},{:.1f},{:.2f}\n", r.epoch, r.train_loss, r.test_loss, r.test_accuracy,
                     r.samples_per_sec, r.seconds);
  io::write_file_atomic(path, s);
}

// The rows of an earlier run's CSV up to `epochs`, so a resumed run keeps its history.
inline std::vector<EpochMetrics> read_csv(const std::string& path, std::int64_t epochs) {
  std::vector<EpochMetrics> rows;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    EpochMetrics r{};
    if (std::sscanf(line.c_str(), "%d,%lf,%lf,%lf,%lf,%lf", &r.epoch, &r.train_loss, &r.test_loss, &r.test_accuracy,
                    &r.samples_per_sec, &r.seconds) == 6 &&
        r.epoch <= epochs)
      rows.push_back(r);
  }
  return rows;
}

// Two panels: losses (train and test) and test accuracy, per epoch.
inline std::string svg_chart(const std::string& title, const std::vector<EpochMetrics>& rows) {
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
  std::vector<double> train, test, acc;
  for (auto& r : rows) train.push_back(r.train_loss), test.push_back(r.test_loss), acc.push_back(r.test_accuracy);
  panel(left, "loss", {{"train loss", train}, {"test loss", test}}, {"#1f77b4", "#d62728"});
  panel(left + pw + gap, "test accuracy", {{"test accuracy", acc}}, {"#2ca02c"});
  return s + "</svg>\n";
}

struct Evaluation {
  double loss, accuracy;
};

template <class Net>
Evaluation evaluate(Net& net, data::DataLoader& test, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  double loss = 0;
  std::int64_t correct = 0, n = 0;
  for (auto& [x, y] : test) {
    Tensor logits = net.forward(x.to(dev));
    Tensor target = y.to(dev);
    loss += cross_entropy(logits, target, {.reduction = Reduction::sum}).item();
    correct += std::int64_t(sum(eq(argmax(logits, 1), target).to(DType::i64)).item());
    n += y.size(0);
  }
  net.train();
  return {loss / double(n), double(correct) / double(n)};
}

inline std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, const std::vector<Tensor>& params,
                                                        double lr) {
  auto wd = [&](double fallback) { return c.weight_decay >= 0 ? c.weight_decay : fallback; };
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{
                                                    .lr = lr, .momentum = 0.9, .weight_decay = wd(5e-4), .nesterov = c.nesterov});
  if (c.optimizer == "adam") return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = lr, .weight_decay = wd(0)});
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = lr, .weight_decay = wd(0.05)});
  if (c.optimizer == "rmsprop")
    return std::make_unique<optim::RMSprop>(params, optim::RMSpropOptions{.lr = lr, .weight_decay = wd(0)});
  throw Error(fmt::format("--optimizer: expected sgd, adam, adamw or rmsprop, got '{}'", c.optimizer));
}

inline std::unique_ptr<optim::LRScheduler> make_schedule(const Config& c, optim::Optimizer& opt, double lr,
                                                         std::int64_t total_steps) {
  if (c.schedule == "onecycle") return std::make_unique<optim::OneCycleLR>(opt, lr, std::max<std::int64_t>(total_steps, 2));
  if (c.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(opt, std::max<std::int64_t>(total_steps, 1));
  if (c.schedule == "constant") return std::make_unique<optim::StepLR>(opt, std::max<std::int64_t>(total_steps, 1), 1.0);
  throw Error(fmt::format("--schedule: expected onecycle, cosine or constant, got '{}'", c.schedule));
}

// Trains make_net() on MNIST-format data as configured; returns the exit status.
template <class Net>
int train(Config c, std::function<double(const std::string& optimizer)> default_lr) {
  set_num_threads(c.threads);
  manual_seed(c.seed);
  const Device dev = Device::parse(c.device);
  Net net;
  net.to(dev);

  data::Mnist train_set(c.data, data::Split::Train), test_set(c.data, data::Split::Test);
  const data::Normalize norm = data::Normalize::fit(train_set.images());
  train_set.set_normalize(norm);
  test_set.set_normalize(norm);
  data::DataLoader train_loader(std::move(train_set),
                                {.batch_size = c.batch_size, .shuffle = true, .drop_last = true, .seed = c.seed});
  // Evaluate in training-size batches: a batch that fits in a training step fits
  // in a forward pass on every device. Larger ones (1000) made the CNN's
  // convolution buffers exceed a device's largest buffer (128 MiB on lavapipe).
  data::DataLoader test_loader(std::move(test_set), {.batch_size = c.batch_size});
  const std::int64_t per_epoch =
      c.limit ? std::min(train_loader.size(), c.limit / c.batch_size) : train_loader.size();

  const double lr = c.lr > 0 ? c.lr : default_lr(c.optimizer);
  auto opt = make_optimizer(c, net.parameters(), lr);
  auto sched = make_schedule(c, *opt, lr, per_epoch * c.epochs);

  io::TrainingState state;
  std::vector<EpochMetrics> history;
  if (!c.resume.empty()) {
    state = io::load_checkpoint(c.resume, net, *opt);
    sched->set_step(state.step);
    history = read_csv(c.metrics, state.epoch);
    std::fprintf(stderr, "resumed from %s at epoch %lld, step %lld\n", c.resume.c_str(), (long long)state.epoch,
                 (long long)state.step);
  }
  std::printf("%s: %lld parameters, %s, lr %g, %s schedule, batch %lld, %d threads, device %s\n", c.name.c_str(),
              (long long)net.num_parameters(), c.optimizer.c_str(), lr, c.schedule.c_str(), (long long)c.batch_size,
              c.threads, dev.str().c_str());

  for (std::int64_t epoch = state.epoch; epoch < c.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    ProgressBar bar(fmt::format("epoch {}/{}", epoch + 1, c.epochs), per_epoch);
    double loss_sum = 0, running = 0;
    std::int64_t batch = 0, samples = 0, skip = state.step - epoch * per_epoch;
    for (auto& [x, y] : train_loader) {
      if (batch >= per_epoch) break;
      if (batch++ < skip) continue;  // done before the checkpoint this run resumed from
      Tensor loss = cross_entropy(net.forward(x.to(dev)), y.to(dev));
      GradientStore grads = backward(loss);
      opt->step(grads);
      sched->step();
      ++state.step;
      double l = loss.item();
      loss_sum += l;
      running = samples ? 0.98 * running + 0.02 * l : l;
      samples += x.size(0);
      bar.update(batch, samples, running, batch == per_epoch);
    }
    const double secs = bar.seconds();
    bar.finish();
    Evaluation ev = evaluate(net, test_loader, dev);
    const std::int64_t trained = std::max<std::int64_t>(batch - std::max<std::int64_t>(skip, 0), 1);
    history.push_back({int(epoch + 1), loss_sum / double(trained), ev.loss, ev.accuracy, double(samples) / secs, secs});
    std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
                (long long)epoch + 1, history.back().train_loss, ev.loss, ev.accuracy, history.back().samples_per_sec);
    std::fflush(stdout);
    state.epoch = epoch + 1;
    io::save_checkpoint(c.checkpoint, net, *opt, state);
    write_csv(c.metrics, history);
    io::write_file_atomic(std::filesystem::path(c.metrics).replace_extension(".svg").string(),
                          svg_chart(c.name + " on " + std::filesystem::path(c.data).filename().string(), history));
  }
  io::save_safetensors(net.state_dict(), c.save, {{"model", c.name}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", c.save.c_str(), c.checkpoint.c_str(), c.metrics.c_str());
  return 0;
}

// libgomp reads its wait policy when it loads, before main(), so the example
// sets it and restarts itself once. With the default (spin for a while), idle
// OpenMP threads keep both cores of a small machine busy between parallel
// loops, and the data-loading thread and OpenBLAS wait for a core: training
// ran 5-15x slower on 2 cores. A policy already in the environment is kept.
inline void tune_runtime(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("RUMUS_RUNTIME_TUNED")) return;
  setenv("RUMUS_RUNTIME_TUNED", "1", 1);
  if (setenv("OMP_WAIT_POLICY", "passive", 1) == 0) execv("/proc/self/exe", argv);  // returns only on failure
}

// main() for an example: parses options and reports errors without a stack trace.
template <class Net>
int main(const char* name, int default_epochs, std::function<double(const std::string&)> default_lr, int argc,
         char** argv) {
  tune_runtime(argv);
  Config c;
  c.name = name;
  c.epochs = default_epochs;
  if (!parse(c, argc, argv)) return 2;
  try {
    return train<Net>(c, default_lr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace example
