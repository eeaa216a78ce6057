#include "rumus/optim/grad_scaler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/optimizer_step.hpp"

namespace rumus::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  const auto& o = options_;
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale))
    throw ValueError(fmt::format("GradScaler: expected a finite init_scale > 0, got {}", o.init_scale));
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    throw ValueError(fmt::format("GradScaler: expected a finite growth_factor > 1, got {}", o.growth_factor));
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    throw ValueError(fmt::format("GradScaler: expected 0 < backoff_factor < 1, got {}", o.backoff_factor));
  if (o.growth_interval < 1)
    throw ValueError(fmt::format("GradScaler: expected growth_interval >= 1, got {}", o.growth_interval));
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  if (!loss.defined() || !is_floating(loss.dtype()))
    throw DTypeError(fmt::format("GradScaler.scale: expected a floating loss, got {}",
                                 loss.defined() ? std::string(dtype_name(loss.dtype())) : "an undefined tensor"));
  // In f32 at least: 65536 times an f16 loss overflows it.
  const Tensor l = loss.dtype() == DType::f16 || loss.dtype() == DType::bf16 ? loss.to(DType::f32) : loss;
  return mul(l, scale_);
}

bool GradScaler::unscale_grads(GradientStore& grads, const std::vector<const Tensor*>* params, const char* op) {
  NoGradGuard no_grad;
  std::vector<Tensor*> targets;
  if (params) {
    for (const Tensor* p : *params)
      if (Tensor* g = grads.find(p->grad_id())) targets.push_back(g);
  } else {
    for (auto& [id, g] : grads.map()) targets.push_back(&g);
  }
  // One flag per device, gathered on the device and read once at the end.
  std::vector<Tensor> flags;
  const double inv = 1.0 / scale_;  // a power of two by default: exact
  for (Tensor* g : targets) {
    if (!g->defined() || g->numel() == 0) continue;
    if (g->dtype() == DType::f16 || g->dtype() == DType::bf16)
      throw DTypeError(fmt::format("{}: a gradient is {}; keep the parameters in f32 (autocast casts them per op) so "
                                   "that unscaled gradients keep their range",
                                   op, dtype_name(g->dtype())));
    if (!is_floating(g->dtype())) continue;
    auto it = std::find_if(flags.begin(), flags.end(), [&](const Tensor& f) { return f.device() == g->device(); });
    if (it == flags.end()) it = flags.insert(flags.end(), zeros({1}, {.device = g->device()}));
    *g = amp_unscale(*g, *it, inv);
  }
  bool found = false;
  for (const Tensor& f : flags) found = found || f.item() != 0.0;
  return found_inf_anywhere(found);
}

void GradScaler::unscale_(Optimizer& optimizer, GradientStore& grads) {
  if (!options_.enabled) return;
  Record& r = records_[&optimizer];
  if (r.stage == Stage::unscaled)
    throw Error("GradScaler.unscale_: already called for this optimizer since the last update()");
  if (r.stage == Stage::stepped) throw Error("GradScaler.unscale_: called after step(); call update() first");
  std::vector<const Tensor*> params;
  for (const auto& group : optimizer.param_groups())
    for (const Tensor& p : group.params) params.push_back(&p);
  r.found_inf = unscale_grads(grads, &params, "GradScaler.unscale_");
  r.stage = Stage::unscaled;
}

void GradScaler::unscale_(GradientStore& grads) {
  if (!options_.enabled) return;
  Record& r = records_[&grads];
  if (r.stage != Stage::ready)
    throw Error("GradScaler.unscale_: already called for this gradient store since the last update()");
  r.found_inf = unscale_grads(grads, nullptr, "GradScaler.unscale_");
  r.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& optimizer, GradientStore& grads) {
  if (!options_.enabled) {
    optimizer.step(grads);
    return true;
  }
  Record& r = records_[&optimizer];
  if (r.stage == Stage::stepped) throw Error("GradScaler.step: already called for this optimizer since the last update()");
  bool found_inf;
  auto by_store = records_.find(&grads);
  if (r.stage == Stage::unscaled) {
    found_inf = r.found_inf;
  } else if (by_store != records_.end() && by_store->second.stage == Stage::unscaled) {
    found_inf = by_store->second.found_inf;  // unscaled through unscale_(grads)
    r.found_inf = found_inf;
  } else {
    unscale_(optimizer, grads);
    found_inf = r.found_inf;
  }
  r.stage = Stage::stepped;
  if (found_inf) return false;
  optimizer.step(grads);
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (records_.empty())
    throw Error("GradScaler.update: no gradients were unscaled or stepped since the last update()");
  bool found_inf = false;
  for (const auto& [key, r] : records_) found_inf = found_inf || r.found_inf;
  records_.clear();
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // The scale multiplies f32 losses: growth saturates at the largest finite
    // f32, where 2^128 would be inf and turn every scaled loss into inf/NaN.
    constexpr double max_scale = std::numeric_limits<float>::max();
    if (scale_ < max_scale) scale_ = std::min(scale_ * options_.growth_factor, max_scale);
    growth_tracker_ = 0;
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  if (!(new_scale > 0) || !std::isfinite(new_scale))
    throw ValueError(fmt::format("GradScaler.update: expected a finite new scale > 0, got {}", new_scale));
  scale_ = new_scale;
  records_.clear();
}

StateDict GradScaler::state_dict() const {
  return {{"scale", full({}, scale_, {.dtype = DType::f64})},
          {"growth_tracker", full({}, double(growth_tracker_), {.dtype = DType::f64})}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  for (const char* key : {"scale", "growth_tracker"})
    if (!state.count(key) || state.at(key).numel() != 1)
      throw ValueError(fmt::format("GradScaler.load_state_dict: expected a one-element \"{}\" entry", key));
  const double s = state.at("scale").item(), t = state.at("growth_tracker").item();
  if (!(s > 0) || !std::isfinite(s))
    throw ValueError(fmt::format("GradScaler.load_state_dict: expected a finite scale > 0, got {}", s));
  if (!(t >= 0) || t != std::floor(t))
    throw ValueError(fmt::format("GradScaler.load_state_dict: expected a growth_tracker count >= 0, got {}", t));
  scale_ = s;
  growth_tracker_ = std::int64_t(t);
  records_.clear();
}

}  // namespace rumus::optim
