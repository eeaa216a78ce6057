#include "rumus/autograd/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "rumus/autograd/autocast.hpp"
#include "rumus/autograd/hooks.hpp"
#include "rumus/autograd/tape.hpp"
#include "rumus/core/profiler.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

using autograd::Node;

namespace {

// The gradients a tensor receives from several consumers, summed. Their
// dtypes must agree: a backward that changed one would be a bug to report,
// not a promotion to make.
Tensor sum_of(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw AutogradError(fmt::format("backward: gradients of one tensor differ in dtype: {} and {}",
                                    dtype_name(a.dtype()), dtype_name(b.dtype())));
  return add(a, b);
}

// A view of part of its input (`node.embed` set) whose input's gradient is a
// buffer the engine made: the view's gradient is added into that part of it
// in place. True when done; otherwise the node's backward runs as any other.
bool add_into_part(std::unordered_map<GradId, Tensor>& grads, const std::unordered_set<GradId>& owned,
                   const autograd::Node& node, const Tensor& grad) {
  if (!node.embed || !node.input_needs_grad[0] || !owned.count(node.inputs[0])) return false;
  const Tensor& whole = grads.at(node.inputs[0]);
  if (whole.dtype() != grad.dtype()) return false;
  Tensor part = node.embed(whole);
  part.add_(grad);
  return true;
}

}  // namespace

Tensor GradientStore::get(const Tensor& t) const {
  auto it = grads_.find(t.grad_id());
  return it == grads_.end() ? Tensor() : it->second;
}

Tensor GradientStore::at(const Tensor& t) const {
  auto it = grads_.find(t.grad_id());
  if (it == grads_.end())
    throw AutogradError(fmt::format("GradientStore::at: no gradient for the tensor of shape {} (it does not "
                                    "require grad or does not reach the root)",
                                    shape_str(t.shape())));
  return it->second;
}

GradientStore& GradientStore::operator+=(const GradientStore& other) {
  for (const auto& [id, g] : other.grads_) {
    auto [slot, fresh] = grads_.try_emplace(id, g);
    if (fresh) continue;
    if (slot->second.shape() != g.shape())
      throw ShapeError(fmt::format("GradientStore +=: gradients of one tensor differ in shape: {} and {}",
                                   shape_str(slot->second.shape()), shape_str(g.shape())));
    slot->second = sum_of(slot->second, g);  // a new tensor: the stores may share the old one
  }
  return *this;
}

Tensor* GradientStore::find(GradId id) {
  auto it = grads_.find(id);
  return it == grads_.end() ? nullptr : &it->second;
}

GradientStore backward(const Tensor& root, BackwardOptions options) {
  if (root.numel() != 1)
    throw AutogradError(fmt::format("backward: expected a scalar (1-element) root when no seed is given, got "
                                    "shape {}; pass a seed gradient",
                                    shape_str(root.shape())));
  return backward(root, ones_like(root), options);
}

namespace {

// One pass of Kahn's algorithm over the part of this thread's tape reachable
// from the roots. Returns the gradients of the leaves, and of the recorded
// tensors in `wanted` (captured when their producer runs).
struct Pass {
  std::vector<Tensor> roots, seeds;  // seeds already shaped and typed as their roots
  std::unordered_set<GradId> wanted;
  bool retain_graph = false;
  bool create_graph = false;
  const char* caller = "backward";
};

std::unordered_map<GradId, Tensor> run(const Pass& pass) {
  // The backward records its own ops only under create_graph.
  const bool prev_grad = grad_enabled();
  set_grad_enabled(pass.create_graph);
  struct RestoreGrad {
    bool prev;
    ~RestoreGrad() { set_grad_enabled(prev); }
  } restore{prev_grad};
  autograd::NoPruneGuard no_prune;  // nodes are reached by index while the backward may record
  detail::ProfilePhase phase("backward");
  AutocastGuard no_autocast(false);  // backward keeps the dtypes the forward chose
  auto& tape = autograd::this_thread_tape();
  const std::size_t recorded = tape.size();  // entries the backward itself records come after
  std::unordered_map<GradId, std::size_t> producer;
  producer.reserve(recorded);
  for (std::size_t i = 0; i < recorded; ++i) producer[tape[i].output] = i;
  for (const Tensor& root : pass.roots) {
    // A recorded root whose entry is gone would silently give no gradients.
    const std::thread::id recorded_on = root.impl().recorded_on;
    if (recorded_on == std::thread::id{} || producer.count(root.grad_id())) continue;
    if (recorded_on != std::this_thread::get_id())
      throw AutogradError(fmt::format("{}: the root's graph was recorded on another thread; each thread records on "
                                      "its own tape, so run a graph's forward and backward on one thread",
                                      pass.caller));
    throw AutogradError(fmt::format("{}: the root's graph was already freed by an earlier backward; pass "
                                    "{{.retain_graph = true}} to the first one to run backward twice",
                                    pass.caller));
  }

  // The subgraph reachable from the roots, and how many consumers each tensor has in it.
  std::vector<char> reachable(recorded, 0);
  std::unordered_map<GradId, int> pending;
  std::vector<std::size_t> stack;
  for (const Tensor& root : pass.roots)
    if (auto it = producer.find(root.grad_id()); it != producer.end() && !reachable[it->second]) {
      reachable[it->second] = 1;
      stack.push_back(it->second);
    }
  while (!stack.empty()) {
    const Node& node = tape[stack.back()];
    stack.pop_back();
    if (!node.backward)
      throw AutogradError(fmt::format("{}: the graph through {} was already freed by an earlier backward; "
                                      "pass retain_graph to run backward twice",
                                      pass.caller, node.name));
    if (pass.create_graph && !node.differentiable)
      throw AutogradError(fmt::format("{}: {} has no differentiable backward yet, so create_graph cannot "
                                      "record it (docs/semantics.md lists the ops that have one)",
                                      pass.caller, node.name));
    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      if (!node.input_needs_grad[j]) continue;
      ++pending[node.inputs[j]];  // leaves too: their gradient is ready when the count is done
      auto it = producer.find(node.inputs[j]);
      if (it == producer.end()) continue;
      if (!reachable[it->second]) {
        reachable[it->second] = 1;
        stack.push_back(it->second);
      }
    }
  }

  // Sums the gradients a tensor receives from several consumers; recorded under create_graph.
  auto accumulate = [&](Tensor& into, const Tensor& g) {
    if (into.dtype() != g.dtype())
      throw AutogradError(fmt::format("{}: gradients of one tensor differ in dtype: {} and {}", pass.caller,
                                      dtype_name(into.dtype()), dtype_name(g.dtype())));
    into = sum_of(into, g);
  };

  const bool hooks = autograd::has_hooks_or_retained();
  const bool anomaly = autograd::anomaly_mode_enabled();
  // Kahn's algorithm: an entry runs once every consumer of its output is done.
  std::unordered_map<GradId, Tensor> grads, captured;
  std::unordered_set<GradId> owned;  // gradients in buffers the engine made: nothing else holds them
  std::vector<std::size_t> ready;
  for (std::size_t r = 0; r < pass.roots.size(); ++r) {
    const GradId id = pass.roots[r].grad_id();
    auto [slot, fresh] = grads.try_emplace(id, pass.seeds[r]);
    if (!fresh) accumulate(slot->second, pass.seeds[r]);
  }
  for (const Tensor& root : pass.roots)
    if (auto it = producer.find(root.grad_id()); it != producer.end() && pending[root.grad_id()] == 0 &&
                                                 std::find(ready.begin(), ready.end(), it->second) == ready.end())
      ready.push_back(it->second);
  while (!ready.empty()) {
    const std::size_t at = ready.back();
    ready.pop_back();
    auto git = grads.find(tape[at].output);
    Tensor grad_out = git != grads.end() ? std::move(git->second) : Tensor();
    if (git != grads.end()) grads.erase(git);  // freed as soon as its consumers are done
    if (grad_out.defined() && hooks) {  // this tensor's gradient is complete: its hooks, then retain_grad
      grad_out = autograd::run_hooks(tape[at].output, std::move(grad_out));
      if (autograd::is_retained(tape[at].output)) captured[tape[at].output] = grad_out;
    }
    if (grad_out.defined() && pass.wanted.count(tape[at].output)) captured[tape[at].output] = grad_out;

    owned.erase(tape[at].output);
    // In place into the input's gradient: not under create_graph, whose sums are recorded ops.
    const bool added = grad_out.defined() && !pass.create_graph && add_into_part(grads, owned, tape[at], grad_out);

    std::vector<Tensor> input_grads;
    if (grad_out.defined() && !added) {
      try {
        // Out of the tape first: a backward that records (create_graph, or a
        // checkpoint's recomputation) can move the tape's entries.
        const autograd::BackwardFn backward =
            pass.retain_graph ? tape[at].backward : std::move(tape[at].backward);
        input_grads = backward(grad_out);
      } catch (const autograd::VersionError& e) {
        throw AutogradError(fmt::format("backward of {}: {}", tape[at].name, e.what()));
      }
      if (input_grads.size() != tape[at].inputs.size())
        throw AutogradError(fmt::format("backward of {}: returned {} gradients for {} inputs", tape[at].name,
                                        input_grads.size(), tape[at].inputs.size()));
      if (anomaly && !autograd::has_non_finite(grad_out))  // the first op to make one, not those it flows through
        for (std::size_t j = 0; j < input_grads.size(); ++j)
          if (autograd::has_non_finite(input_grads[j]))
            throw AutogradError(fmt::format(
                "anomaly detected: the backward of {} (the forward's entry {} on the tape) returned NaN or infinite "
                "values in its gradient for input {} (shape {}), from a finite incoming gradient",
                tape[at].name, at, j, shape_str(input_grads[j].shape())));
    }
    // What the loop below reads of the entry, copied: under create_graph the
    // sums it records can move the tape's entries.
    Node copy{};
    if (pass.create_graph)
      copy = {.name = tape[at].name,
              .inputs = tape[at].inputs,
              .input_needs_grad = tape[at].input_needs_grad,
              .input_shapes = tape[at].input_shapes};
    const Node& node = pass.create_graph ? copy : tape[at];
    if (!pass.retain_graph) {  // releases saved tensors now
      tape[at].backward = nullptr;
      tape[at].embed = nullptr;
    }

    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      if (!node.input_needs_grad[j]) continue;
      GradId id = node.inputs[j];
      if (!input_grads.empty() && input_grads[j].defined()) {
        Tensor& g = input_grads[j];
        if (g.shape() != node.input_shapes[j])
          throw AutogradError(fmt::format("backward of {}: gradient shape {} differs from input {} shape {}",
                                          node.name, shape_str(g.shape()), j, shape_str(node.input_shapes[j])));
        auto [slot, fresh] = grads.try_emplace(id, g);
        if (!fresh) accumulate(slot->second, g);
        // Made here, or by a part-view's backward (a fresh zero-filled tensor): nothing else holds it.
        if (!fresh || node.embed) owned.insert(id);
      }
      if (--pending[id] != 0) continue;
      auto pit = producer.find(id);
      if (pit != producer.end()) {
        ready.push_back(pit->second);
      } else if (hooks) {  // a leaf whose gradient is complete
        if (auto g = grads.find(id); g != grads.end()) g->second = autograd::run_hooks(id, std::move(g->second));
      }
    }
  }

  std::unordered_map<GradId, Tensor> result = std::move(captured);
  for (auto& [id, g] : grads)
    if (!producer.count(id)) result[id] = std::move(g);

  if (!pass.retain_graph) {
    std::size_t w = 0;
    for (std::size_t i = 0; i < tape.size(); ++i) {
      if (i < recorded && reachable[i]) continue;
      if (w != i) tape[w] = std::move(tape[i]);  // never onto itself: a self-move empties a Node
      ++w;
    }
    tape.resize(w);
  }
  return result;
}

// The seed of one root: `seed` (checked, cast to the root's dtype) or ones for a 1-element root.
Tensor seed_for(const char* caller, const Tensor& root, const Tensor& seed) {
  if (!seed.defined()) {
    if (root.numel() != 1)
      throw AutogradError(fmt::format("{}: expected a scalar (1-element) root when no seed is given, got "
                                      "shape {}; pass a seed gradient",
                                      caller, shape_str(root.shape())));
    return ones_like(root);
  }
  if (seed.shape() != root.shape())
    throw ShapeError(fmt::format("{}: seed shape {} differs from root shape {}", caller, shape_str(seed.shape()),
                                 shape_str(root.shape())));
  return seed.to(root.dtype());
}

}  // namespace

GradientStore backward(const Tensor& root, const Tensor& seed, BackwardOptions options) {
  if (seed.shape() != root.shape())
    throw ShapeError(fmt::format("backward: seed shape {} differs from root shape {}", shape_str(seed.shape()),
                                 shape_str(root.shape())));
  if (!root.requires_grad())
    throw AutogradError("backward: the root does not require grad (no input of it requires grad, or it was "
                        "computed under NoGradGuard)");
  Tensor seed_value;
  {
    NoGradGuard no_grad;
    seed_value = seed.to(root.dtype());
  }
  std::unordered_map<GradId, Tensor> grads =
      run({.roots = {root}, .seeds = {seed_value}, .retain_graph = options.retain_graph});
  GradientStore store;
  for (auto& [id, g] : grads) store.insert(id, std::move(g));
  return store;
}

namespace autograd {

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options) {
  const char* op = "autograd::grad";
  if (outputs.empty()) throw AutogradError("autograd::grad: expected at least one output");
  if (!options.grad_outputs.empty() && options.grad_outputs.size() != outputs.size())
    throw AutogradError(fmt::format("autograd::grad: expected one grad_output per output ({}), got {}",
                                    outputs.size(), options.grad_outputs.size()));
  Pass pass{.retain_graph = options.retain_graph.value_or(options.create_graph),
            .create_graph = options.create_graph,
            .caller = op};
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (!out.defined() || !out.requires_grad())
      throw AutogradError(fmt::format("autograd::grad: output {} does not require grad (no input of it requires "
                                      "grad, or it was computed under NoGradGuard)",
                                      i));
    NoGradGuard no_grad;  // the seeds are constants of the pass
    pass.roots.push_back(out);
    pass.seeds.push_back(seed_for(op, out, options.grad_outputs.empty() ? Tensor() : options.grad_outputs[i]));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad())
      throw AutogradError(fmt::format("autograd::grad: input {} (shape {}) does not require grad", i,
                                      inputs[i].defined() ? shape_str(inputs[i].shape()) : "undefined"));
    pass.wanted.insert(inputs[i].grad_id());
  }
  std::unordered_map<GradId, Tensor> grads = run(pass);
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto it = grads.find(inputs[i].grad_id());
    if (it == grads.end() && !options.allow_unused)
      throw AutogradError(fmt::format("autograd::grad: input {} (shape {}) was not used to compute the outputs; "
                                      "pass {{.allow_unused = true}} to get an undefined gradient for it",
                                      i, shape_str(inputs[i].shape())));
    result.push_back(it == grads.end() ? Tensor() : it->second);
  }
  return result;
}

}  // namespace autograd

}  // namespace rumus
