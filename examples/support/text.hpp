// What the byte-level language models (char_lm, seq_lstm) share around their
// loops: reading the text, holding out its last 5 %, the training batches,
// validation over the held-out text and drawing the next byte of a sample.
// Each trainer still spells out its own model, optimizer and loop.
// bench/char_lm_torch.py holds the same reading, split and batches in Python.
#pragma once
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace example {

constexpr const char* kFortunes = "/usr/share/games/fortunes";

// At most 1 GiB of text: all of it is held in memory (twice: whole, then
// split); more is an error, and so is a device (/dev/zero has no end).
constexpr std::uint64_t kMaxTextBytes = std::uint64_t(1) << 30;

// The text: a file, or every plain-text fortune file of a directory in name
// order (the .dat indexes and .u8 variants skipped). `program` names the
// reader in the message about too long a text.
inline std::string read_text(const std::string& path, const std::string& program) {
  using rumus::IoError;
  using rumus::ValueError;
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
    return ValueError(fmt::format("--data '{}' holds more than {} bytes (1 GiB) of text, the most {} reads; "
                                  "expected a shorter text",
                                  path, kMaxTextBytes, program));
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
inline std::string checksum(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

// The text's part of the run settings: its size and checksum.
inline void add_text_settings(rumus::io::RunSettings& s, const std::string& text) {
  s["text_bytes"] = std::to_string(text.size());
  s["text_fnv1a"] = checksum(text);
}

struct TextSplit {
  std::string train, val;
};

// The first 95 % for training, the last 5 % held out; each must hold a window
// of `context` bytes and its next byte, and a batch holds distinct windows of
// the training text at most (more would repeat them, and fail to allocate
// long before a step runs).
inline TextSplit split_text(const std::string& text, std::int64_t context, std::int64_t batch_size) {
  const std::size_t split = text.size() * 95 / 100;
  TextSplit s{text.substr(0, split), text.substr(split)};
  if (std::int64_t(s.train.size()) <= context + 1 || std::int64_t(s.val.size()) <= context + 1)
    throw rumus::Error(
        fmt::format("{} bytes of text are too few for a context of {} (5 % is held out)", text.size(), context));
  const std::int64_t windows = std::int64_t(s.train.size()) - context;
  if (batch_size > windows)
    throw rumus::ValueError(
        fmt::format("--batch-size {} is larger than the {} windows of --context {} in the training text; "
                    "expected --batch-size <= {}",
                    batch_size, windows, context, windows));
  return s;
}

// splitmix64: the batch offsets are a function of (seed, step, row) only, so a
// resumed run and the PyTorch references draw the same windows.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Inputs and next-byte targets (N, L) of training step `step`: random windows of `text`.
inline std::pair<rumus::Tensor, rumus::Tensor> batch_at(const std::string& text, std::int64_t step,
                                                        std::int64_t batch, std::int64_t context, std::uint64_t seed,
                                                        rumus::Device dev) {
  std::vector<std::int64_t> x(std::size_t(batch * context)), y(x.size());
  const std::uint64_t windows = std::uint64_t(text.size()) - std::uint64_t(context);
  for (std::int64_t r = 0; r < batch; ++r) {
    const std::uint64_t start = mix(mix(seed) ^ std::uint64_t(step * batch + r)) % windows;
    for (std::int64_t t = 0; t < context; ++t) {
      x[std::size_t(r * context + t)] = std::uint8_t(text[start + std::uint64_t(t)]);
      y[std::size_t(r * context + t)] = std::uint8_t(text[start + std::uint64_t(t) + 1]);
    }
  }
  return {rumus::tensor(x, {batch, context}).to(dev), rumus::tensor(y, {batch, context}).to(dev)};
}

struct TextEvaluation {
  double loss, accuracy;
};

// Mean next-byte loss and accuracy over the held-out text, in consecutive
// windows of `context` bytes, each read from the start (a recurrent model's
// state starts at zero in each). `net(x)` gives logits (N, L, 256).
inline TextEvaluation evaluate_text(rumus::nn::Module& net, const std::string& val, std::int64_t batch,
                                    std::int64_t context, rumus::Device dev) {
  using namespace rumus;
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
    Tensor logits = net(tensor(x, {rows, context}).to(dev)).reshape({rows * context, 256});
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

// The next byte of a sample, drawn from the softmax of `logits` (256 values,
// any device) / temperature, restricted to the top_k most likely (0: all).
inline std::int64_t draw_byte(const rumus::Tensor& logits, double temperature, std::int64_t top_k,
                              std::mt19937_64& rng) {
  const std::vector<float> z = logits.reshape({-1}).cpu().to_vector<float>();
  const std::int64_t vocab = std::int64_t(z.size());
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
  return order[std::size_t(pick(rng))];
}

}  // namespace example
