#include "rumus/distributed/sharded_checkpoint.hpp"

#include "../io/settings_check.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/io/safetensors.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"
#include "staging.hpp"

namespace rumus::distributed {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "rumus.sharded_checkpoint.v1";
constexpr const char* kIndex = "index.safetensors";
constexpr const char* kTensorPrefix = "tensor.";
constexpr const char* kSettingsPrefix = "settings.";

std::string rank_file(int rank, int size) { return fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, size); }
std::string partial_dir(const std::string& dir) { return dir + ".partial"; }
std::string previous_dir(const std::string& dir) { return dir + ".previous"; }

// One tensor of the checkpoint as this rank holds it.
struct Entry {
  std::string key;                  // "model.<name>" or "optimizer.<name>"
  Tensor local;                     // this rank's shard, or the whole replicated tensor
  std::optional<Shape> full_shape;  // set for shards (dim-0 split, see shard_rows)
};

// The checkpoint's tensors, in key order. Optimizer buffers of a shard (its
// shape, its parameter) are shards of the same full shape.
std::vector<Entry> entries(fsdp::FullyShardedModule& module, const optim::Optimizer& optimizer) {
  std::map<std::string, Entry> out;
  const auto named = module.named_parameters();
  const std::vector<Shape> full = module.full_shapes();
  std::unordered_map<const TensorImpl*, std::size_t> index_of;
  std::set<std::string> param_names;
  for (std::size_t k = 0; k < named.size(); ++k) {
    const std::string& name = named[k].first;
    const Tensor& shard = named[k].second;
    out["model." + name] = Entry{"model." + name, shard.detach(), full[k]};
    index_of[shard.impl_ptr().get()] = k;
    param_names.insert(name);
  }
  for (auto& [n, t] : module.module().state_dict())
    if (!param_names.count(n)) out["model." + n] = Entry{"model." + n, t.detach(), std::nullopt};
  const auto& groups = optimizer.param_groups();
  for (auto& [n, t] : optimizer.state_dict()) {
    std::optional<Shape> full_shape;
    // "state.<g>.<i>.<buffer>"
    if (n.starts_with("state.") && !n.ends_with(".step")) {
      std::size_t g = 0, i = 0;
      const char* s = n.data() + 6;
      const char* end = n.data() + n.size();
      auto r1 = std::from_chars(s, end, g);
      if (r1.ec == std::errc() && r1.ptr < end && *r1.ptr == '.') {
        auto r2 = std::from_chars(r1.ptr + 1, end, i);
        if (r2.ec == std::errc() && g < groups.size() && i < groups[g].params.size()) {
          auto it = index_of.find(groups[g].params[i].impl_ptr().get());
          if (it != index_of.end() && t.shape() == named[it->second].second.shape()) full_shape = full[it->second];
        }
      }
    }
    out["optimizer." + n] = Entry{"optimizer." + n, t.detach(), full_shape};
  }
  std::vector<Entry> list;
  for (auto& [k, e] : out) list.push_back(std::move(e));
  return list;
}

std::string shape_text(const Shape& s) { return fmt::format("{}", fmt::join(s, ",")); }

// "sharded <d0,d1,...> <rows per rank>" or "replicated".
std::string describe(const Entry& e, int size) {
  if (!e.full_shape) return "replicated";
  const std::int64_t rows = e.full_shape->empty() ? 1 : (*e.full_shape)[0];
  return fmt::format("sharded {} {}", shape_text(*e.full_shape), shard_rows(rows, size));
}

struct IndexedTensor {
  bool sharded = false;
  Shape full_shape;
  std::int64_t rows_per_rank = 0;
};

std::int64_t parse_int(const std::string& text, const std::string& what, const std::string& where) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
    throw IoError(fmt::format("load_sharded: '{}': {} must be a whole number >= 0, got '{}'", where, what, text));
  return v;
}

std::uint64_t parse_u64(const std::string& text, const std::string& what, const std::string& where) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || text[0] == '-' || ec != std::errc() || end != text.data() + text.size())
    throw IoError(fmt::format("load_sharded: '{}': {} must be a whole number >= 0, got '{}'", where, what, text));
  return v;
}

IndexedTensor parse_entry(const std::string& key, const std::string& text, const std::string& where) {
  IndexedTensor out;
  if (text == "replicated") return out;
  const auto bad = [&] {
    return IoError(fmt::format("load_sharded: '{}': tensor '{}' is described as '{}', expected 'replicated' or "
                               "'sharded <shape> <rows per rank>'",
                               where, key, text));
  };
  if (!text.starts_with("sharded ")) throw bad();
  const std::string rest = text.substr(8);
  const auto space = rest.find(' ');
  if (space == std::string::npos) throw bad();
  out.sharded = true;
  const std::string dims = rest.substr(0, space);
  std::size_t start = 0;
  while (start <= dims.size() && !dims.empty()) {
    const auto comma = dims.find(',', start);
    const std::string d = dims.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.full_shape.push_back(parse_int(d, "a dimension of '" + key + "'", where));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  out.rows_per_rank = parse_int(rest.substr(space + 1), "the rows per rank of '" + key + "'", where);
  return out;
}

// Makes the entries of directory `path` (new files, renames) durable.
void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw IoError(fmt::format("save_sharded: cannot open the directory '{}' to sync it", path));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("save_sharded: cannot sync the directory '{}'", path));
}

std::string parent_of(const std::string& dir) {
  const fs::path parent = fs::absolute(fs::path(dir)).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Every rank learns whether every rank succeeded; throws on all of them if not.
void agree(ProcessGroup& group, const std::string& error, const std::string& op) {
  Tensor failed = full({}, error.empty() ? 0.0 : 1.0, {.dtype = DType::f64});
  group.all_reduce(failed, Reduce::sum);
  if (!error.empty()) throw IoError(error);
  if (failed.item() != 0.0) throw IoError(fmt::format("{}: another rank failed (its error is thrown there)", op));
}

}  // namespace

void save_sharded(const std::string& dir, fsdp::FullyShardedModule& module, const optim::Optimizer& optimizer,
                  ProcessGroup& group, const io::TrainingState& state, const Generator& generator) {
  const std::string op = fmt::format("save_sharded('{}')", dir);
  const int rank = group.rank(), size = group.size();
  const std::string partial = partial_dir(dir), previous = previous_dir(dir);
  const std::vector<Entry> list = entries(module, optimizer);

  // 1. Rank 0 makes a fresh, empty "<dir>.partial" (what a killed save left goes).
  std::string error;
  if (rank == 0) {
    try {
      std::error_code ec;
      if (fs::exists(dir) && !fs::exists(fs::path(dir) / kIndex) && !fs::is_empty(dir))
        throw IoError(fmt::format("{}: '{}' exists and is not a sharded checkpoint (it has no {}); refusing to "
                                  "replace it",
                                  op, dir, kIndex));
      fs::remove_all(partial);
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(group, error, op);

  // 2. Every rank writes its file: its shards, and on rank 0 the replicated tensors.
  try {
    StateDict mine;
    for (const Entry& e : list)
      if (e.full_shape || rank == 0) mine.emplace(e.key, e.local.cpu());
    io::save_safetensors(mine, (fs::path(partial) / rank_file(rank, size)).string(),
                         {{"format", kFormat}, {"rank", std::to_string(rank)}, {"world_size", std::to_string(size)}});
  } catch (const std::exception& e) {
    error = fmt::format("{}: rank {} could not write its file: {}", op, rank, e.what());
  }
  agree(group, error, op);

  // 3. Rank 0 writes the index last, then swaps the complete set into place.
  if (rank == 0) {
    try {
      io::Metadata meta{{"format", kFormat},
                        {"world_size", std::to_string(size)},
                        {"epoch", std::to_string(state.epoch)},
                        {"step", std::to_string(state.step)},
                        {"generator.seed", std::to_string(generator.seed())},
                        {"generator.offset", std::to_string(generator.offset())}};
      for (const auto& [name, value] : state.settings) meta[kSettingsPrefix + name] = value;
      for (const Entry& e : list) meta[kTensorPrefix + e.key] = describe(e, size);
      io::save_safetensors({}, (fs::path(partial) / kIndex).string(), meta);
      sync_directory(partial);  // every rank file and the index are durable before the set is
      // The previous set stays until the new one is in place.
      fs::remove_all(previous);
      if (fs::exists(dir)) fs::rename(dir, previous);
      fs::rename(partial, dir);
      sync_directory(parent_of(dir));
      fs::remove_all(previous);
    } catch (const std::exception& e) {
      error = fmt::format("{}: rank 0 could not complete the set: {}", op, e.what());
    }
  }
  agree(group, error, op);
}

bool sharded_checkpoint_exists(const std::string& dir) {
  return fs::exists(fs::path(dir) / kIndex) || (!fs::exists(dir) && fs::exists(fs::path(previous_dir(dir)) / kIndex));
}

namespace {
io::TrainingState load(const std::string& dir_in, fsdp::FullyShardedModule& module, optim::Optimizer& optimizer,
                       ProcessGroup& group, const io::RunSettings* expected, Generator& generator) {
  // A save that died between its two renames left only "<dir>.previous".
  std::string dir = dir_in;
  if (!fs::exists(dir) && fs::exists(fs::path(previous_dir(dir)) / kIndex)) dir = previous_dir(dir);
  const std::string index_path = (fs::path(dir) / kIndex).string();
  if (!fs::exists(index_path))
    throw IoError(fmt::format("load_sharded: '{}' is not a complete sharded checkpoint: missing '{}' (written last, "
                              "so a save that did not finish has none){}",
                              dir_in, index_path,
                              fs::exists(partial_dir(dir_in)) ? "; an unfinished save left '" + partial_dir(dir_in) + "'"
                                                              : std::string()));
  io::Metadata meta;
  io::load_safetensors(index_path, &meta);
  if (meta["format"] != kFormat)
    throw IoError(fmt::format("load_sharded: '{}' is not a rumus sharded checkpoint index (format '{}', expected '{}')",
                              index_path, meta["format"], kFormat));
  const std::int64_t saved_size = parse_int(meta["world_size"], "world_size", index_path);
  if (saved_size < 1) throw IoError(fmt::format("load_sharded: '{}': world_size must be >= 1, got 0", index_path));
  std::vector<std::string> missing_files;
  for (int r = 0; r < saved_size; ++r) {
    const fs::path p = fs::path(dir) / rank_file(r, int(saved_size));
    if (!fs::exists(p)) missing_files.push_back(p.string());
  }
  if (!missing_files.empty())
    throw IoError(fmt::format("load_sharded: '{}' is incomplete: the index names {} rank files, missing {}", dir,
                              saved_size, fmt::join(missing_files, ", ")));

  // The index against this model and optimizer.
  std::map<std::string, IndexedTensor> indexed;
  for (const auto& [k, v] : meta)
    if (k.starts_with(kTensorPrefix)) {
      const std::string key = k.substr(std::string(kTensorPrefix).size());
      indexed[key] = parse_entry(key, v, index_path);
    }
  const std::vector<Entry> list = entries(module, optimizer);
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (const Entry& e : list) {
    known.insert(e.key);
    if (!indexed.count(e.key) && e.key.starts_with("model.")) missing.push_back(e.key);
  }
  for (const auto& [k, v] : indexed)
    if (!known.count(k) && k.starts_with("model.")) unexpected.push_back(k);
  if (!missing.empty() || !unexpected.empty())
    throw IoError(fmt::format("load_sharded: '{}' holds another model than the sharded {}: missing [{}], unexpected [{}]",
                              dir, module.module().type_name(), fmt::join(missing, ", "), fmt::join(unexpected, ", ")));
  for (const Entry& e : list) {
    auto it = indexed.find(e.key);
    if (it == indexed.end()) continue;  // an optimizer key: its load_state_dict names what is missing
    if (e.full_shape && (!it->second.sharded || it->second.full_shape != *e.full_shape))
      throw ShapeError(fmt::format("load_sharded: '{}': '{}' is {} in the checkpoint, expected sharded {}", dir, e.key,
                                   it->second.sharded ? "sharded " + shape_str(it->second.full_shape) : "replicated",
                                   shape_str(*e.full_shape)));
  }

  // Reads the rank files this rank needs (each whole, once).
  std::map<int, StateDict> files;
  auto file = [&](int r) -> const StateDict& {
    auto it = files.find(r);
    if (it == files.end())
      it = files.emplace(r, io::load_safetensors((fs::path(dir) / rank_file(r, int(saved_size))).string())).first;
    return it->second;
  };
  auto stored = [&](int r, const std::string& key) -> const Tensor& {
    const StateDict& f = file(r);
    auto it = f.find(key);
    if (it == f.end())
      throw IoError(fmt::format("load_sharded: '{}' has no tensor '{}', which the index puts there", 
                                (fs::path(dir) / rank_file(r, int(saved_size))).string(), key));
    return it->second;
  };

  // This rank's part of every indexed tensor, on the host.
  const int rank = group.rank(), size = group.size();
  StateDict model_part, opt_part;
  for (const auto& [key, ix] : indexed) {
    Tensor value;
    if (!ix.sharded) {
      value = stored(0, key);
    } else {
      const std::int64_t rows = ix.full_shape.empty() ? 1 : ix.full_shape[0];
      const std::int64_t c_old = ix.rows_per_rank, c = shard_rows(rows, size);
      if (c_old * saved_size < rows)
        throw IoError(fmt::format("load_sharded: '{}': '{}' has {} rows but {} ranks hold {} rows each", index_path,
                                  key, rows, saved_size, c_old));
      const std::int64_t lo = std::min<std::int64_t>(rows, c * rank), hi = std::min<std::int64_t>(rows, c * (rank + 1));
      std::vector<Tensor> pieces;
      DType dtype = DType::f32;
      for (std::int64_t a = lo; a < hi;) {
        const int r = int(a / c_old);
        const Tensor& s = stored(r, key);
        dtype = s.dtype();
        const std::int64_t b = std::min(hi, c_old * (r + 1));
        if (s.dim() == 0 || s.size(0) != c_old)
          throw ShapeError(fmt::format("load_sharded: '{}' of rank {} has shape {}, expected {} rows", key, r,
                                       shape_str(s.shape()), c_old));
        pieces.push_back(s.narrow(0, a - c_old * r, b - a));
        a = b;
      }
      if (pieces.empty()) dtype = stored(0, key).dtype();  // every rank file holds every shard
      if (hi - lo < c) {  // zero rows pad the last shards
        Shape pad = ix.full_shape;
        pad[0] = c - (hi - lo);
        pieces.push_back(zeros(pad, {.dtype = dtype}));
      }
      value = pieces.size() == 1 ? pieces[0].contiguous() : cat(pieces, 0);
    }
    if (key.starts_with("model."))
      model_part.emplace(key.substr(6), value);
    else if (key.starts_with("optimizer."))
      opt_part.emplace(key.substr(10), value);
    else
      throw IoError(fmt::format("load_sharded: '{}': unexpected tensor '{}'", index_path, key));
  }

  // Checks the model's part, loads the optimizer (which checks all before it
  // writes), then writes the model: a failure leaves both as they were.
  for (const Entry& e : list) {
    if (!e.key.starts_with("model.")) continue;
    const Tensor& v = model_part.at(e.key.substr(6));
    if (v.shape() != e.local.shape())
      throw ShapeError(fmt::format("load_sharded: '{}': '{}' is {} here but {} in the checkpoint", dir, e.key,
                                   shape_str(e.local.shape()), shape_str(v.shape())));
    if (v.dtype() != e.local.dtype())
      throw DTypeError(fmt::format("load_sharded: '{}': '{}' is {} here but {} in the checkpoint", dir, e.key,
                                   dtype_name(e.local.dtype()), dtype_name(v.dtype())));
  }
  io::TrainingState state{parse_int(meta["epoch"], "epoch", index_path), parse_int(meta["step"], "step", index_path),
                          {}};
  for (const auto& [k, v] : meta)
    if (k.starts_with(kSettingsPrefix)) state.settings[k.substr(std::string(kSettingsPrefix).size())] = v;
  if (expected) io::check_settings("load_sharded", dir, state.settings, *expected);
  const std::uint64_t seed = parse_u64(meta["generator.seed"], "generator.seed", index_path);
  const std::uint64_t offset = parse_u64(meta["generator.offset"], "generator.offset", index_path);
  try {
    optimizer.load_state_dict(opt_part);
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {
    throw IoError(fmt::format("load_sharded: '{}': {}", dir, e.what()));
  }
  NoGradGuard no_grad;
  for (const Entry& e : list)
    if (e.key.starts_with("model.")) staging::copy_into(e.local, model_part.at(e.key.substr(6)));
  generator.set_state(seed, offset);
  return state;
}
}  // namespace

io::TrainingState load_sharded(const std::string& dir, fsdp::FullyShardedModule& module, optim::Optimizer& optimizer,
                               ProcessGroup& group, Generator& generator) {
  return load(dir, module, optimizer, group, nullptr, generator);
}

io::TrainingState load_sharded(const std::string& dir, fsdp::FullyShardedModule& module, optim::Optimizer& optimizer,
                               ProcessGroup& group, const io::RunSettings& expected, Generator& generator) {
  return load(dir, module, optimizer, group, &expected, generator);
}

}  // namespace rumus::distributed
