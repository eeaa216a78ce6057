#include "rumus/distributed/fsdp.hpp"
#include "rumus/nn/deferred_init.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "rumus/autograd/function.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/storage.hpp"
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

// ---- wrap policies ----

WrapPolicy module_wrap_policy(std::vector<std::string> type_names) {
  return [names = std::move(type_names)](const nn::Module& m, const std::string&, std::int64_t) {
    return std::find(names.begin(), names.end(), m.type_name()) != names.end();
  };
}

WrapPolicy size_based_wrap_policy(std::int64_t min_num_params) {
  if (min_num_params < 1)
    throw Error(fmt::format("size_based_wrap_policy: expected min_num_params >= 1, got {}", min_num_params));
  return [min_num_params](const nn::Module&, const std::string&, std::int64_t unwrapped) {
    return unwrapped >= min_num_params;
  };
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
  // Installed by a forward that recorded a graph, with no gather node to
  // hold a lease (a frozen parameter): the graph may read it, so it stays
  // installed until the next forward.
  bool pinned = false;
};

struct FullyShardedModule::Unit {
  std::string name;                  // "" for the wrapped module's own unit
  nn::Module* module = nullptr;      // null for the wrapped module's own unit
  std::vector<std::shared_ptr<Param>> params;
  std::int64_t full_bytes = 0;       // its gathered parameters
  std::vector<std::shared_ptr<distributed::Work>> prefetch;  // all_gathers started ahead, one per param
  std::int64_t prefetch_bytes = 0;
  std::vector<std::shared_ptr<void>> forward_leases;  // held from its forward pre-hook to its hook
  // The storages its last forward gathered and freed, for backward prefetch.
  std::vector<std::weak_ptr<Storage>> freed;
  nn::ModuleHookHandle pre_hook, post_hook;
  // From its backward's first reduce-scatter: the full gradients of its
  // parameters not reduce-scattered yet, counted as made (memory_stats).
  bool grads_started = false;
  std::int64_t pending_grad_bytes = 0;
};

struct FullyShardedModule::Shared : std::enable_shared_from_this<FullyShardedModule::Shared> {
  Shared(ProcessGroup& g, ShardOptions o) : group(g), options(std::move(o)) {}
  ProcessGroup& group;
  ShardOptions options;
  std::vector<std::unique_ptr<Unit>> units;  // units[0]: the wrapped module's own
  std::vector<Unit*> forward_order, this_forward;  // non-root units, in the order they ran
  // Gathered storages (for memory_stats), pruned as they die.
  std::vector<std::weak_ptr<Storage>> gathered;
  // Full-size gradients that reached their reduce-scatter, and the shards'
  // gradients it made (kept by the caller's GradientStore), until they die.
  std::vector<std::weak_ptr<Storage>> full_grads, shard_grads;
  std::int64_t peak_gathered = 0, peak_param_grad = 0;

  std::int64_t gathered_bytes() {
    std::int64_t bytes = alive_bytes(gathered);
    for (auto& u : units) bytes += u->prefetch_bytes;
    return bytes;
  }
  // Samples both peaks. Parameters and gradients: the shards, their
  // gradients, the gathered parameters, and the full gradients made and not
  // yet freed.
  void sample() {
    const std::int64_t full = gathered_bytes();
    std::int64_t bytes = full + alive_bytes(full_grads) + alive_bytes(shard_grads);
    for (auto& u : units) {
      bytes += u->pending_grad_bytes;
      for (auto& p : u->params) bytes += p->shard.numel() * std::int64_t(dtype_size(p->shard.dtype()));
    }
    peak_gathered = std::max(peak_gathered, full);
    peak_param_grad = std::max(peak_param_grad, bytes);
  }

 private:
  // Bytes of the listed storages still alive (each once), pruning the dead.
  static std::int64_t alive_bytes(std::vector<std::weak_ptr<Storage>>& list) {
    std::erase_if(list, [](const std::weak_ptr<Storage>& w) { return w.expired(); });
    std::set<const Storage*> counted;  // a storage listed again counts once
    std::int64_t bytes = 0;
    for (auto& w : list)
      if (auto st = w.lock(); st && !st->released() && counted.insert(st.get()).second)
        bytes += std::int64_t(st->nbytes());
    return bytes;
  }
};

namespace {

using Param = FullyShardedModule::Param;
using Unit = FullyShardedModule::Unit;
using Shared = FullyShardedModule::Shared;

// shard_of for a parameter built under nn::DeferredInit: only this rank's rows are ever filled.
Tensor deferred_shard(const Tensor& t, int rank, int size) {
  const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0), c = distributed::shard_rows(rows, size);
  const std::int64_t start = std::min<std::int64_t>(rank * c, rows), end = std::min<std::int64_t>(start + c, rows);
  Shape s = t.dim() == 0 ? Shape{1} : t.shape();
  s[0] = c;
  NoGradGuard no_grad;
  Tensor out = zeros(s, {.dtype = t.dtype(), .device = t.device()});
  if (end > start) out.narrow(0, 0, end - start).copy_(nn::deferred_rows(t, start, end));
  return out;
}


// Empties the module's parameter: an empty placeholder of shape [0].
void release_full(Param& p) {
  p.installed = Tensor();
  p.pinned = false;
  if (auto t = p.target.lock()) {
    Tensor placeholder = empty({0}, {.dtype = p.shard.dtype(), .device = p.shard.device()});
    t->storage = placeholder.storage_ptr();
    t->layout = placeholder.layout();
    t->dtype = placeholder.dtype();
  }
}

// Makes the module's parameter the gathered `full` tensor, identity included,
// so ops that use it connect to the gather on the tape.
void install_full(Param& p, const Tensor& full) {
  p.installed = full;
  if (auto t = p.target.lock()) {
    t->storage = full.storage_ptr();
    t->layout = full.layout();
    t->dtype = full.dtype();
    t->id = full.grad_id();
    t->requires_grad = full.requires_grad();
  }
}

// Keeps a parameter's gathered copy alive; the last one to go frees it.
struct Lease {
  explicit Lease(std::shared_ptr<Param> p) : param(std::move(p)) { ++param->users; }
  ~Lease() {
    if (--param->users == 0 && !param->pinned) release_full(*param);
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  std::shared_ptr<Param> param;
};

// What a parameter is gathered from: its shard, cast to the mixed-precision
// param_dtype when one is set (off the tape: the gather node maps gradients back).
Tensor gather_source(const Param& p, const MixedPrecision& mp) {
  NoGradGuard no_grad;
  if (mp.param_dtype && is_floating(p.shard.dtype()) && p.shard.dtype() != *mp.param_dtype)
    return p.shard.to(*mp.param_dtype);
  return p.shard;
}

std::int64_t gathered_nbytes(const Param& p, int size, const MixedPrecision& mp) {
  const DType d = mp.param_dtype && is_floating(p.shard.dtype()) ? *mp.param_dtype : p.shard.dtype();
  return p.shard.numel() * size * std::int64_t(dtype_size(d));
}

// Starts the all_gathers of a unit's parameters (prefetch), unless started.
void start_gathers(Shared& s, Unit& u) {
  if (!u.prefetch.empty()) return;
  for (auto& p : u.params) {
    u.prefetch.push_back(s.group.all_gather_async(gather_source(*p, s.options.mixed_precision)));
    u.prefetch_bytes += gathered_nbytes(*p, s.group.size(), s.options.mixed_precision);
  }
}

// The unit's gathered parameters (padded, [size * c, ...]): the prefetched
// ones, or gathered now.
std::vector<Tensor> take_gathered(Shared& s, Unit& u) {
  start_gathers(s, u);
  std::vector<Tensor> out;
  std::vector<std::shared_ptr<distributed::Work>> works = std::move(u.prefetch);
  u.prefetch.clear();
  u.prefetch_bytes = 0;
  for (auto& w : works) out.push_back(w->result());
  // The communication thread lets go of a Work (and so of its result) just
  // after finishing it; wait for that, so the gathered tensors are held here
  // alone and their memory goes when the unit frees them, not when that
  // thread next runs.
  for (auto& w : works)
    while (w.use_count() > 1) std::this_thread::yield();
  for (auto& t : out) s.gathered.push_back(t.storage_ptr());
  return out;
}

// Waits for and drops prefetches nothing took (a unit backward never reached).
void drop_prefetches(Shared& s) {
  for (auto& u : s.units) {
    for (auto& w : u->prefetch) w->wait();
    u->prefetch.clear();
    u->prefetch_bytes = 0;
  }
}

// Backward prefetch: starts the gather of the unit that ran before `u` in
// forward, when that one freed its parameters.
void prefetch_unit_before(Shared& s, const Unit& u) {
  auto it = std::find(s.forward_order.begin(), s.forward_order.end(), &u);
  if (it == s.forward_order.end() || it == s.forward_order.begin()) return;
  Unit& prev = **(it - 1);
  for (auto& w : prev.freed)
    if (auto st = w.lock(); st && st->released()) {
      start_gathers(s, prev);
      s.sample();
      return;
    }
}

// A full gradient of one of the unit's parameters reached its reduce-scatter.
// The unit's backward made all of its gradients by its first one (a unit of
// one layer) or makes them soon after, so from then on those not yet here
// count as made: the count is exact for a unit of one layer and an upper
// bound otherwise.
void count_full_grad(Shared& s, Unit& u, const Tensor& g, std::int64_t full_bytes) {
  if (!u.grads_started) {
    u.grads_started = true;
    u.pending_grad_bytes = 0;
    for (auto& p : u.params)
      if (p->shard.requires_grad()) u.pending_grad_bytes += gathered_nbytes(*p, s.group.size(), s.options.mixed_precision);
  }
  u.pending_grad_bytes -= full_bytes;
  s.full_grads.push_back(g.storage_ptr());
  s.sample();
  if (u.pending_grad_bytes <= 0) {  // the unit's last: its backward is over
    u.grads_started = false;
    u.pending_grad_bytes = 0;
    // Every op of the unit has run its backward, so its parameters gathered
    // again are freed now rather than when the graph's closures die; not
    // under create_graph, whose recorded gradient ops may still read them.
    if (!grad_enabled())
      for (auto& w : u.freed)
        if (auto st = w.lock(); st && !st->released()) st->release_bytes();
    if (s.options.backward_prefetch == BackwardPrefetch::backward_post) prefetch_unit_before(s, u);
  }
}

// Gathers a unit's parameters into the module's parameter tensors. With grad
// enabled, each trainable one goes through a gather node whose backward
// reduce-scatters the gradient (in reduce_dtype) into the shard's, holding a
// lease until then. The returned leases keep them for the forward.
std::vector<std::shared_ptr<void>> install_unit(Shared& s, Unit& u) {
  std::vector<Tensor> full = take_gathered(s, u);
  std::vector<std::shared_ptr<void>> leases;
  const Reduce grad_reduce = s.options.grad_reduce;
  const MixedPrecision mp = s.options.mixed_precision;
  ProcessGroup& group = s.group;
  u.grads_started = false;  // a backward that left a gradient out is over
  u.pending_grad_bytes = 0;
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    Param& p = *u.params[i];
    auto lease = std::make_shared<Lease>(u.params[i]);
    Tensor gathered;
    p.pinned = false;
    if (grad_enabled() && p.shard.requires_grad()) {
      const DType shard_dtype = p.shard.dtype();
      const std::int64_t full_bytes = gathered_nbytes(p, group.size(), mp);
      autograd::CustomFunction fn{
          "fsdp_all_gather", [t = full[i]](const std::vector<Tensor>&) { return t; },
          [&group, grad_reduce, mp, shard_dtype, lease, weak = s.weak_from_this(), unit = &u, full_bytes](
              const Tensor& g, const std::vector<Tensor>&, const Tensor&) {
            std::shared_ptr<Shared> sp = weak.lock();
            if (sp) count_full_grad(*sp, *unit, g, full_bytes);
            const std::optional<DType> reduce_dtype = mp.reduce_dtype ? mp.reduce_dtype : mp.param_dtype;
            const Tensor sent = reduce_dtype && g.dtype() != *reduce_dtype ? g.to(*reduce_dtype) : g;
            if (sp && sent.storage_ptr() != g.storage_ptr()) {
              sp->full_grads.push_back(sent.storage_ptr());
              sp->sample();
            }
            Tensor r = group.reduce_scatter(sent, grad_reduce);
            if (r.dtype() != shard_dtype) r = r.to(shard_dtype);
            if (sp) sp->shard_grads.push_back(r.storage_ptr());
            return std::vector<Tensor>{r};
          }};
      gathered = autograd::apply(fn, {p.shard});
    } else {
      gathered = full[i];
      p.pinned = grad_enabled();
    }
    install_full(p, unshard(gathered, p.full_shape));
    leases.push_back(std::move(lease));
  }
  s.sample();
  return leases;
}

// Backward reached a unit whose forward freed its parameters: gather them
// again into the very storages its ops saved, then start the gather of the
// unit before it (in forward order) when that one was freed too.
void regather_unit(Shared& s, Unit& u, const std::vector<std::weak_ptr<Storage>>& freed) {
  std::vector<std::shared_ptr<Storage>> targets;
  bool any = false;
  for (auto& w : freed) {
    targets.push_back(w.lock());
    any = any || (targets.back() && targets.back()->released());
  }
  if (!any) return;  // a second backward through the graph (retain_graph): still gathered
  std::vector<Tensor> full = take_gathered(s, u);
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (targets[i] && targets[i]->released()) {
      targets[i]->take_bytes(full[i].storage());
      s.gathered.push_back(targets[i]);
    }
  s.sample();
  if (s.options.backward_prefetch == BackwardPrefetch::backward_pre) prefetch_unit_before(s, u);
}

// The forward hooks that make a submodule a unit.
void attach_unit_hooks(const std::shared_ptr<Shared>& shared, Unit& u) {
  std::weak_ptr<Shared> weak = shared;
  u.pre_hook = u.module->register_forward_pre_hook([weak, &u](nn::Module&, const Tensor&) {
    auto s = weak.lock();
    if (!s) return Tensor();
    s->this_forward.push_back(&u);
    u.forward_leases = install_unit(*s, u);
    if (s->options.forward_prefetch) {
      auto it = std::find(s->forward_order.begin(), s->forward_order.end(), &u);
      if (it != s->forward_order.end() && it + 1 != s->forward_order.end()) {
        start_gathers(*s, **(it + 1));
        s->sample();
      }
    }
    return Tensor();
  });
  u.post_hook = u.module->register_forward_hook([weak, &u](nn::Module&, const Tensor&, const Tensor& out) {
    auto s = weak.lock();
    if (!s) return Tensor();
    const bool recorded = grad_enabled() && out.defined() && out.requires_grad();
    std::vector<std::weak_ptr<Storage>> freed;
    if (recorded && s->options.reshard_after_forward) {
      for (auto& p : u.params)
        if (p->installed.defined()) {
          std::shared_ptr<Storage> st = p->installed.storage_ptr();
          st->release_bytes();
          freed.push_back(st);
        } else {
          freed.emplace_back();
        }
      u.freed = freed;
      // The output passes through an identity node: its backward runs once
      // the output's gradient is complete, before any op of the unit, and
      // lives as long as the graph (a tensor hook would die with the output).
      // It saves nothing: the output is not kept for it.
      Tensor passed = out.detach();
      autograd::record("fsdp_pre_backward", {out}, passed, [weak, &u, freed](const Tensor& g) {
        if (auto s2 = weak.lock()) regather_unit(*s2, u, freed);
        return std::vector<Tensor>{g};
      });
      u.forward_leases.clear();
      return passed;
    }
    u.forward_leases.clear();  // without a graph this frees the gathered copies
    return Tensor();
  });
}

}  // namespace

FullyShardedModule::FullyShardedModule(nn::Module& module, ProcessGroup& group, ShardOptions options)
    : module_(module), group_(group), options_(options), shared_(std::make_shared<Shared>(group, options)) {
  std::unordered_set<const TensorImpl*> seen;
  std::vector<std::pair<std::string, Tensor>> named = module.named_parameters();
  for (auto& [name, t] : named)
    if (!seen.insert(t.impl_ptr().get()).second)
      throw Error(fmt::format("fsdp::shard: parameter '{}' of the {} shares its tensor with another parameter; tied "
                              "parameters cannot be sharded",
                              name, module.type_name()));
  const MixedPrecision& mp = options_.mixed_precision;
  for (const std::optional<DType>& d : {mp.param_dtype, mp.reduce_dtype})
    if (d && !is_floating(*d))
      throw DTypeError(fmt::format("fsdp::shard: mixed_precision expects floating dtypes, got {}", dtype_name(*d)));

  // Units: the policy's submodules (bottom-up), then the wrapped module's own.
  std::map<std::string, std::size_t> unit_of;  // parameter name -> unit index
  std::vector<std::unique_ptr<Unit>> inner;
  if (options_.auto_wrap_policy) {
    std::vector<std::pair<std::string, nn::Module*>> mods = module.named_modules();
    for (auto it = mods.rbegin(); it != mods.rend(); ++it) {  // depth first, so reversed: children first
      auto& [mod_name, m] = *it;
      if (mod_name.empty()) continue;
      std::vector<std::string> free;
      std::int64_t numel = 0;
      for (auto& [pname, t] : m->named_parameters()) {
        const std::string full_name = mod_name + "." + pname;
        if (!unit_of.count(full_name)) {
          free.push_back(full_name);
          numel += t.numel();
        }
      }
      if (free.empty() || !options_.auto_wrap_policy(*m, mod_name, numel)) continue;
      auto u = std::make_unique<Unit>();
      u->name = mod_name;
      u->module = m;
      for (auto& n : free) unit_of[n] = 1 + inner.size();
      inner.push_back(std::move(u));
    }
  }
  auto& units = shared_->units;
  units.push_back(std::make_unique<Unit>());
  for (auto& u : inner) units.push_back(std::move(u));

  for (auto& [name, t] : named) {
    auto p = std::make_shared<Param>();
    p->name = name;
    p->target = t.impl_ptr();
    p->full_shape = t.shape();
    if (nn::is_deferred(t)) {
      // Built under nn::DeferredInit: this rank draws its own rows and nothing
      // else (no broadcast: every rank replays the same recorded init).
      p->shard = deferred_shard(t, group_.rank(), group_.size());
      nn::detail::forget_deferred(t);
    } else {
      Tensor full = t.detach();
      if (options_.sync_from_rank0) group_.broadcast(full, 0);
      p->shard = shard_of(full, group_.rank(), group_.size());
    }
    p->shard.requires_grad_(t.requires_grad());
    release_full(*p);
    auto found = unit_of.find(name);
    Unit& u = *units[found == unit_of.end() ? 0 : found->second];
    u.params.push_back(p);
    u.full_bytes += gathered_nbytes(*p, group_.size(), mp);
    params_.push_back(std::move(p));
  }
  for (std::size_t i = 1; i < units.size(); ++i) attach_unit_hooks(shared_, *units[i]);
}

FullyShardedModule::~FullyShardedModule() {
  for (auto& u : shared_->units) {
    u->pre_hook.remove();
    u->post_hook.remove();
    for (auto& w : u->prefetch) {
      try {
        w->wait();
      } catch (...) {  // the group failed; its error was or will be raised where a collective was called
      }
    }
  }
}

Tensor FullyShardedModule::forward(const Tensor& input) {
  Shared& s = *shared_;
  // Leftover prefetches hold shards the optimizer may have changed since.
  drop_prefetches(s);
  s.this_forward.clear();

  Tensor x = input;
  const MixedPrecision& mp = options_.mixed_precision;
  if (mp.param_dtype && mp.cast_forward_inputs && x.defined() && is_floating(x.dtype()) && x.dtype() != *mp.param_dtype)
    x = x.to(*mp.param_dtype);
  // The wrapped module's own unit stays gathered for the whole forward.
  std::vector<std::shared_ptr<void>> held = install_unit(s, *s.units[0]);
  Tensor out = module_.forward(x);
  s.forward_order = s.this_forward;
  return out;
}

std::vector<std::string> FullyShardedModule::unit_names() const {
  std::vector<std::string> out;
  for (auto& u : shared_->units) out.push_back(u->name);
  return out;
}

FsdpMemoryStats FullyShardedModule::memory_stats() const {
  FsdpMemoryStats m;
  for (auto& p : params_) m.shard_bytes += p->shard.numel() * std::int64_t(dtype_size(p->shard.dtype()));
  shared_->sample();
  m.gathered_bytes = shared_->gathered_bytes();
  m.peak_gathered_bytes = shared_->peak_gathered;
  m.peak_param_grad_bytes = shared_->peak_param_grad;
  for (auto& u : shared_->units) m.largest_unit_bytes = std::max(m.largest_unit_bytes, u->full_bytes);
  return m;
}

void FullyShardedModule::reset_peak_memory_stats() {
  shared_->peak_gathered = shared_->peak_param_grad = 0;
  shared_->sample();
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
