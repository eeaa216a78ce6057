// Trains a small GPT (decoder-only transformer) to predict the next byte of a
// text, by default Debian's fortunes, then writes text of its own.
//
// The whole training loop is in this file, top to bottom: data and split,
// model, optimizer and schedule, resuming, then per epoch forward,
// backward(loss), optimizer step, validation and checkpoint, and at the end
// sampling with temperature and top-k. What is not about training (option
// parsing, the progress line, the metrics files) is in support/.
// bench/char_lm_torch.py is the same model, data split and batches in PyTorch.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;

namespace {

constexpr const char* kFortunes = "/usr/share/games/fortunes";

struct LmOptions {
  std::int64_t context = 128, d_model = 256, heads = 4, layers = 4;
  double dropout = 0.1;
  std::int64_t steps_per_epoch = 500;
  std::string prompt = "The ";
  std::int64_t sample_length = 500, top_k = 40;
  double temperature = 0.8;
};

// At most 1 GiB of text: all of it is held in memory (twice: whole, then
// split); more is an error, and so is a device (/dev/zero has no end).
constexpr std::uint64_t kMaxTextBytes = std::uint64_t(1) << 30;

// The text: a file, or every plain-text fortune file of a directory in name
// order (the .dat indexes and .u8 variants skipped).
std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (auto& entry : fs::directory_iterator(path)) {
      const auto ext = entry.path().extension();
      if (entry.is_regular_file() && ext != ".dat" && ext != ".u8") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (fs::is_character_file(status) || fs::is_block_file(status))
      throw ValueError(fmt::format("--data '{}' is a device, not a text file or a directory of them", path));
    files.push_back(path);
  }
  auto too_long = [&] {
    return ValueError(fmt::format("--data '{}' holds more than {} bytes (1 GiB) of text, the most char_lm reads; "
                                  "expected a shorter text",
                                  path, kMaxTextBytes));
  };
  // Files are measured before reading; pipes are read up to the limit.
  std::uint64_t size = 0;
  for (auto& f : files) {
    std::error_code ec;
    if (fs::is_regular_file(f, ec)) size += fs::file_size(f, ec);
  }
  if (size > kMaxTextBytes) throw too_long();
  std::string text;
  text.reserve(std::size_t(size));
  std::vector<char> chunk(std::size_t(1) << 20);
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw IoError(fmt::format("cannot read '{}'", f.string()));
    while (in) {
      in.read(chunk.data(), std::streamsize(chunk.size()));
      const auto got = std::size_t(in.gcount());
      if (text.size() + got > kMaxTextBytes) throw too_long();
      text.append(chunk.data(), got);
    }
    if (in.bad()) throw IoError(fmt::format("cannot read '{}'", f.string()));
  }
  return text;
}

// 64-bit FNV-1a of the text: a resume on other text of the same size is refused too.
std::string checksum(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

// What this run trains, stored in its checkpoints; a resume must match it.
// The sampling options (--prompt, --temperature, ...) are free to change.
io::RunSettings lm_settings(const example::Options& o, const LmOptions& lm, const optim::Optimizer& opt, double lr,
                            const std::string& text) {
  io::RunSettings s = example::training_settings(o, "gpt", opt, lr);
  s["context"] = std::to_string(lm.context);
  s["d_model"] = std::to_string(lm.d_model);
  s["heads"] = std::to_string(lm.heads);
  s["layers"] = std::to_string(lm.layers);
  s["dropout"] = fmt::format("{}", lm.dropout);
  s["steps_per_epoch"] = std::to_string(lm.steps_per_epoch);
  s["text_bytes"] = std::to_string(text.size());
  s["text_fnv1a"] = checksum(text);
  return s;
}

// splitmix64: the batch offsets are a function of (seed, step, row) only, so a
// resumed run and the PyTorch reference draw the same windows.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Inputs and next-byte targets (N, L) of training step `step`: random windows of `text`.
std::pair<Tensor, Tensor> batch_at(const std::string& text, std::int64_t step, std::int64_t batch, std::int64_t context,
                                   std::uint64_t seed, Device dev) {
  std::vector<std::int64_t> x(std::size_t(batch * context)), y(x.size());
  const std::uint64_t windows = std::uint64_t(text.size()) - std::uint64_t(context);
  for (std::int64_t r = 0; r < batch; ++r) {
    const std::uint64_t start = mix(mix(seed) ^ std::uint64_t(step * batch + r)) % windows;
    for (std::int64_t t = 0; t < context; ++t) {
      x[std::size_t(r * context + t)] = std::uint8_t(text[start + std::uint64_t(t)]);
      y[std::size_t(r * context + t)] = std::uint8_t(text[start + std::uint64_t(t) + 1]);
    }
  }
  return {tensor(x, {batch, context}).to(dev), tensor(y, {batch, context}).to(dev)};
}

struct Evaluation {
  double loss, accuracy;
};

// Mean next-byte loss and accuracy over the held-out text, in consecutive windows.
Evaluation evaluate(nn::GPT& net, const std::string& val, std::int64_t batch, std::int64_t context, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  const std::int64_t windows = (std::int64_t(val.size()) - 1) / context;
  Tensor loss, correct;  // summed on the device, read once at the end
  std::int64_t n = 0;
  for (std::int64_t w0 = 0; w0 < windows; w0 += batch) {
    const std::int64_t rows = std::min(batch, windows - w0);
    std::vector<std::int64_t> x(std::size_t(rows * context)), y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = std::uint8_t(val[std::size_t(w0 * context) + i]);
      y[i] = std::uint8_t(val[std::size_t(w0 * context) + i + 1]);
    }
    Tensor logits = net(tensor(x, {rows, context}).to(dev)).reshape({rows * context, net.config.vocab_size});
    Tensor target = tensor(y, {rows * context}).to(dev);
    Tensor batch_loss = cross_entropy(logits, target, {.reduction = Reduction::sum});
    Tensor batch_correct = sum(eq(argmax(logits, 1), target).to(DType::i64));
    loss = loss.defined() ? loss + batch_loss : batch_loss;
    correct = correct.defined() ? correct + batch_correct : batch_correct;
    n += rows * context;
  }
  net.train();
  if (n == 0) return {0.0, 0.0};
  return {loss.item() / double(n), double(correct.item<std::int64_t>()) / double(n)};
}

// `length` bytes continuing `prompt`: each drawn from the softmax of the last
// logits / temperature, restricted to the top_k most likely.
std::string sample(nn::GPT& net, const std::string& prompt, std::int64_t length, double temperature,
                   std::int64_t top_k, std::uint64_t seed, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  std::vector<std::int64_t> tokens;
  for (char c : prompt) tokens.push_back(std::uint8_t(c));
  if (tokens.empty()) tokens.push_back('\n');
  std::mt19937_64 rng(seed);
  std::string out;
  const std::int64_t vocab = net.config.vocab_size;
  for (std::int64_t i = 0; i < length; ++i) {
    const std::int64_t l = std::min<std::int64_t>(std::int64_t(tokens.size()), net.config.context);
    std::vector<std::int64_t> window(tokens.end() - l, tokens.end());
    Tensor logits = net(tensor(window, {1, l}).to(dev)).select(1, l - 1).reshape({vocab});
    std::vector<float> z = logits.cpu().to_vector<float>();
    std::vector<std::int64_t> order(static_cast<std::size_t>(vocab));
    for (std::int64_t v = 0; v < vocab; ++v) order[std::size_t(v)] = v;
    const std::int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int64_t a, std::int64_t b) { return z[std::size_t(a)] > z[std::size_t(b)]; });
    std::vector<double> weights(static_cast<std::size_t>(k));
    const double top = z[std::size_t(order[0])];
    for (std::int64_t j = 0; j < k; ++j)
      weights[std::size_t(j)] = std::exp((double(z[std::size_t(order[std::size_t(j)])]) - top) / temperature);
    std::discrete_distribution<std::int64_t> pick(weights.begin(), weights.end());
    const std::int64_t next = order[std::size_t(pick(rng))];
    tokens.push_back(next);
    out.push_back(char(next));
  }
  net.train();
  return out;
}

int train(const example::Options& o, const LmOptions& lm) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation and dropout
  const Device dev = Device::parse(o.device);

  // Data: bytes; the last 5 % held out for validation.
  const std::string text = read_text(o.data);
  const std::size_t split = text.size() * 95 / 100;
  const std::string train_text = text.substr(0, split), val_text = text.substr(split);
  if (std::int64_t(train_text.size()) <= lm.context + 1 || std::int64_t(val_text.size()) <= lm.context + 1)
    throw Error(fmt::format("{} bytes of text are too few for a context of {} (5 % is held out)",
                            text.size(), lm.context));
  // A batch holds distinct windows of the training text at most (more would
  // repeat them, and fail to allocate long before a step runs).
  const std::int64_t windows = std::int64_t(train_text.size()) - lm.context;
  if (o.batch_size > windows)
    throw ValueError(fmt::format("--batch-size {} is larger than the {} windows of --context {} in the training text; "
                                 "expected --batch-size <= {}",
                                 o.batch_size, windows, lm.context, windows));

  nn::GPT net({.vocab_size = 256,
               .context = lm.context,
               .d_model = lm.d_model,
               .num_heads = lm.heads,
               .num_layers = lm.layers,
               .dropout = lm.dropout});
  net.to(dev);

  const double lr = example::learning_rate(o);
  auto opt = example::make_optimizer(o.optimizer, net.parameters(), lr, o.weight_decay, o.nesterov);
  auto sched = example::make_schedule(o.schedule, *opt, lr, lm.steps_per_epoch * o.epochs);

  io::TrainingState state;  // epochs and steps completed
  state.settings = lm_settings(o, lm, *opt, lr, text);

  // Resuming: model, optimizer state, random generator and counters; a
  // checkpoint of a run with other settings is refused.
  std::vector<example::EpochMetrics> history;
  if (!o.resume.empty()) {
    state = io::load_checkpoint(o.resume, net, *opt, state.settings);
    example::check_epochs_left(state.epoch, o.epochs, o.resume);
    sched->set_step(state.step);
    history = example::read_metrics(o.metrics, state.epoch);
    std::fprintf(stderr, "resumed from %s at epoch %lld, step %lld\n", o.resume.c_str(), (long long)state.epoch,
                 (long long)state.step);
  }
  auto count = [](std::int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); };
  std::printf("char_lm: %lld parameters (%s, d_model %lld, %s, context %lld), %zu bytes of text "
              "(%zu held out), %s, lr %g, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), count(lm.layers, "layer").c_str(), (long long)lm.d_model,
              count(lm.heads, "head").c_str(), (long long)lm.context, text.size(), val_text.size(),
              o.optimizer.c_str(), lr, (long long)o.batch_size, o.threads, dev.str().c_str());
  std::fflush(stdout);

  optim::GradScaler scaler({.enabled = o.amp});  // passes through without --amp
  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), lm.steps_per_epoch,
                               {.unit = "tokens"});
    // The loss is summed on the device and read only when progress is shown:
    // reading it every step would make the host wait for each step before
    // recording the next (the PyTorch reference reads one every 100 steps).
    Tensor loss_sum;
    std::int64_t steps = 0, tokens = 0;
    for (; steps < lm.steps_per_epoch;) {
      auto [x, y] = batch_at(train_text, state.step, o.batch_size, lm.context, o.seed, dev);
      Tensor loss;
      {
        AutocastGuard amp(o.amp);  // --amp: matrix products in 16 bits, the loss in f32
        Tensor logits = net(x);
        loss = cross_entropy(logits.reshape({o.batch_size * lm.context, 256}), y.reshape({o.batch_size * lm.context}));
      }
      GradientStore grads = backward(scaler.scale(loss));
      scaler.step(*opt, grads);  // unscaled first; skipped on inf/nan
      scaler.update();
      sched->step();
      ++state.step;
      const Tensor l = loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + l : l;
      tokens += o.batch_size * lm.context;
      if (progress.due(++steps)) progress.advance(steps, tokens, loss_sum.item() / double(steps));
    }
    const double seconds = progress.seconds();
    progress.finish();

    const Evaluation val = evaluate(net, val_text, o.batch_size, lm.context, dev);
    const double train_loss = loss_sum.defined() ? loss_sum.item() / double(steps) : 0.0;
    history.push_back({int(epoch + 1), train_loss, val.loss, val.accuracy,
                       double(tokens) / seconds, seconds});
    std::printf("epoch %lld: train loss %.4f, val loss %.4f, val accuracy %.4f, %.0f tokens/s\n",
                (long long)epoch + 1, history.back().train_loss, val.loss, val.accuracy,
                history.back().per_sec);
    std::fflush(stdout);

    state.epoch = epoch + 1;
    io::save_checkpoint(o.checkpoint, net, *opt, state);
    example::write_metrics(o.metrics, "char_lm on " + std::filesystem::path(o.data).filename().string(), history,
                           {.split = "val", .split_title = "validation", .unit = "tokens"});
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "char_lm"}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), o.checkpoint.c_str(), o.metrics.c_str());
  std::printf("sample (temperature %g, top-k %lld):\n%s%s\n", lm.temperature, (long long)lm.top_k, lm.prompt.c_str(),
              sample(net, lm.prompt, lm.sample_length, lm.temperature, lm.top_k, o.seed, dev).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  example::Options options;
  options.data = kFortunes;
  options.epochs = 5;
  options.batch_size = 32;
  options.schedule = "cosine";
  options.default_lr = 1e-3;  // as bench/char_lm_torch.py
  LmOptions lm;
  CLI::App app{"Trains a small GPT on text (Debian's fortunes by default) and samples from it.", "char_lm"};
  example::add_options(app, options);
  app.get_option("--data")->description("a text file, or a directory of fortune files (1 GiB at most)")->type_name("PATH");
  app.get_option("--batch-size")->description("sequences per training step");
  app.remove_option(app.get_option("--limit"));  // --steps-per-epoch sets the length of an epoch
  app.add_option("--context", lm.context, "tokens (bytes) per sequence")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--d-model", lm.d_model, "width of the model")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--heads", lm.heads, "attention heads (divide --d-model)")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--layers", lm.layers, "transformer blocks")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--dropout", lm.dropout, "dropout probability")->type_name("P")->capture_default_str()->check(example::number_at_least(0));
  app.add_option("--steps-per-epoch", lm.steps_per_epoch, "training steps between validations")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--prompt", lm.prompt, "text the final sample continues")->type_name("TEXT")->capture_default_str();
  app.add_option("--sample-length", lm.sample_length, "bytes sampled at the end")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  app.add_option("--temperature", lm.temperature, "sampling temperature")->type_name("X")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--top-k", lm.top_k, "sample among the k most likely bytes (0: all)")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options, lm);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "char_lm: out of memory; a smaller --batch-size, --context, --d-model or --layers needs less\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 1;
  }
}
