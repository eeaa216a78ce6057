#include "rumus/optim/grad_scaler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <memory>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/optimizer_step.hpp"
#include "rumus/ops/pointwise_math.hpp"

namespace rumus::optim {

namespace {
// The growth tracker counts in f32 on the device: exact to 2^24.
constexpr std::int64_t kMaxGrowthInterval = std::int64_t(1) << 24;

// Writes `values` into the f32 tensors `ts` once: at the first replay of the
// capture that made them (a fill would run at every replay), or at the first
// use outside it, whichever comes first.
struct PendingValues {
  std::vector<Tensor> ts;
  std::vector<float> values;
  bool done = false;
  void write() {
    if (done) return;
    for (std::size_t i = 0; i < ts.size(); ++i)
      device_backend(ts[i].device()).write(ts[i].storage(), ts[i].offset() * sizeof(float), &values[i], sizeof(float));
    done = true;
  }
};
}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), initial_scale_(options.init_scale) {
  const auto& o = options_;
  if (!(o.init_scale > 0) || !std::isfinite(o.init_scale))
    throw ValueError(fmt::format("GradScaler: expected a finite init_scale > 0, got {}", o.init_scale));
  if (!(o.growth_factor > 1) || !std::isfinite(o.growth_factor))
    throw ValueError(fmt::format("GradScaler: expected a finite growth_factor > 1, got {}", o.growth_factor));
  if (!(o.backoff_factor > 0 && o.backoff_factor < 1))
    throw ValueError(fmt::format("GradScaler: expected 0 < backoff_factor < 1, got {}", o.backoff_factor));
  if (o.growth_interval < 1 || o.growth_interval > kMaxGrowthInterval)
    throw ValueError(fmt::format("GradScaler: expected growth_interval >= 1 and <= 2^24 (an f32 count on the "
                                 "device), got {}",
                                 o.growth_interval));
}

void GradScaler::ensure_state(Device device, const char* op) {
  settle();
  if (scale_t_.defined()) {
    if (options_.device_side && scale_t_.device() != device)
      throw DeviceError(fmt::format("{}: the scale lives on {} but a tensor is on {} (device_side keeps every "
                                    "gradient on the scaler's device)",
                                    op, scale_t_.device().str(), device.str()));
    return;
  }
  NoGradGuard no_grad;
  if (!is_capturing()) {
    scale_t_ = full({1}, initial_scale_, {.dtype = DType::f32, .device = device});
    tracker_t_ = full({1}, double(initial_tracker_), {.dtype = DType::f32, .device = device});
    return;
  }
  scale_t_ = empty({1}, {.dtype = DType::f32, .device = device});
  tracker_t_ = empty({1}, {.dtype = DType::f32, .device = device});
  auto pending = std::make_shared<PendingValues>(
      PendingValues{{scale_t_, tracker_t_}, {float(initial_scale_), float(initial_tracker_)}});
  on_replay([pending] { pending->write(); });
  settle_ = [pending] { pending->write(); };
}

void GradScaler::settle() const {
  if (!settle_ || is_capturing()) return;
  settle_();
  settle_ = nullptr;
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  if (!loss.defined() || !is_floating(loss.dtype()))
    throw DTypeError(fmt::format("GradScaler.scale: expected a floating loss, got {}",
                                 loss.defined() ? std::string(dtype_name(loss.dtype())) : "an undefined tensor"));
  ensure_state(loss.device(), "GradScaler.scale");
  // In f32 at least: 65536 times an f16 loss overflows it.
  const Tensor l = is_16bit_float(loss.dtype()) ? loss.to(DType::f32) : loss;
  Tensor s = scale_t_.reshape({});
  if (s.device() != l.device()) s = s.to(l.device());
  return mul(l, l.dtype() == DType::f32 ? s : s.to(l.dtype()));
}

void GradScaler::unscale_grads(GradientStore& grads, const std::vector<const Tensor*>* params, const char* op,
                               Record& r) {
  NoGradGuard no_grad;
  std::vector<Tensor*> targets;
  if (params) {
    for (const Tensor* p : *params)
      if (Tensor* g = grads.find(p->grad_id())) targets.push_back(g);
  } else {
    for (auto& [id, g] : grads.map()) targets.push_back(&g);
  }
  // One flag per device, with the device's gradients unscaled into it
  // together; the scaler's device's flag is the record's.
  struct PerDevice {
    Tensor flag, inv_scale;
    std::vector<Tensor*> grads;
  };
  std::vector<PerDevice> flags;
  for (Tensor* g : targets) {
    if (!g->defined() || g->numel() == 0) continue;
    if (is_16bit_float(g->dtype()))
      throw DTypeError(fmt::format("{}: a gradient is {}; keep the parameters in f32 (autocast casts them per op) so "
                                   "that unscaled gradients keep their range",
                                   op, dtype_name(g->dtype())));
    if (!is_floating(g->dtype())) continue;
    ensure_state(g->device(), op);
    if (flags.empty()) flags.push_back({zeros({1}, {.device = scale_t_.device()}), reciprocal(scale_t_), {}});
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.flag.device() == g->device(); });
    if (it == flags.end())  // not device_side (ensure_state refused it): a copy of the factor
      it = flags.insert(flags.end(), {zeros({1}, {.device = g->device()}), flags.front().inv_scale.to(g->device()), {}});
    it->grads.push_back(g);
  }
  for (PerDevice& d : flags) {
    std::vector<Tensor> in;
    for (Tensor* g : d.grads) in.push_back(*g);
    std::vector<Tensor> out = amp_unscale_foreach(in, d.flag, d.inv_scale);
    for (std::size_t i = 0; i < out.size(); ++i) *d.grads[i] = std::move(out[i]);
  }
  if (flags.empty()) {
    r.flag = scale_t_.defined() ? zeros({1}, {.device = scale_t_.device()}) : Tensor();
    r.found_inf = options_.device_side ? false : found_inf_anywhere(false);
    return;
  }
  r.flag = flags.front().flag;
  if (options_.device_side) return;
  bool found = false;
  for (const auto& f : flags) found = found || f.flag.item() != 0.0;
  r.found_inf = found_inf_anywhere(found);
  if (r.found_inf && !found) r.flag.fill_(1.0);  // another rank's
}

Tensor GradScaler::found_inf(const Optimizer& optimizer) const {
  auto it = records_.find(&optimizer);
  return it == records_.end() ? Tensor() : it->second.flag;
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
  unscale_grads(grads, &params, "GradScaler.unscale_", r);
  r.stage = Stage::unscaled;
}

void GradScaler::unscale_(GradientStore& grads) {
  if (!options_.enabled) return;
  Record& r = records_[&grads];
  if (r.stage != Stage::ready)
    throw Error("GradScaler.unscale_: already called for this gradient store since the last update()");
  unscale_grads(grads, nullptr, "GradScaler.unscale_", r);
  r.stage = Stage::unscaled;
}

bool GradScaler::step(Optimizer& optimizer, GradientStore& grads) {
  if (!options_.enabled) {
    optimizer.step(grads);
    return true;
  }
  Record& r = records_[&optimizer];
  if (r.stage == Stage::stepped) throw Error("GradScaler.step: already called for this optimizer since the last update()");
  auto by_store = records_.find(&grads);
  if (r.stage != Stage::unscaled) {
    if (by_store != records_.end() && by_store->second.stage == Stage::unscaled) {
      r.found_inf = by_store->second.found_inf;  // unscaled through unscale_(grads)
      r.flag = by_store->second.flag;
    } else {
      unscale_(optimizer, grads);
    }
  }
  r.stage = Stage::stepped;
  if (options_.device_side) {
    if (r.flag.defined()) optimizer.step(grads, r.flag);
    else optimizer.step(grads);  // no gradient of this optimizer: nothing to skip
    return true;
  }
  if (r.found_inf) return false;
  optimizer.step(grads);
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (records_.empty())
    throw Error("GradScaler.update: no gradients were unscaled or stepped since the last update()");
  if (!scale_t_.defined()) {  // no loss or gradients seen yet: a clean step, counted on the host
    records_.clear();
    if (++initial_tracker_ == options_.growth_interval) {
      initial_scale_ = std::min(initial_scale_ * options_.growth_factor, double(std::numeric_limits<float>::max()));
      initial_tracker_ = 0;
    }
    return;
  }
  NoGradGuard no_grad;
  const Device dev = scale_t_.device();
  // Whether any optimizer's gradients had an inf or NaN, as a device flag.
  Tensor inf;
  if (options_.device_side) {
    for (const auto& [key, r] : records_)
      if (r.flag.defined()) inf = inf.defined() ? maximum(inf, r.flag) : r.flag;
    if (!inf.defined()) inf = zeros({1}, {.device = dev});
  } else {
    bool found = false;
    for (const auto& [key, r] : records_) found = found || r.found_inf;
    inf = full({1}, found ? 1.0 : 0.0, {.device = dev});
  }
  records_.clear();
  // PyTorch's _amp_update_scale_, with growth saturating at the largest
  // finite f32: the scale multiplies f32 losses, and 2^128 would be inf and
  // turn every scaled loss into inf/NaN.
  amp_update_scale_(scale_t_, tracker_t_, inf, options_.growth_factor, options_.backoff_factor,
                    options_.growth_interval);
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  if (!(new_scale > 0) || !std::isfinite(new_scale))
    throw ValueError(fmt::format("GradScaler.update: expected a finite new scale > 0, got {}", new_scale));
  settle();
  if (scale_t_.defined()) {
    NoGradGuard no_grad;
    scale_t_.fill_(new_scale);
  } else {
    initial_scale_ = new_scale;
  }
  records_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  settle();
  return scale_t_.defined() ? scale_t_.item() : initial_scale_;
}

std::int64_t GradScaler::growth_tracker() const {
  settle();
  return tracker_t_.defined() ? std::int64_t(tracker_t_.item()) : initial_tracker_;
}

StateDict GradScaler::state_dict() const {
  return {{"scale", full({}, get_scale(), {.dtype = DType::f64})},
          {"growth_tracker", full({}, double(growth_tracker()), {.dtype = DType::f64})}};
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
  settle();
  if (scale_t_.defined()) {
    NoGradGuard no_grad;
    scale_t_.fill_(s);
    tracker_t_.fill_(t);
  } else {
    initial_scale_ = s;
    initial_tracker_ = std::int64_t(t);
  }
  records_.clear();
}

}  // namespace rumus::optim
