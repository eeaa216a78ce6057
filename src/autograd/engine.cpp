#include "rumus/autograd/engine.hpp"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "../backend/backend.hpp"
#include "rumus/autograd/autocast.hpp"
#include "rumus/autograd/tape.hpp"
#include "rumus/core/profiler.hpp"

namespace rumus {

using autograd::Node;

namespace {

// The engine sits below ops, so its own arithmetic (the seed, and summing the
// gradients of a tensor with several consumers) goes straight to the kernels.
Tensor empty_like(const Tensor& t) {
  auto storage = std::make_shared<Storage>(t.device(), std::size_t(t.numel()) * dtype_size(t.dtype()));
  return Tensor(std::move(storage), Layout::contiguous(t.shape()), t.dtype());
}

Backend& kernels(Kernel kernel, const Tensor& t) {
  Backend& be = backend(t.device());
  if (!be.supports(kernel, t.dtype()))
    throw DeviceError(fmt::format("backward: device {} has no {} kernel for {} gradients", t.device().str(),
                                  name_of(kernel), dtype_name(t.dtype())));
  return be;
}

TensorArg arg(const Tensor& t) { return {t.storage_ptr().get(), t.dtype(), &t.layout()}; }

Tensor ones_like(const Tensor& t) {
  Tensor out = empty_like(t);
  kernels(Kernel::fill, out).fill(arg(out), 1.0);
  return out;
}

Tensor sum_of(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw AutogradError(fmt::format("backward: gradients of one tensor differ in dtype: {} and {}",
                                    dtype_name(a.dtype()), dtype_name(b.dtype())));
  Tensor out = empty_like(a);
  kernels(Kernel::binary, out).binary(BinaryOp::add, arg(out), arg(a), arg(b), 0, 0);
  return out;
}

// A view of part of its input (`node.embed` set) whose input's gradient is a
// buffer the engine made: the view's gradient is added into that part of it
// in place. True when done; otherwise the node's backward runs as any other.
bool add_into_part(std::unordered_map<GradId, Tensor>& grads, const std::unordered_set<GradId>& owned,
                   const autograd::Node& node, const Tensor& grad) {
  if (!node.embed || !node.input_needs_grad[0] || !owned.count(node.inputs[0])) return false;
  const Tensor& whole = grads.at(node.inputs[0]);
  if (whole.dtype() != grad.dtype()) return false;
  const Tensor part = node.embed(whole);
  kernels(Kernel::binary, part).binary(BinaryOp::add, arg(part), arg(part), arg(grad), 0, 0);
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

GradientStore backward(const Tensor& root, const Tensor& seed, BackwardOptions options) {
  if (seed.shape() != root.shape())
    throw ShapeError(fmt::format("backward: seed shape {} differs from root shape {}", shape_str(seed.shape()),
                                 shape_str(root.shape())));
  if (!root.requires_grad())
    throw AutogradError("backward: the root does not require grad (no input of it requires grad, or it was "
                        "computed under NoGradGuard)");
  NoGradGuard no_grad;  // gradients themselves are not recorded
  detail::ProfilePhase phase("backward");
  AutocastGuard no_autocast(false);  // backward keeps the dtypes the forward chose
  auto& tape = autograd::this_thread_tape();
  std::unordered_map<GradId, std::size_t> producer;
  producer.reserve(tape.size());
  for (std::size_t i = 0; i < tape.size(); ++i) producer[tape[i].output] = i;
  // A recorded root whose entry is gone would silently give no gradients.
  const std::thread::id recorded_on = root.impl().recorded_on;
  if (recorded_on != std::thread::id{} && !producer.count(root.grad_id())) {
    if (recorded_on != std::this_thread::get_id())
      throw AutogradError("backward: the root's graph was recorded on another thread; each thread records on its "
                          "own tape, so run a graph's forward and backward on one thread");
    throw AutogradError("backward: the root's graph was already freed by an earlier backward; pass "
                        "{.retain_graph = true} to the first one to run backward twice");
  }

  // The subgraph reachable from the root, and how many consumers each tensor has in it.
  std::vector<char> reachable(tape.size(), 0);
  std::unordered_map<GradId, int> pending;
  std::vector<std::size_t> stack;
  if (auto it = producer.find(root.grad_id()); it != producer.end()) {
    reachable[it->second] = 1;
    stack.push_back(it->second);
  }
  while (!stack.empty()) {
    const Node& node = tape[stack.back()];
    stack.pop_back();
    if (!node.backward)
      throw AutogradError(fmt::format("backward: the graph through {} was already freed by an earlier backward; "
                                      "pass retain_graph to run backward twice",
                                      node.name));
    for (std::size_t j = 0; j < node.inputs.size(); ++j) {
      if (!node.input_needs_grad[j]) continue;
      auto it = producer.find(node.inputs[j]);
      if (it == producer.end()) continue;
      ++pending[node.inputs[j]];
      if (!reachable[it->second]) {
        reachable[it->second] = 1;
        stack.push_back(it->second);
      }
    }
  }

  // Kahn's algorithm: an entry runs once every consumer of its output is done.
  std::unordered_map<GradId, Tensor> grads;
  std::unordered_set<GradId> owned;  // gradients in buffers the engine made: nothing else holds them
  grads[root.grad_id()] = seed.to(root.dtype());
  std::vector<std::size_t> ready;
  if (auto it = producer.find(root.grad_id()); it != producer.end()) ready.push_back(it->second);
  while (!ready.empty()) {
    Node& node = tape[ready.back()];
    ready.pop_back();
    auto git = grads.find(node.output);
    Tensor grad_out = git != grads.end() ? std::move(git->second) : Tensor();
    if (git != grads.end()) grads.erase(git);  // freed as soon as its consumers are done

    owned.erase(node.output);
    const bool added = grad_out.defined() && add_into_part(grads, owned, node, grad_out);

    std::vector<Tensor> input_grads;
    if (grad_out.defined() && !added) {
      try {
        input_grads = node.backward(grad_out);
      } catch (const autograd::VersionError& e) {
        throw AutogradError(fmt::format("backward of {}: {}", node.name, e.what()));
      }
      if (input_grads.size() != node.inputs.size())
        throw AutogradError(fmt::format("backward of {}: returned {} gradients for {} inputs", node.name,
                                        input_grads.size(), node.inputs.size()));
    }
    if (!options.retain_graph) {  // releases saved tensors now
      node.backward = nullptr;
      node.embed = nullptr;
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
        if (!fresh) slot->second = sum_of(slot->second, g);
        // Made here, or by a part-view's backward (a fresh zero-filled tensor): nothing else holds it.
        if (!fresh || node.embed) owned.insert(id);
      }
      auto pit = producer.find(id);
      if (pit != producer.end() && --pending[id] == 0) ready.push_back(pit->second);
    }
  }

  GradientStore store;
  for (auto& [id, g] : grads)
    if (!producer.count(id)) store.insert(id, std::move(g));

  if (!options.retain_graph) {
    std::size_t w = 0;
    for (std::size_t i = 0; i < tape.size(); ++i)
      if (!reachable[i]) tape[w++] = std::move(tape[i]);
    tape.resize(w);
  }
  return store;
}

}  // namespace rumus
