#include "rumus/nn/module.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <set>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/nn/deferred_init.hpp"

namespace rumus::nn {

Module::Module(Module&& other)
    : params_(std::move(other.params_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      training_(other.training_),
      hooks_(std::move(other.hooks_)) {
  // A child registered by reference is a member of the module being moved
  // (register_module's contract), so this module's member at the same offset
  // takes its place: the derived class's move constructor moves it there
  // right after this base. Owned children moved with their shared_ptr.
  const std::uintptr_t from = reinterpret_cast<std::uintptr_t>(&other), to = reinterpret_cast<std::uintptr_t>(this);
  for (Child& c : children_)
    if (!c.owned) c.module = reinterpret_cast<Module*>(reinterpret_cast<std::uintptr_t>(c.module) - from + to);
}

Tensor Module::forward(const Tensor&) {
  throw Error(fmt::format("{}: forward(const Tensor&) is not implemented by this module", type_name()));
}

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw Error(fmt::format("{}: invalid name '{}' (expected a non-empty name without '.')", type_name(), name));
  bool taken = false;
  for (auto& p : params_) taken |= p.first == name;
  for (auto& b : buffers_) taken |= b.name == name;
  for (auto& c : children_) taken |= c.name == name;
  if (taken) throw Error(fmt::format("{}: the name '{}' is already registered", type_name(), name));
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  check_new_name(name);
  if (!value.defined()) throw Error(fmt::format("{}: parameter '{}' is undefined", type_name(), name));
  value.requires_grad_(requires_grad);
  detail::defer_parameter(value);  // under a DeferredInit: its bytes go until materialised
  params_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  check_new_name(name);
  if (!value.defined()) throw Error(fmt::format("{}: buffer '{}' is undefined", type_name(), name));
  buffers_.push_back({name, value, persistent});
  return value;
}

Module& Module::register_module(const std::string& name, Module& child) {
  check_new_name(name);
  children_.push_back({name, &child, nullptr});
  return child;
}

Module& Module::register_module(const std::string& name, std::shared_ptr<Module> child) {
  check_new_name(name);
  if (!child) throw Error(fmt::format("{}: submodule '{}' is null", type_name(), name));
  Module& ref = *child;
  children_.push_back({name, child.get(), std::move(child)});
  return ref;
}

Module& Module::replace_module(const std::string& name, std::shared_ptr<Module> child) {
  if (!child) throw Error(fmt::format("{}: submodule '{}' is null", type_name(), name));
  for (Child& c : children_)
    if (c.name == name) {
      c.module = child.get();
      c.owned = std::move(child);
      return *c.module;
    }
  throw Error(fmt::format("{}: expected a registered submodule '{}' to replace, got none", type_name(), name));
}

void Module::register_modules(std::initializer_list<NamedModule> children) {
  for (const NamedModule& c : children) register_module(c.name, c.module);
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool params,
                     bool persistent_only) const {
  if (params) {
    for (auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  } else {
    for (auto& b : buffers_)
      if (b.persistent || !persistent_only) out.emplace_back(prefix + b.name, b.tensor);
  }
  for (auto& c : children_) c.module->collect(prefix + c.name + ".", out, params, persistent_only);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, true, false);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", out, false, false);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& c : children_) out.emplace_back(c.name, c.module);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (auto& c : children_) out.push_back(c.module);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) const {
  std::vector<std::pair<std::string, Module*>> out;
  std::set<const Module*> seen;
  auto visit = [&](auto& self, const Module& m, const std::string& name) -> void {
    if (!seen.insert(&m).second) return;
    out.emplace_back(name, const_cast<Module*>(&m));
    for (auto& c : m.children_) self(self, *c.module, name.empty() ? c.name : name + "." + c.name);
  };
  visit(visit, *this, prefix);
  return out;
}

std::vector<Module*> Module::modules() const {
  std::vector<Module*> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& c : children_) c.module->apply(fn);
  fn(*this);
  return *this;
}

void Module::copy_from(const Module& source) {
  std::vector<std::pair<std::string, Tensor>> to = named_parameters(), from = source.named_parameters();
  collect("", to, false, false);
  source.collect("", from, false, false);
  auto names = [](const std::vector<std::pair<std::string, Tensor>>& v) {
    std::vector<std::string> out;
    for (auto& [n, t] : v) out.push_back(n);
    return out;
  };
  if (names(to) != names(from))
    throw Error(fmt::format("{}.copy_from: expected a module with the same parameters and buffers, got [{}] for [{}] "
                            "(for nn::clone, make must build the same structure)",
                            type_name(), fmt::join(names(from), ", "), fmt::join(names(to), ", ")));
  for (std::size_t i = 0; i < to.size(); ++i)
    if (to[i].second.shape() != from[i].second.shape())
      throw ShapeError(fmt::format("{}.copy_from: '{}' has shape {} in the source but {} here", type_name(),
                                   to[i].first, shape_str(from[i].second.shape()), shape_str(to[i].second.shape())));
  const auto mine = named_modules(), theirs = source.named_modules();
  if (mine.size() != theirs.size())
    throw Error(fmt::format("{}.copy_from: expected {} submodules as in the source, got {}", type_name(),
                            theirs.size(), mine.size()));
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < to.size(); ++i) {
    // New storage (not copy_ into the old): the copy takes the source's device and dtype.
    Tensor copy = from[i].second.detach().clone();
    TensorImpl& impl = to[i].second.impl();
    impl.storage = copy.storage_ptr();
    impl.layout = copy.layout();
    impl.dtype = copy.dtype();
    impl.requires_grad = from[i].second.requires_grad();
  }
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i].second->training_ = theirs[i].second->training_;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.module->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  auto move = [&](const Tensor& t) {
    if (t.device() == device) return;
    Tensor moved = t.to(device);
    t.impl().storage = moved.storage_ptr();
    t.impl().layout = moved.layout();
  };
  for (auto& [n, t] : named_parameters()) move(t);
  for (auto& [n, t] : named_buffers()) move(t);
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError(fmt::format("{}.to: expected a floating dtype (integer buffers keep theirs), got {}", type_name(),
                                 dtype_name(dtype)));
  NoGradGuard no_grad;
  auto cast = [&](const Tensor& t) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
    Tensor cast_t = t.to(dtype);
    t.impl().storage = cast_t.storage_ptr();
    t.impl().layout = cast_t.layout();
    t.impl().dtype = dtype;
  };
  for (auto& [n, t] : named_parameters()) cast(t);
  for (auto& [n, t] : named_buffers()) cast(t);
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [n, t] : named_parameters()) out.emplace(n, t.detach());
  std::vector<std::pair<std::string, Tensor>> bufs;
  collect("", bufs, false, true);
  for (auto& [n, t] : bufs) out.emplace(n, t.detach());
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> targets = named_parameters();
  collect("", targets, false, true);
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (auto& [n, t] : targets) {
    known.insert(n);
    if (!state.count(n)) missing.push_back(n);
  }
  for (auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty()))
    throw Error(fmt::format("load_state_dict: names do not match the {}: missing [{}], unexpected [{}]", type_name(),
                            fmt::join(missing, ", "), fmt::join(unexpected, ", ")));
  for (auto& [n, t] : targets) {
    auto it = state.find(n);
    if (it == state.end()) continue;
    const Tensor& src = it->second;
    if (src.shape() != t.shape())
      throw ShapeError(fmt::format("load_state_dict: '{}' has shape {} in the state dict but {} in the {}", n,
                                   shape_str(src.shape()), shape_str(t.shape()), type_name()));
    if (src.dtype() != t.dtype())
      throw DTypeError(fmt::format("load_state_dict: '{}' has dtype {} in the state dict but {} in the {}", n,
                                   dtype_name(src.dtype()), dtype_name(t.dtype()), type_name()));
  }
  // Everything is checked before the first write, so a failed load changes nothing.
  NoGradGuard no_grad;
  for (auto& [n, t] : targets) {
    auto it = state.find(n);
    if (it != state.end()) {
      materialize(t);  // a parameter built under a DeferredInit gets its bytes first
      Tensor(t).copy_(it->second);
    }
  }
}

// ---- forward hooks ----

namespace detail {
struct ForwardHooks {
  std::uint64_t next_id = 1;
  std::vector<std::pair<std::uint64_t, Module::ForwardPreHook>> pre;
  std::vector<std::pair<std::uint64_t, Module::ForwardHook>> post;
};
}  // namespace detail

namespace {
template <class List>
bool erase_id(List& list, std::uint64_t id) {
  for (auto it = list.begin(); it != list.end(); ++it)
    if (it->first == id) {
      list.erase(it);
      return true;
    }
  return false;
}
template <class List>
bool has_id(const List& list, std::uint64_t id) {
  for (auto& e : list)
    if (e.first == id) return true;
  return false;
}
}  // namespace

void ModuleHookHandle::remove() {
  if (auto h = hooks_.lock())
    if (!erase_id(h->pre, id_)) erase_id(h->post, id_);
  hooks_.reset();
}

bool ModuleHookHandle::active() const {
  auto h = hooks_.lock();
  return h && (has_id(h->pre, id_) || has_id(h->post, id_));
}

ModuleHookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  if (!hook) throw Error(fmt::format("{}.register_forward_pre_hook: expected a callable hook, got an empty one", type_name()));
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  const std::uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return ModuleHookHandle(hooks_, id);
}

ModuleHookHandle Module::register_forward_hook(ForwardHook hook) {
  if (!hook) throw Error(fmt::format("{}.register_forward_hook: expected a callable hook, got an empty one", type_name()));
  if (!hooks_) hooks_ = std::make_shared<detail::ForwardHooks>();
  const std::uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return ModuleHookHandle(hooks_, id);
}

Tensor Module::call_hooked(const Tensor& input) {
  // Copies: a hook may remove itself (or others) while they run.
  const std::shared_ptr<detail::ForwardHooks> hooks = hooks_;
  Tensor x = input;
  for (const auto& entry : std::vector(hooks->pre))
    if (Tensor r = entry.second(*this, x); r.defined()) x = std::move(r);
  Tensor y = forward(x);
  for (const auto& entry : std::vector(hooks->post))
    if (Tensor r = entry.second(*this, x, y); r.defined()) y = std::move(r);
  return y;
}

}  // namespace rumus::nn
