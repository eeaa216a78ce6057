#pragma once
#include <optional>
#include <unordered_map>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Gradients of the leaves of one backward pass, looked up by tensor.
class GradientStore {
 public:
  // Undefined tensor when `t` received no gradient.
  Tensor get(const Tensor& t) const;
  // Throws AutogradError when `t` received no gradient.
  Tensor at(const Tensor& t) const;
  bool contains(const Tensor& t) const { return grads_.count(t.grad_id()) != 0; }
  std::size_t size() const { return grads_.size(); }
  void insert(GradId id, Tensor grad) { grads_[id] = std::move(grad); }
  Tensor* find(GradId id);
  std::unordered_map<GradId, Tensor>& map() { return grads_; }
  // Adds every gradient of `other` into this store (a tensor new to it is
  // taken as it is): gradient accumulation over micro-batches is
  // `total += backward(loss)`. Not recorded, as PyTorch's .grad accumulation.
  GradientStore& operator+=(const GradientStore& other);

 private:
  std::unordered_map<GradId, Tensor> grads_;
};

struct BackwardOptions {
  bool retain_graph = false;  // keep the entries on the tape for another pass
};

// Runs Kahn's algorithm over the part of this thread's tape reachable from
// `root`. `root` must hold one element; otherwise pass a seed gradient.
GradientStore backward(const Tensor& root, BackwardOptions options = {});
GradientStore backward(const Tensor& root, const Tensor& seed, BackwardOptions options = {});

namespace autograd {

struct GradOptions {
  // One seed per output; an undefined one (or none at all) is ones, for a
  // 1-element output.
  std::vector<Tensor> grad_outputs;
  // Keep the graph for another pass; unset: as create_graph, as PyTorch.
  std::optional<bool> retain_graph;
  // Record the backward pass itself, so its results can be differentiated
  // again (to any order). An op whose backward cannot be is an AutogradError.
  bool create_graph = false;
  // An input the outputs do not depend on gets an undefined tensor instead
  // of an AutogradError.
  bool allow_unused = false;
};

// torch::autograd::grad: the gradients of sum(outputs[i] * grad_outputs[i])
// with respect to each input, leaves and intermediate tensors alike.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const GradOptions& options = {});

}  // namespace autograd

}  // namespace rumus

RUMUS_API_END
