#pragma once
// Base of every layer and model: named parameters, buffers and submodules.
#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/state_dict.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class Module;

namespace detail { struct ForwardHooks; }

// Removes a hook that Module::register_forward_pre_hook or
// register_forward_hook added (PyTorch's RemovableHandle).
class ModuleHookHandle {
 public:
  ModuleHookHandle() = default;
  void remove();  // idempotent; harmless once the module is gone
  bool active() const;

 private:
  friend class Module;
  ModuleHookHandle(std::weak_ptr<detail::ForwardHooks> hooks, std::uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  std::weak_ptr<detail::ForwardHooks> hooks_;
  std::uint64_t id_ = 0;
};

// For register_modules({{"conv1", conv1}, {"fc1", fc1}}).
struct NamedModule {
  std::string name;
  Module& module;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Moves (a std::vector<Net> that grows): parameters are shared handles, and
  // children registered by reference, being members, are found at the same
  // place in the new module. Move a module only into one of its own type.
  Module(Module&& other);
  Module& operator=(Module&&) = delete;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& input);
  // forward on an input nothing else holds (Sequential passes each layer's
  // output on this way); activations override it to write over the input.
  virtual Tensor forward_owned(Tensor&& input) { return forward(input); }
  // forward with the module's hooks around it.
  Tensor operator()(const Tensor& input) { return hooks_ ? call_hooked(input) : forward(input); }
  // What containers (Sequential) call: forward_owned with the hooks around it.
  Tensor call_owned(Tensor&& input) { return hooks_ ? call_hooked(input) : forward_owned(std::move(input)); }

  // PyTorch's forward hooks. They run when the module is called, through
  // operator() or by a container, not when forward() is called directly
  // (PyTorch's run from __call__ only). A pre-hook sees the input and may
  // return a replacement; a hook sees input and output and may return a
  // replacement output; an undefined return keeps the tensor. They run in
  // registration order.
  using ForwardPreHook = std::function<Tensor(Module& module, const Tensor& input)>;
  using ForwardHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
  ModuleHookHandle register_forward_pre_hook(ForwardPreHook hook);
  ModuleHookHandle register_forward_hook(ForwardHook hook);
  // The type name used in messages and printouts ("Linear", "Net").
  virtual std::string type_name() const { return "Module"; }

  // Parameters of this module and every submodule, depth first, in registration order.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  std::vector<Module*> children() const;
  // This module (named `prefix`, "" by default) and every submodule below it,
  // depth first, each once even where registered twice (as PyTorch).
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "") const;
  std::vector<Module*> modules() const;
  // Calls fn on every submodule, then on this module (PyTorch's order), e.g.
  // to initialise weights: net.apply([](nn::Module& m) { ... }).
  Module& apply(const std::function<void(Module&)>& fn);
  std::int64_t num_parameters() const;

  // Gives every parameter and buffer (persistent or not) of this module new
  // storage holding a copy of the same-named tensor of `source`: values,
  // device and dtype. The names and shapes must match; training flags and
  // requires_grad are copied too. nn::clone builds on it.
  void copy_from(const Module& source);

  // Recursive; Dropout and BatchNorm2d behave differently in training.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and buffers in place: tensors keep their identity, so
  // an optimizer built earlier still updates them.
  void to(Device device);
  // Casts floating parameters and buffers in place (integer buffers such as
  // num_batches_tracked keep their dtype, as in PyTorch). As with PyTorch,
  // build the optimizer after `to`: state it already holds keeps the old dtype.
  void to(DType dtype);
  void to(Device device, DType dtype) {
    to(device);
    to(dtype);
  }

  // PyTorch's printout: "Sequential(\n  (0): Linear(in_features=784, ...)\n  (1): ReLU()\n)".
  std::string pretty_print() const;
  // What goes between the parentheses of this module's own line ("in_features=784, ...").
  virtual std::string extra_repr() const { return ""; }

  // Parameters and persistent buffers under dotted names ("features.0.weight").
  StateDict state_dict() const;
  // Copies values in place. Shapes and dtypes must match; with strict, the
  // names must match exactly (missing and unexpected names are listed).
  void load_state_dict(const StateDict& state, bool strict = true);

 protected:
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value, bool persistent = true);
  // By reference: the child is a member of this module and lives as long as it.
  Module& register_module(const std::string& name, Module& child);
  // Owned: for containers such as Sequential.
  Module& register_module(const std::string& name, std::shared_ptr<Module> child);
  void register_modules(std::initializer_list<NamedModule> children);
  // Puts `child` (owned) in place of the submodule registered as `name`, at the same position.
  Module& replace_module(const std::string& name, std::shared_ptr<Module> child);

 private:
  struct Child {
    std::string name;
    Module* module;
    std::shared_ptr<Module> owned;
  };
  struct Buffer {
    std::string name;
    Tensor tensor;
    bool persistent;
  };
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out, bool params,
               bool persistent_only) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<Buffer> buffers_;
  Tensor call_hooked(const Tensor& input);

  std::vector<Child> children_;
  bool training_ = true;
  std::shared_ptr<detail::ForwardHooks> hooks_;  // null until a hook is registered
};

std::ostream& operator<<(std::ostream& os, const Module& module);

// A deep copy (EMA weights, target networks): a new module of the same type
// whose parameters and buffers are new tensors with equal values, on the
// source's device and dtype; updating one never changes the other. rumus
// modules are C++ objects without reflection, so the structure comes from
// `make`, which builds a fresh module of the same configuration (default
// construction when omitted); what make draws from the default generator is
// given back, so cloning leaves the random stream where it was.
template <class M, class Make>
  requires std::derived_from<M, Module> && std::is_invocable_r_v<M, Make>
std::unique_ptr<M> clone(const M& module, Make&& make) {
  Generator& gen = default_generator();
  const std::uint64_t seed = gen.seed(), offset = gen.offset();
  auto copy = std::make_unique<M>(std::forward<Make>(make)());
  gen.set_state(seed, offset);
  copy->copy_from(module);
  return copy;
}
template <class M>
  requires std::derived_from<M, Module> && std::default_initializable<M>
std::unique_ptr<M> clone(const M& module) {
  return clone(module, [] { return M(); });
}

}  // namespace rumus::nn

RUMUS_API_END
