#include "rumus/optim/optimizer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/profiler.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/core/error.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"

namespace rumus::optim {

double Optimizer::Group::option(const std::string& name) const {
  auto it = options.find(name);
  if (it == options.end()) throw Error(fmt::format("Optimizer: the parameter group has no option '{}'", name));
  return it->second;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name,
                     std::map<std::string, double> defaults) {
  if (groups.empty()) throw Error(fmt::format("{}: expected at least one parameter group", name));
  // As torch.optim's "optimizer got an empty parameter list" (an empty group
  // beside non-empty ones is accepted, as in PyTorch).
  std::size_t count = 0;
  for (const ParamGroup& pg : groups) count += pg.params.size();
  if (count == 0)
    throw ValueError(fmt::format("{}: optimizer got an empty parameter list: expected at least one parameter, got 0 "
                                 "in {} parameter group{}",
                                 name, groups.size(), groups.size() == 1 ? "" : "s"));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& pg = groups[g];
    double glr = pg.lr.value_or(lr), gwd = pg.weight_decay.value_or(weight_decay);
    if (!(glr >= 0)) throw Error(fmt::format("{}: expected lr >= 0 in group {}, got {}", name, g, glr));
    if (!(gwd >= 0)) throw Error(fmt::format("{}: expected weight_decay >= 0 in group {}, got {}", name, g, gwd));
    for (std::size_t i = 0; i < pg.params.size(); ++i) {
      const Tensor& p = pg.params[i];
      if (!p.defined() || !is_floating(p.dtype()))
        throw Error(fmt::format("{}: parameter {} of group {} is undefined or not floating point", name, i, g));
    }
    std::map<std::string, double> options = defaults;
    for (auto& [key, value] : pg.options) {
      if (!defaults.contains(key)) {
        std::vector<std::string> known{"lr", "weight_decay"};
        for (auto& [k, v] : defaults) known.push_back(k);
        throw ValueError(fmt::format("{}: group {} sets the option '{}', which this optimizer does not have (expected "
                                     "one of: {})",
                                     name, g, key, fmt::join(known, ", ")));
      }
      options[key] = value;
    }
    groups_.push_back({std::move(pg.params), glr, gwd, glr, std::move(options)});
    state_.emplace_back(groups_.back().params.size());
  }
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

void Optimizer::write_scalars(ParamState& state, const std::array<float, 4>& values) {
  if (state.scalars_valid && state.scalars_written == values) return;  // one upload per change, not per replay
  device_backend(state.scalars.device())
      .write(state.scalars.storage(), state.scalars.offset() * sizeof(float), values.data(), sizeof values);
  state.scalars_written = values;
  state.scalars_valid = true;
}

Tensor Optimizer::captured_scalars(const ParamState& state) {
  if (state.device_scalars.defined()) return state.device_scalars;
  return is_capturing() ? state.scalars : Tensor();
}

Tensor Optimizer::advance_device_scalars(const Tensor&, const Group&) const {
  throw Error(fmt::format("{}.step: this optimizer has no update computed on the device", type_name()));
}

std::int64_t Optimizer::host_step(const ParamState& state) {
  if (!state.device_step || state.device_step->pending) return state.step;
  return std::int64_t(state.device_step->values.narrow(0, 0, 1).item());
}

namespace {
void write_values(Tensor& t, const std::array<float, 4>& values) {
  device_backend(t.device()).write(t.storage(), t.offset() * sizeof(float), values.data(), sizeof values);
}
}  // namespace

std::array<float, 4> Optimizer::device_step_values(const ParamState& state, const Group& group) const {
  std::array<float, 4> v = *step_scalars(state, group);
  v[0] = float(state.step);
  return v;
}

void Optimizer::check_baked_options(const std::vector<std::pair<double, std::map<std::string, double>>>& baked,
                                    const std::map<std::string, std::int64_t>& replayed) const {
  for (std::size_t g = 0; g < baked.size() && g < groups_.size(); ++g) {
    auto refuse = [&](const std::string& name, double then, double now) {
      throw CaptureError(fmt::format("CapturedStep::replay: {} group {}'s {} changed from {} to {} since the capture, "
                                     "and a captured step replays the value it was captured with (only the lr, and SGD's "
                                     "momentum between non-zero values, follow a schedule): capture the step again, or "
                                     "keep it fixed (OneCycleLR and CyclicLR: .cycle_momentum = false)",
                                     type_name(), g, name, then, now));
    };
    if (groups_[g].weight_decay != baked[g].first) refuse("weight_decay", baked[g].first, groups_[g].weight_decay);
    for (const auto& [name, then] : baked[g].second) {
      const auto it = groups_[g].options.find(name);
      if (it == groups_[g].options.end() || it->second == then) continue;
      if (!replayed.contains(name) || (it->second == 0) != (then == 0)) refuse(name, then, it->second);
    }
  }
}

void Optimizer::step(const GradientStore& grads) { run_step(grads, nullptr); }

void Optimizer::step(const GradientStore& grads, const Tensor& found_inf) {
  if (!found_inf.defined()) return run_step(grads, nullptr);
  if (found_inf.dtype() != DType::f32 || found_inf.numel() != 1)
    throw ShapeError(fmt::format("{}.step: expected found_inf to be a one-element f32 tensor, got {} {}", type_name(),
                                 dtype_name(found_inf.dtype()), shape_str(found_inf.shape())));
  bool on_device = true;
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i)
      if (grads.get(groups_[g].params[i]).defined() && !step_scalars(state_[g][i], groups_[g])) on_device = false;
  if (on_device) return run_step(grads, &found_inf);
  // No update that reads the flag: read it here, as PyTorch's GradScaler does for such optimizers.
  if (is_capturing())
    throw CaptureError(fmt::format("{}.step: this optimizer cannot skip a step on the device (only the fused SGD, "
                                   "Adam and AdamW updates can), and reading found_inf is a host read",
                                   type_name()));
  if (found_inf.item() == 0) run_step(grads, nullptr);
}

void Optimizer::run_step(const GradientStore& grads, const Tensor* found_inf) {
  NoGradGuard no_grad;
  detail::ProfilePhase phase("step");
  const bool capturing = is_capturing();
  // Each replay advances the step count once and uploads one set of scalars:
  // a second step in the same capture would replay with the first one's.
  if (!first_in_capture(this))
    throw CaptureError(fmt::format("{}.step: a second step inside one capture (each replay is one step: capture one "
                                   "step and replay it as often as needed)",
                                   type_name()));
  std::vector<std::pair<std::size_t, std::size_t>> stepped;  // (group, index), when capturing
  const Tensor skip = found_inf ? found_inf->detach().reshape({1}) : Tensor();
  struct OnDevice {
    std::size_t g, i;
    Tensor grad;
  };
  std::vector<OnDevice> on_device;  // updates skipped on the device where `skip` is set
  // A later parameter that fails the step leaves the queued updates applied,
  // as they would have been one by one (their step counts have moved).
  struct FinishQueued {
    Optimizer& o;
    ~FinishQueued() {
      try {
        o.finish_updates();  // nothing left on success
      } catch (...) {
      }
    }
  } finish_queued{*this};
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Group& group = groups_[g];
    for (std::size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor grad = grads.get(p);
      if (!grad.defined()) continue;
      if (grad.shape() != p.shape())
        throw ShapeError(fmt::format("{}.step: gradient of shape {} for a parameter of shape {}", type_name(),
                                     shape_str(grad.shape()), shape_str(p.shape())));
      ParamState& state = state_[g][i];
      if (capturing) {
        if (!step_scalars(state, group))
          throw CaptureError(fmt::format("{}.step: this optimizer cannot be captured (its update would freeze the "
                                         "learning rate and step); use SGD, Adam or AdamW",
                                         type_name()));
        // Written before each replay (an upload now would replay the same bytes).
        if (!state.scalars.defined()) state.scalars = empty({4}, {.dtype = DType::f32, .device = p.device()});
      }
      if (!skip.defined() && state.device_step) {
        // Back from steps counted on the device: the count returns to the host.
        if (capturing)
          throw CaptureError(fmt::format("{}.step: a step without found_inf after steps that skipped on the device "
                                         "(the step count is on the device; capture the same kind of step)",
                                         type_name()));
        state.step = host_step(state);
        state.device_step.reset();
      }
      if (skip.defined()) {
        if (skip.device() != p.device())
          throw DeviceError(fmt::format("{}.step: found_inf is on {} but a parameter is on {}", type_name(),
                                        skip.device().str(), p.device().str()));
        on_device.push_back({g, i, grad});
        continue;
      }
      update(p, grad, state, group);
      if (capturing) stepped.emplace_back(g, i);
      else ++state.step;
    }
  }
  if (on_device.empty()) finish_updates();
  if (!on_device.empty()) {
    // The device counts: written first where a capture made them and has not
    // replayed yet; one new count per group for the parameters that have
    // none, and a copy for those that share theirs with a parameter that
    // has no gradient this step (its count must stay).
    std::map<const DeviceCount*, std::size_t> users, here;
    for (const auto& states : state_)
      for (const ParamState& st : states)
        if (st.device_step) ++users[st.device_step.get()];
    for (const OnDevice& u : on_device)
      if (const auto& dc = state_[u.g][u.i].device_step) ++here[dc.get()];
    std::map<std::pair<std::size_t, std::array<float, 4>>, std::shared_ptr<DeviceCount>> fresh;
    std::map<const DeviceCount*, std::shared_ptr<DeviceCount>> copies;
    for (const OnDevice& u : on_device) {
      ParamState& st = state_[u.g][u.i];
      const Device dev = groups_[u.g].params[u.i].device();
      if (st.device_step && st.device_step->pending && !capturing) {
        write_values(st.device_step->values, device_step_values(st, groups_[u.g]));
        st.device_step->pending = false;
      }
      if (!st.device_step) {
        const std::array<float, 4> v = device_step_values(st, groups_[u.g]);
        std::shared_ptr<DeviceCount>& dc = fresh[{u.g, v}];
        if (!dc) {
          // Inside a capture an upload would replay the same bytes: the replay hook writes them once.
          dc = std::make_shared<DeviceCount>();
          dc->pending = capturing;
          dc->values = capturing ? empty({4}, {.dtype = DType::f32, .device = dev})
                                 : from_blob(v.data(), {4}, DType::f32).to(dev);
        }
        st.device_step = dc;
      } else if (here[st.device_step.get()] < users[st.device_step.get()]) {
        std::shared_ptr<DeviceCount>& copy = copies[st.device_step.get()];
        if (!copy) copy = std::make_shared<DeviceCount>(DeviceCount{st.device_step->values.clone(), st.device_step->pending});
        st.device_step = copy;
      }
    }
    // One scalars tensor per count: the lr as the host knows it (written
    // before each replay when captured), the rest from the device.
    std::vector<std::pair<DeviceCount*, std::size_t>> counts;  // (count, group), in first use order
    std::map<const DeviceCount*, Tensor> scalars_of;
    for (const OnDevice& u : on_device) {
      ParamState& st = state_[u.g][u.i];
      Group& group = groups_[u.g];
      Tensor& p = group.params[u.i];
      Tensor& scalars = scalars_of[st.device_step.get()];
      if (!scalars.defined()) {
        // The values the host knows (the lr and the replayed options) from
        // this step's step_scalars(), the rest from the device's count.
        const std::array<float, 4> now = *step_scalars(st, group);
        const Tensor host = capturing ? st.scalars : from_blob(now.data(), {4}, DType::f32).to(p.device());
        std::array<bool, 4> from_host{true, false, false, false};
        for (const auto& [name, place] : replayed_options()) from_host[std::size_t(place)] = true;
        std::vector<Tensor> parts;
        for (std::int64_t k = 0; k < 4; ++k)
          parts.push_back((from_host[std::size_t(k)] ? host : st.device_step->values).narrow(0, k, 1));
        parts.push_back(skip);
        scalars = cat(parts);
        counts.emplace_back(st.device_step.get(), u.g);
      }
      st.device_scalars = scalars;
      try {
        update(p, u.grad, st, group);
      } catch (...) {
        st.device_scalars = Tensor();
        throw;
      }
      st.device_scalars = Tensor();
      if (capturing) stepped.emplace_back(u.g, u.i);
    }
    finish_updates();  // they read this step's scalars; the counts advance after
    // Then each count advances, unless the step was skipped.
    const Tensor skipped = gt(skip, 0.0);
    for (auto [dc, g] : counts) {
      const Tensor advanced = cat({add(dc->values.narrow(0, 0, 1), 1.0),
                                   advance_device_scalars(dc->values.narrow(0, 1, 3), groups_[g])});
      dc->values.copy_(where(skipped, dc->values, advanced));
    }
  }
  if (capturing && !stepped.empty()) {
    // Each replay is one step: the values of that moment (the lr a scheduler
    // set meanwhile, the step count), then the count advances, as in eager.
    // Every other hyper-parameter is part of the recorded kernels: a change
    // (a schedule cycling the momentum) is refused rather than ignored.
    std::vector<std::pair<double, std::map<std::string, double>>> baked;  // (weight_decay, options) per group
    for (const Group& g : groups_) baked.emplace_back(g.weight_decay, g.options);
    const std::map<std::string, std::int64_t> replayed = replayed_options();
    on_replay([this, alive = std::weak_ptr<int>(alive_), generation = state_generation_, stepped, baked, replayed] {
      if (alive.expired())
        throw CaptureError("CapturedStep::replay: an optimizer the captured step updates has been destroyed");
      if (generation != state_generation_)
        throw CaptureError(fmt::format("CapturedStep::replay: {}.load_state_dict replaced the state the captured step "
                                       "updates (capture the step again after loading)",
                                       type_name()));
      check_baked_options(baked, replayed);
      for (auto [g, i] : stepped) {
        ParamState& state = state_[g][i];
        write_scalars(state, *step_scalars(state, groups_[g]));
        if (!state.device_step) {
          ++state.step;
        } else if (state.device_step->pending) {  // where the device goes on from
          write_values(state.device_step->values, device_step_values(state, groups_[g]));
          state.device_step->pending = false;
        }
      }
    });
  }
}

namespace {
Tensor f64_scalar(double v) { return full({}, v, {.dtype = DType::f64}); }
Tensor name_tensor(const std::string& s) {
  return from_blob(s.data(), {std::int64_t(s.size())}, DType::u8);
}
std::string tensor_name(const Tensor& t) {
  auto v = t.to_vector<std::uint8_t>();
  return std::string(v.begin(), v.end());
}
}  // namespace

StateDict Optimizer::state_dict() const {
  StateDict out;
  out["type"] = name_tensor(type_name());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    std::string gp = fmt::format("group.{}.", g);
    out[gp + "lr"] = f64_scalar(groups_[g].lr);
    out[gp + "initial_lr"] = f64_scalar(groups_[g].initial_lr);
    out[gp + "weight_decay"] = f64_scalar(groups_[g].weight_decay);
    for (auto& [k, v] : groups_[g].options) out[gp + k] = f64_scalar(v);
    out[gp + "size"] = full({}, double(groups_[g].params.size()), {.dtype = DType::i64});
    for (std::size_t i = 0; i < state_[g].size(); ++i) {
      const ParamState& s = state_[g][i];
      std::string sp = fmt::format("state.{}.{}.", g, i);
      out[sp + "step"] = full({}, double(host_step(s)), {.dtype = DType::i64});
      for (auto& [n, t] : s.buffers) out[sp + n] = t.detach();
    }
  }
  save_extra(out);
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  const std::string op = type_name() + ".load_state_dict";
  auto need = [&](const std::string& key) -> const Tensor& {
    auto it = state.find(key);
    if (it == state.end()) throw Error(fmt::format("{}: the state dict has no '{}'", op, key));
    return it->second;
  };
  std::string type = tensor_name(need("type"));
  if (type != type_name())
    throw Error(fmt::format("{}: the state dict belongs to the optimizer {}, expected {}", op, type, type_name()));
  // A count read from the file: one whole number in [0, INT64_MAX], or an error naming the key.
  auto count = [&](const std::string& key) -> std::int64_t {
    const Tensor& t = need(key);
    if (t.numel() != 1 || is_floating(t.dtype()) || t.dtype() == DType::u8)
      throw Error(fmt::format("{}: '{}' must be one integer (i32 or i64), got {} {}", op, key, dtype_name(t.dtype()),
                              shape_str(t.shape())));
    const std::int64_t v = t.to_vector<std::int64_t>()[0];
    if (v < 0) throw Error(fmt::format("{}: '{}' must be >= 0, got {}", op, key, v));
    return v;
  };
  std::size_t used = 1;
  std::vector<Group> groups = groups_;
  std::vector<std::vector<ParamState>> states(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::string gp = fmt::format("group.{}.", g);
    auto size = std::size_t(count(gp + "size"));
    if (size != groups[g].params.size())
      throw Error(fmt::format("{}: group {} has {} parameters in the state dict but {} here", op, g, size,
                              groups[g].params.size()));
    groups[g].lr = need(gp + "lr").item();
    groups[g].initial_lr = need(gp + "initial_lr").item();
    groups[g].weight_decay = need(gp + "weight_decay").item();
    used += 4;
    // An option missing from the file (one saved before the option existed)
    // keeps this optimizer's value, as PyTorch's __setstate__ defaults new options.
    for (auto& [k, v] : groups[g].options) {
      auto it = state.find(gp + k);
      if (it == state.end()) continue;
      v = it->second.item();
      ++used;
    }
    const std::vector<std::string> buffer_names = this->buffer_names(groups[g]);
    const std::string expected_buffers =
        buffer_names.empty() ? "none" : fmt::format("{}", fmt::join(buffer_names, ", "));
    states[g].resize(size);
    for (std::size_t i = 0; i < size; ++i) {
      std::string sp = fmt::format("state.{}.{}.", g, i);
      states[g][i].step = count(sp + "step");
      ++used;
      const Tensor& p = groups[g].params[i];
      for (auto it = state.lower_bound(sp); it != state.end() && it->first.starts_with(sp); ++it) {
        std::string name = it->first.substr(sp.size());
        if (name == "step") continue;
        if (std::find(buffer_names.begin(), buffer_names.end(), name) == buffer_names.end())
          throw Error(fmt::format("{}: '{}' is not a buffer of this {} (expected: {})", op, it->first, type_name(),
                                  expected_buffers));
        const Tensor& b = it->second;
        if (b.shape() != p.shape() || b.dtype() != p.dtype())
          throw Error(fmt::format("{}: '{}' is {} {} but its parameter is {} {}", op, it->first,
                                  dtype_name(b.dtype()), shape_str(b.shape()), dtype_name(p.dtype()),
                                  shape_str(p.shape())));
        states[g][i].buffers[name] = b.detach().to(p.device()).clone();
        ++used;
      }
      // After an update every buffer exists: a missing one would silently restart at zero.
      if (states[g][i].step > 0)
        for (const std::string& name : buffer_names)
          if (!states[g][i].buffers.contains(name))
            throw Error(fmt::format("{}: the state dict has no '{}{}', which {} keeps once a parameter has been "
                                    "updated ('{}step' is {}; expected buffers: {})",
                                    op, sp, name, type_name(), sp, states[g][i].step, expected_buffers));
    }
  }
  for (auto it = state.lower_bound("extra."); it != state.end() && it->first.starts_with("extra."); ++it) ++used;
  if (used != state.size())
    throw Error(fmt::format("{}: the state dict has {} entries, {} of them unexpected (more groups or "
                            "parameters than this optimizer has)",
                            op, state.size(), state.size() - used));
  groups_ = std::move(groups);
  state_ = std::move(states);
  ++state_generation_;
  load_extra(state);
}

}  // namespace rumus::optim
