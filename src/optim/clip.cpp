#include "rumus/optim/clip.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus::optim {

double clip_grad_norm_(GradientStore& grads, const std::vector<Tensor>& params, double max_norm, double p) {
  if (!(max_norm >= 0)) throw Error(fmt::format("clip_grad_norm_: expected max_norm >= 0, got {}", max_norm));
  if (!(p >= 1)) throw Error(fmt::format("clip_grad_norm_: expected norm_type >= 1 or infinity, got {}", p));
  NoGradGuard no_grad;
  const bool inf = std::isinf(p);
  double total = 0;
  for (const Tensor& t : params) {
    Tensor g = grads.get(t);
    if (!g.defined() || g.numel() == 0) continue;
    if (inf)
      total = std::max(total, max(abs(g)).item());
    else
      total += sum(pow(abs(g.to(DType::f64)), p)).item();
  }
  if (!inf) total = std::pow(total, 1.0 / p);
  double scale = max_norm / (total + 1e-6);
  if (scale < 1.0)
    for (const Tensor& t : params)
      if (Tensor* g = grads.find(t.grad_id())) *g = mul(*g, scale);
  return total;
}

void clip_grad_value_(GradientStore& grads, const std::vector<Tensor>& params, double clip_value) {
  if (!(clip_value >= 0)) throw Error(fmt::format("clip_grad_value_: expected clip_value >= 0, got {}", clip_value));
  NoGradGuard no_grad;
  for (const Tensor& t : params)
    if (Tensor* g = grads.find(t.grad_id())) *g = clamp(*g, -clip_value, clip_value);
}

}  // namespace rumus::optim
