#pragma once
// What a user can attach to the backward pass: gradient hooks, retained
// gradients of intermediate tensors, and anomaly detection.
#include <cstdint>
#include <functional>
#include <vector>

#include "rumus/core/export.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus::autograd {

// Called with a tensor's gradient once every contribution to it in a pass
// has been summed (the "gradient ready" event), before it flows on to the
// tensor's inputs (an intermediate) or into the GradientStore (a leaf). It
// may return a replacement of the same shape; an undefined tensor keeps the
// gradient. Hooks run in registration order, in every backward() and
// autograd::grad() that reaches the tensor, on the thread running backward.
using GradHook = std::function<Tensor(const Tensor& grad)>;

// torch's Tensor::register_hook; keep the handle to remove the hook.
class HookHandle {
 public:
  HookHandle() = default;
  void remove();  // idempotent
  bool active() const;

 private:
  friend HookHandle register_hook(const Tensor& t, GradHook hook);
  explicit HookHandle(std::uint64_t id) : id_(id) {}
  std::uint64_t id_ = 0;
};

HookHandle register_hook(const Tensor& t, GradHook hook);

// torch's Tensor::retain_grad: the gradient of this intermediate tensor is
// kept in the GradientStore of every backward that reaches it (leaves' always are).
void retain_grad(const Tensor& t);

// torch::autograd::DetectAnomalyGuard: while one lives on this thread (they
// nest), every gradient an op's backward returns is checked, and the first
// NaN or infinity is an AutogradError naming that op and its forward's
// position on the tape. Off by default; it reads each gradient back to the
// host, so it is for finding a problem, not for training.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;
};
bool anomaly_mode_enabled();

// For the engine: the gradient after `id`'s hooks (the same tensor when none),
// whether `id`'s gradient is retained, and whether a gradient has a NaN or an
// infinity (read on the host).
bool has_hooks_or_retained();
Tensor run_hooks(GradId id, Tensor grad);
bool is_retained(GradId id);
bool has_non_finite(const Tensor& grad);

// For activation checkpointing: while one lives on this thread, run_hooks
// passes the gradients of `ids` through untouched. A checkpoint's inner
// backward reaches the parameters its function reads; their hooks belong to
// the outer pass, which hands them the summed gradient once (as PyTorch).
class HooksDeferredGuard {
 public:
  explicit HooksDeferredGuard(std::vector<GradId> ids);
  ~HooksDeferredGuard();
  HooksDeferredGuard(const HooksDeferredGuard&) = delete;
  HooksDeferredGuard& operator=(const HooksDeferredGuard&) = delete;

 private:
  std::size_t restore_size_;
};

}  // namespace rumus::autograd

RUMUS_API_END
