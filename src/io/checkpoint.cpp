#include "rumus/io/checkpoint.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "rumus/io/safetensors.hpp"

namespace rumus::io {

namespace {
constexpr const char* kFormat = "rumus.checkpoint.v1";

std::uint64_t parse_u64(const Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  if (it == m.end()) throw IoError(fmt::format("load_checkpoint: '{}': metadata has no '{}'", path, key));
  try {
    std::size_t used = 0;
    unsigned long long v = std::stoull(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing text");
    return v;
  } catch (const std::exception&) {
    throw IoError(fmt::format("load_checkpoint: '{}': metadata '{}' = '{}' is not a number", path, key, it->second));
  }
}
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
  save_safetensors(all, path, meta);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              Generator& gen) {
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw IoError(fmt::format("load_checkpoint: expected a file, got the directory '{}'", path));
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
  TrainingState state{std::int64_t(parse_u64(meta, "epoch", path)), std::int64_t(parse_u64(meta, "step", path))};
  std::uint64_t seed = parse_u64(meta, "generator.seed", path), offset = parse_u64(meta, "generator.offset", path);
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

}  // namespace rumus::io
