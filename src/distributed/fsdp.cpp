#include "rumus/distributed/fsdp.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <set>
#include <unordered_set>

#include "rumus/autograd/function.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/ops/creation.hpp"
#include "staging.hpp"

namespace rumus::fsdp {

using distributed::shard_of;
using distributed::unshard;

namespace {

// Calls f(dotted name, parameter, full shape when sharded) for every parameter, depth first.
template <class F>
void visit_parameters(const nn::Module& m, const std::string& prefix, F&& f) {
  const auto* sharded = dynamic_cast<const ShardedParameters*>(&m);
  for (auto& [n, t] : m.named_parameters())
    if (n.find('.') == std::string::npos) f(prefix + n, t, sharded ? sharded->full_shape(n) : std::nullopt);
  for (auto& [child_name, child] : m.named_children()) visit_parameters(*child, prefix + child_name + ".", f);
}

Tensor gather_full(const Tensor& shard, const Shape& full_shape, ProcessGroup& group) {
  NoGradGuard no_grad;
  return unshard(group.all_gather(shard), full_shape).contiguous();
}

// Collective: rank 0 writes, then tells every rank whether it worked.
void write_on_rank0(const StateDict& state, ProcessGroup& group, const std::string& path, const io::Metadata& meta,
                    const char* op) {
  std::int32_t ok = 1;
  std::string error;
  if (group.rank() == 0) {
    try {
      io::save_safetensors(state, path, meta);
    } catch (const std::exception& e) {
      ok = 0;
      error = e.what();
    }
  }
  Tensor flag = tensor(std::vector<std::int32_t>{ok});
  group.broadcast(flag, 0);
  if (flag.item<std::int32_t>() == 0)
    throw IoError(group.rank() == 0 ? error : fmt::format("{}: rank 0 could not write '{}'", op, path));
}

struct Target {
  std::string name;
  Tensor tensor;                    // a parameter (shard or replicated) or a buffer
  std::optional<Shape> full_shape;  // set for shards
};

// Checks `state` against the targets (names, full shapes, dtypes), then copies
// every target's part in place. Nothing is written when a check fails.
void load_targets(const std::vector<Target>& targets, const StateDict& state, ProcessGroup& group, bool strict,
                  const std::string& what) {
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (const Target& t : targets) {
    known.insert(t.name);
    if (!state.count(t.name)) missing.push_back(t.name);
  }
  for (auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty()))
    throw Error(fmt::format("fsdp load_state_dict: names do not match the {}: missing [{}], unexpected [{}]", what,
                            fmt::join(missing, ", "), fmt::join(unexpected, ", ")));
  for (const Target& t : targets) {
    auto it = state.find(t.name);
    if (it == state.end()) continue;
    const Shape& want = t.full_shape ? *t.full_shape : t.tensor.shape();
    if (it->second.shape() != want)
      throw ShapeError(fmt::format("fsdp load_state_dict: '{}' has shape {} in the state dict but {} in the {}",
                                   t.name, shape_str(it->second.shape()), shape_str(want), what));
    if (it->second.dtype() != t.tensor.dtype())
      throw DTypeError(fmt::format("fsdp load_state_dict: '{}' has dtype {} in the state dict but {} in the {}",
                                   t.name, dtype_name(it->second.dtype()), dtype_name(t.tensor.dtype()), what));
  }
  NoGradGuard no_grad;
  for (const Target& t : targets) {
    auto it = state.find(t.name);
    if (it == state.end()) continue;
    if (t.full_shape)
      distributed::staging::copy_into(t.tensor, shard_of(it->second, group.rank(), group.size()));
    else
      distributed::staging::copy_into(t.tensor, it->second);
  }
}

// Buffers from state_dict(): everything that is not a parameter.
void add_buffers(const nn::Module& m, const std::set<std::string>& params, std::vector<Target>& out) {
  for (auto& [n, t] : m.state_dict())
    if (!params.count(n)) out.push_back({n, t, std::nullopt});
}

}  // namespace

StateDict full_state_dict(const nn::Module& module, ProcessGroup& group) {
  StateDict state = module.state_dict();
  visit_parameters(module, "", [&](const std::string& name, const Tensor& t, const std::optional<Shape>& full) {
    if (full) state[name] = gather_full(t.detach(), *full, group);
  });
  return state;
}

void load_full_state_dict(nn::Module& module, const StateDict& state, ProcessGroup& group, bool strict) {
  std::vector<Target> targets;
  std::set<std::string> params;
  visit_parameters(module, "", [&](const std::string& name, const Tensor& t, const std::optional<Shape>& full) {
    targets.push_back({name, t, full});
    params.insert(name);
  });
  add_buffers(module, params, targets);
  load_targets(targets, state, group, strict, module.type_name());
}

void save(const nn::Module& module, ProcessGroup& group, const std::string& path, const io::Metadata& metadata) {
  write_on_rank0(full_state_dict(module, group), group, path, metadata, "fsdp::save");
}

void load(nn::Module& module, ProcessGroup& group, const std::string& path, bool strict) {
  load_full_state_dict(module, io::load_safetensors(path), group, strict);
}

// ---- FullyShardedModule ----

struct FullyShardedModule::Param {
  std::string name;
  std::weak_ptr<TensorImpl> target;  // the wrapped module's parameter
  Tensor shard;
  Shape full_shape;
  int users = 0;  // leases: a running forward, or an autograd node that may read the gathered copy
  // The gathered tensor while installed. The module's parameter takes its
  // identity but is another handle: holding this one tells the tape that the
  // gather is still reachable, so a prune during forward keeps it (and the
  // lease its node holds) for the layers that have not read it yet.
  Tensor installed;
};

namespace {

using Param = FullyShardedModule::Param;

// Empties the module's parameter: an empty placeholder of shape [0].
void release_full(Param& p) {
  p.installed = Tensor();
  if (auto t = p.target.lock()) {
    Tensor placeholder = empty({0}, {.dtype = p.shard.dtype(), .device = p.shard.device()});
    t->storage = placeholder.storage_ptr();
    t->layout = placeholder.layout();
  }
}

// Makes the module's parameter the gathered `full` tensor, identity included,
// so ops that use it connect to the gather on the tape.
void install_full(Param& p, const Tensor& full) {
  p.installed = full;
  if (auto t = p.target.lock()) {
    t->storage = full.storage_ptr();
    t->layout = full.layout();
    t->id = full.grad_id();
    t->requires_grad = full.requires_grad();
  }
}

// Keeps a parameter's gathered copy alive; the last one to go frees it.
struct Lease {
  explicit Lease(std::shared_ptr<Param> p) : param(std::move(p)) { ++param->users; }
  ~Lease() {
    if (--param->users == 0) release_full(*param);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  std::shared_ptr<Param> param;
};

}  // namespace

FullyShardedModule::FullyShardedModule(nn::Module& module, ProcessGroup& group, ShardOptions options)
    : module_(module), group_(group), options_(options) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> named = module.named_parameters();
  for (auto& [name, t] : named)
    if (!seen.insert(t.impl_ptr().get()).second)
      throw Error(fmt::format("fsdp::shard: parameter '{}' of the {} shares its tensor with another parameter; tied "
                              "parameters cannot be sharded",
                              name, module.type_name()));
  for (auto& [name, t] : named) {
    auto p = std::make_shared<Param>();
    p->name = name;
    p->target = t.impl_ptr();
    p->full_shape = t.shape();
    Tensor full = t.detach();
    if (options_.sync_from_rank0) group_.broadcast(full, 0);
    p->shard = shard_of(full, group_.rank(), group_.size());
    p->shard.requires_grad_(t.requires_grad());
    release_full(*p);
    params_.push_back(std::move(p));
  }
}

FullyShardedModule::~FullyShardedModule() = default;

Tensor FullyShardedModule::forward(const Tensor& input) {
  std::vector<std::shared_ptr<Lease>> held;
  held.reserve(params_.size());
  const Reduce grad_reduce = options_.grad_reduce;
  ProcessGroup& group = group_;
  for (const std::shared_ptr<Param>& p : params_) {
    auto lease = std::make_shared<Lease>(p);
    Tensor gathered;
    if (grad_enabled() && p->shard.requires_grad()) {
      // The backward node holds the lease: the gathered copy lives until this
      // parameter's gradient has been reduce-scattered.
      autograd::CustomFunction fn{
          "fsdp_all_gather",
          [&group](const std::vector<Tensor>& in) { return group.all_gather(in[0]); },
          [&group, grad_reduce, lease](const Tensor& g, const std::vector<Tensor>&, const Tensor&) {
            return std::vector<Tensor>{group.reduce_scatter(g, grad_reduce)};
          }};
      gathered = autograd::apply(fn, {p->shard});
    } else {
      NoGradGuard no_grad;
      gathered = group.all_gather(p->shard);
    }
    install_full(*p, unshard(gathered, p->full_shape));
    held.push_back(std::move(lease));
  }
  return module_.forward(input);
}

std::vector<Tensor> FullyShardedModule::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : params_) out.push_back(p->shard);
  return out;
}

std::vector<std::pair<std::string, Tensor>> FullyShardedModule::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& p : params_) out.emplace_back(p->name, p->shard);
  return out;
}

std::int64_t FullyShardedModule::shard_numel() const {
  std::int64_t n = 0;
  for (auto& p : params_) n += p->shard.numel();
  return n;
}

std::int64_t FullyShardedModule::full_numel() const {
  std::int64_t n = 0;
  for (auto& p : params_) n += numel_of(p->full_shape);
  return n;
}

std::vector<Shape> FullyShardedModule::full_shapes() const {
  std::vector<Shape> out;
  for (auto& p : params_) out.push_back(p->full_shape);
  return out;
}

StateDict FullyShardedModule::state_dict() {
  StateDict state = module_.state_dict();
  for (auto& p : params_) state[p->name] = gather_full(p->shard, p->full_shape, group_);
  return state;
}

void FullyShardedModule::load_state_dict(const StateDict& state, bool strict) {
  std::vector<Target> targets;
  std::set<std::string> names;
  for (auto& p : params_) {
    targets.push_back({p->name, p->shard, p->full_shape});
    names.insert(p->name);
  }
  add_buffers(module_, names, targets);
  load_targets(targets, state, group_, strict, "sharded " + module_.type_name());
}

void FullyShardedModule::save(const std::string& path, const io::Metadata& metadata) {
  write_on_rank0(state_dict(), group_, path, metadata, "FullyShardedModule::save");
}

void FullyShardedModule::load(const std::string& path, bool strict) { load_state_dict(io::load_safetensors(path), strict); }

void FullyShardedModule::to(Device device) {
  NoGradGuard no_grad;
  for (auto& p : params_) {
    if (p->shard.device() == device) continue;
    Tensor moved = distributed::staging::move(p->shard, device);
    p->shard.impl().storage = moved.storage_ptr();
    p->shard.impl().layout = moved.layout();
    if (p->users == 0) release_full(*p);  // a placeholder on the new device
  }
  module_.to(device);
}

std::unique_ptr<FullyShardedModule> shard(nn::Module& module, ProcessGroup& group, ShardOptions options) {
  return std::make_unique<FullyShardedModule>(module, group, options);
}

}  // namespace rumus::fsdp

namespace rumus::nn {

FsdpLinear::FsdpLinear(std::int64_t in, std::int64_t out, distributed::ProcessGroup& group, bool with_bias,
                       distributed::Reduce grad_reduce)
    : in_features(in), out_features(out), group_(group), grad_reduce_(grad_reduce) {
  Linear full(in, out, with_bias);  // checks the sizes; rank 0's draw wins
  NoGradGuard no_grad;
  Tensor w = full.weight.detach(), b = with_bias ? full.bias.detach() : Tensor();
  group.broadcast(w, 0);
  if (with_bias) group.broadcast(b, 0);
  init_from(w, b);
}

FsdpLinear::FsdpLinear(const Linear& full, distributed::ProcessGroup& group, distributed::Reduce grad_reduce)
    : in_features(full.weight.size(1)), out_features(full.weight.size(0)), group_(group), grad_reduce_(grad_reduce) {
  init_from(full.weight, full.bias);
}

void FsdpLinear::init_from(const Tensor& w, const Tensor& b) {
  using distributed::shard_of;
  weight = register_parameter("weight", shard_of(w, group_.rank(), group_.size()));
  if (b.defined()) bias = register_parameter("bias", shard_of(b, group_.rank(), group_.size()));
}

Tensor FsdpLinear::forward(const Tensor& x) {
  using distributed::unshard;
  Tensor w = unshard(distributed::gather_shards(weight, group_, grad_reduce_), {out_features, in_features});
  Tensor b = bias.defined() ? unshard(distributed::gather_shards(bias, group_, grad_reduce_), {out_features}) : Tensor();
  return linear(x, w, b);
}

std::optional<Shape> FsdpLinear::full_shape(const std::string& name) const {
  if (name == "weight") return Shape{out_features, in_features};
  if (name == "bias" && bias.defined()) return Shape{out_features};
  return std::nullopt;
}

}  // namespace rumus::nn
