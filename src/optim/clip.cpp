#include "rumus/optim/clip.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus::optim {

namespace {
// One running partial norm per (device, dtype) of the gradients; it stays on
// that device until the single read at the end.
struct Partial {
  Device device;
  DType dtype;
  Tensor value;  // sum of |g|^p, or max of |g| for p = inf
};
}  // namespace

void check_clip_arguments(const char* op, double max_norm, double p) {
  if (!(max_norm >= 0)) throw Error(fmt::format("{}: expected max_norm >= 0, got {}", op, max_norm));
  if (!(p >= 1)) throw Error(fmt::format("{}: expected norm_type >= 1 or infinity, got {}", op, p));
}

double grad_norm_term(const GradientStore& grads, const std::vector<Tensor>& params, double p, const char* op) {
  check_clip_arguments(op, 0.0, p);
  NoGradGuard no_grad;
  const bool inf = std::isinf(p);
  std::vector<Partial> partials;
  for (const Tensor& t : params) {
    Tensor g = grads.get(t);
    if (!g.defined() || g.numel() == 0) continue;
    // Half-precision |g|^p overflows early (65504 for f16): accumulate those in f32.
    if (is_16bit_float(g.dtype())) g = g.to(DType::f32);
    Tensor part = inf ? max(abs(g)) : p == 2 ? sum(square(g)) : p == 1 ? sum(abs(g)) : sum(pow(abs(g), p));
    auto it = std::find_if(partials.begin(), partials.end(),
                           [&](const Partial& s) { return s.device == g.device() && s.dtype == g.dtype(); });
    if (it == partials.end())
      partials.push_back({g.device(), g.dtype(), part});
    else
      it->value = inf ? maximum(it->value, part) : add(it->value, part);
  }
  // One host read per device and dtype (one in the usual case), combined in double.
  double term = 0;
  for (const Partial& s : partials) term = inf ? std::max(term, s.value.item()) : term + s.value.item();
  return term;
}

double norm_from_term(double term, double p) { return std::isinf(p) ? term : std::pow(term, 1.0 / p); }

void scale_grads_to_norm(GradientStore& grads, const std::vector<Tensor>& params, double total, double max_norm) {
  NoGradGuard no_grad;
  const double scale = max_norm / (total + 1e-6);
  if (scale < 1.0)
    for (const Tensor& t : params)
      if (Tensor* g = grads.find(t.grad_id())) *g = mul(*g, scale);
}

double clip_grad_norm_(GradientStore& grads, const std::vector<Tensor>& params, double max_norm, double p) {
  check_clip_arguments("clip_grad_norm_", max_norm, p);
  const double total = norm_from_term(grad_norm_term(grads, params, p, "clip_grad_norm_"), p);
  scale_grads_to_norm(grads, params, total, max_norm);
  return total;
}

void clip_grad_value_(GradientStore& grads, const std::vector<Tensor>& params, double clip_value) {
  if (!(clip_value >= 0)) throw Error(fmt::format("clip_grad_value_: expected clip_value >= 0, got {}", clip_value));
  NoGradGuard no_grad;
  for (const Tensor& t : params)
    if (Tensor* g = grads.find(t.grad_id())) *g = clamp(*g, -clip_value, clip_value);
}

}  // namespace rumus::optim
