// The command line of mnist_mlp and mnist_cnn, parsed with CLI11: every
// option accepts both "--epochs 2" and "--epochs=2", "--help" lists them with
// their defaults, and a malformed value ("--epochs 2x", "--seed -1") stops the
// program with a message that names the option and a nonzero exit status.
#pragma once
#include <CLI/CLI.hpp>
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace example {

struct Options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int epochs = 1;
  std::int64_t batch_size = 64;
  std::optional<double> lr;            // unset: default_lr, or 0.05 for sgd
  double default_lr = 2e-3;            // the program's --lr for adam, adamw and rmsprop
  std::string optimizer = "adamw";
  std::string schedule = "onecycle";
  std::optional<double> weight_decay;  // unset: 0.05 for adamw, 5e-4 for sgd, 0 otherwise
  bool nesterov = true;                // sgd only
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::uint64_t seed = 0;
  std::string device = "cpu";
  std::string save, checkpoint, resume, metrics;  // empty: named after the program
  std::int64_t limit = 0;              // training examples per epoch; 0: all
  bool amp = false;                    // mixed precision: autocast + GradScaler
};

// The learning rate a run uses: --lr, else the program's default for its optimizer.
inline double learning_rate(const Options& o) { return o.lr.value_or(o.optimizer == "sgd" ? 0.05 : o.default_lr); }

// A whole number of at least `min`, written in decimal digits only.
inline CLI::Validator whole_number(std::int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        const bool negative = !text.empty() && text[0] == '-';
        const std::string digits = negative ? text.substr(1) : text;
        const bool well_formed =
            !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
        errno = 0;
        const unsigned long long magnitude = well_formed ? std::strtoull(digits.c_str(), nullptr, 10) : 0;
        if (!well_formed || errno == ERANGE) return "expected a whole number, got '" + text + "'";
        const long double value = negative ? -static_cast<long double>(magnitude) : magnitude;
        if (value < min) return "expected a whole number >= " + std::to_string(min) + ", got " + text;
        return {};
      },
      "");
}

// A decimal number (e.g. 0.05, 2e-3) of at least `min`, or above it when `strict`.
inline CLI::Validator number_at_least(double min, bool strict = false) {
  return CLI::Validator(
      [min, strict](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
          return "expected a number, got '" + text + "'";
        if (strict ? !(value > min) : value < min)
          return fmt::format("expected a number {} {}, got {}", strict ? ">" : ">=", min, text);
        return {};
      },
      "");
}

// Registers every option on `app`; the defaults are the values `o` holds now.
// File names left empty are named after the program (app's name).
inline void add_options(CLI::App& app, Options& o) {
  const std::string name = app.get_name();
  if (o.save.empty()) o.save = name + ".safetensors";
  if (o.checkpoint.empty()) o.checkpoint = name + ".ckpt.safetensors";
  if (o.metrics.empty()) o.metrics = name + "_metrics.csv";
  // A repeated option takes its last value, so scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_formatter()->column_width(32);

  app.add_option("--data", o.data, "directory of MNIST-format IDX files, raw or .gz")
      ->type_name("DIR")
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "passes over the training set")->type_name("N")->capture_default_str()->check(whole_number(1));
  app.add_option("--batch-size", o.batch_size, "examples per training step")->type_name("N")->capture_default_str()->check(whole_number(1));
  app.add_option("--lr", o.lr, fmt::format("peak learning rate of the schedule (default {:g}, 0.05 with sgd)", o.default_lr))
      ->type_name("X")
      ->check(number_at_least(0, true));
  app.add_option("--optimizer", o.optimizer, "sgd (momentum 0.9, Nesterov), adam, adamw or rmsprop")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam", "adamw", "rmsprop"}));
  app.add_option("--schedule", o.schedule, "learning rate per batch: onecycle, cosine or constant")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"onecycle", "cosine", "constant"}));
  app.add_option("--weight-decay", o.weight_decay, "default 0.05 for adamw, 5e-4 for sgd, 0 otherwise")
      ->type_name("X")
      ->check(number_at_least(0));
  app.add_option("--nesterov", o.nesterov, "Nesterov momentum for sgd")
      ->type_name("0|1")
      ->capture_default_str()
      ->check(CLI::IsMember({"0", "1"}).description(""));
  app.add_option("--threads", o.threads, "CPU threads for OpenMP and OpenBLAS")
      ->type_name("N")
      ->capture_default_str()
      ->check(whole_number(1));
  app.add_option("--seed", o.seed, "seeds initialisation, shuffling and dropout")
      ->type_name("N")
      ->capture_default_str()
      ->check(whole_number(0));
  app.add_option("--device", o.device, "cpu, vulkan, vulkan:N, or best (a real GPU if any, else the CPU)")
      ->type_name("D")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              rumus::Device::parse(text);
              return {};
            } catch (const std::exception& e) {
              return e.what();
            }
          },
          ""));
  app.add_option("--save", o.save, "the final model, safetensors")->type_name("PATH")->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint, "checkpoint written after every epoch")
      ->type_name("PATH")
      ->capture_default_str();
  app.add_option("--resume", o.resume, "continue from a checkpoint")->type_name("PATH");
  app.add_option("--metrics", o.metrics, "per-epoch metrics CSV; an SVG chart is written beside it")
      ->type_name("CSV")
      ->capture_default_str();
  app.add_option("--limit", o.limit, "train on the first N examples of each epoch's order (0: all)")
      ->type_name("N")
      ->capture_default_str()
      ->check(whole_number(0));
  app.add_flag("--amp", o.amp,
               "mixed precision: matrix products and convolutions in f16 (bf16 on the CPU) with f32 "
               "accumulation, f32 parameters, dynamic loss scaling");
}

}  // namespace example
