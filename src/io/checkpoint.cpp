#include "rumus/io/checkpoint.hpp"

#include "settings_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <vector>

#include "rumus/io/safetensors.hpp"

namespace rumus::io {

namespace {
constexpr const char* kFormat = "rumus.checkpoint.v1";

constexpr const char* kSettingsPrefix = "settings.";

// A whole number in [0, max] written in decimal digits only: stoull would take
// "-5" (as 2^64 - 5) and a leading '+' or spaces.
std::uint64_t parse_count(const Metadata& m, const std::string& key, const std::string& path, std::uint64_t max) {
  auto it = m.find(key);
  if (it == m.end()) throw IoError(fmt::format("load_checkpoint: '{}': metadata has no '{}'", path, key));
  const std::string& text = it->second;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || text[0] == '-' || ec != std::errc() || end != text.data() + text.size() || v > max)
    throw IoError(fmt::format("load_checkpoint: '{}': metadata '{}' must be a whole number in [0, {}], got '{}'", path,
                              key, max, text));
  return v;
}

constexpr std::uint64_t kInt64Max = std::uint64_t(std::numeric_limits<std::int64_t>::max());

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     TrainingState state, const Generator& gen) {
  StateDict all;
  for (auto& [n, t] : model.state_dict()) all.emplace("model." + n, t);
  for (auto& [n, t] : optimizer.state_dict()) all.emplace("optimizer." + n, t);
  Metadata meta{{"format", kFormat},
                {"epoch", std::to_string(state.epoch)},
                {"step", std::to_string(state.step)},
                {"generator.seed", std::to_string(gen.seed())},
                {"generator.offset", std::to_string(gen.offset())}};
  for (const auto& [name, value] : state.settings) meta[kSettingsPrefix + name] = value;
  save_safetensors(all, path, meta);
}

namespace {
// `check`: compare the settings with `expected` before anything is applied.
TrainingState load(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                   const RunSettings& expected, Generator& gen, bool check) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw IoError(fmt::format("load_checkpoint: expected a file, got the directory '{}'", path));
  remove_stale_temporaries(path);  // left by a save that was killed
  Metadata meta;
  StateDict all = load_safetensors(path, &meta);
  if (meta["format"] != kFormat)
    throw IoError(fmt::format("load_checkpoint: '{}' is not a rumus checkpoint (metadata format '{}', expected '{}')",
                              path, meta["format"], kFormat));
  StateDict model_state, opt_state;
  for (auto& [n, t] : all) {
    if (n.starts_with("model."))
      model_state.emplace(n.substr(6), t);
    else if (n.starts_with("optimizer."))
      opt_state.emplace(n.substr(10), t);
    else
      throw IoError(fmt::format("load_checkpoint: '{}': unexpected tensor '{}'", path, n));
  }
  TrainingState state{std::int64_t(parse_count(meta, "epoch", path, kInt64Max)),
                      std::int64_t(parse_count(meta, "step", path, kInt64Max)), {}};
  const std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t seed = parse_count(meta, "generator.seed", path, u64_max),
                offset = parse_count(meta, "generator.offset", path, u64_max);
  for (const auto& [key, value] : meta)
    if (key.starts_with(kSettingsPrefix)) state.settings[key.substr(std::strlen(kSettingsPrefix))] = value;
  if (check) check_settings("load_checkpoint", path, state.settings, expected);
  // Each load_state_dict checks everything (names, shapes, dtypes; the
  // optimizer's kind, groups and state) before its first write, so a failed
  // one changes nothing. The model goes first, so its mismatches are the ones
  // reported; if the optimizer's load then fails, the model gets its previous
  // values back, so a failed load leaves model and optimizer as they were.
  try {
    StateDict previous;
    for (auto& [n, t] : model.state_dict()) previous.emplace(n, t.detach().clone());
    model.load_state_dict(model_state, true);
    try {
      optimizer.load_state_dict(opt_state);
    } catch (...) {
      model.load_state_dict(previous, true);
      throw;
    }
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(fmt::format("load_checkpoint: '{}': {}", path, e.what()));
  }
  gen.set_state(seed, offset);
  return state;
}
}  // namespace

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              Generator& gen) {
  return load(path, model, optimizer, {}, gen, false);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              const RunSettings& expected, Generator& gen) {
  return load(path, model, optimizer, expected, gen, true);
}

void check_settings(const char* op, const std::string& path, const RunSettings& stored, const RunSettings& expected) {
  std::vector<std::string> differences;
  for (const auto& [name, value] : expected) {
    auto it = stored.find(name);
    if (it == stored.end())
      differences.push_back(fmt::format("{}: not in the checkpoint, given '{}'", name, value));
    else if (it->second != value)
      differences.push_back(fmt::format("{}: checkpoint '{}', given '{}'", name, it->second, value));
  }
  for (const auto& [name, value] : stored)
    if (!expected.contains(name))
      differences.push_back(fmt::format("{}: checkpoint '{}', not a setting of this run", name, value));
  if (!differences.empty())
    throw IoError(fmt::format("{}: '{}' was written by a run with other settings; resuming must keep "
                              "them (start a new run to change them): {}",
                              op, path, fmt::join(differences, "; ")));
}

}  // namespace rumus::io
