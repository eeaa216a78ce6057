#pragma once
// Optimizers update parameters in place from a GradientStore; there are no
// .grad fields to clear. Each subclass keeps its update math in update().
#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/core/state_dict.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

// Parameters sharing hyperparameters (unset = the optimizer's), as PyTorch's
// param_groups: lr, weight_decay, and any other option of the optimizer by
// its name, e.g. {.params = {w}, .options = {{"momentum", 0.5}}} for SGD or
// {{"beta1", 0.8}, {"amsgrad", 1}} for Adam (flags as 0 or 1).
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;
  std::optional<double> weight_decay;
  std::map<std::string, double> options;
};

inline std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

class Optimizer {
 public:
  struct Group {
    std::vector<Tensor> params;
    double lr, weight_decay;
    double initial_lr;  // the lr schedulers scale from
    // Every other hyperparameter of the optimizer, by option name.
    std::map<std::string, double> options;
    double option(const std::string& name) const;
    bool flag(const std::string& name) const { return option(name) != 0; }
  };

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Parameters without a gradient in `grads` are left untouched (as PyTorch
  // skips parameters whose .grad is None). Inside capture() (core/capture.hpp)
  // the update is recorded, and each replay advances the step counts and
  // uses the learning rate of that moment; call step() once per capture.
  void step(const GradientStore& grads);
  // The same step, skipped on the device where `found_inf` (a one-element f32
  // on the parameters' device, mixed precision's flag: optim::GradScaler) is
  // not 0, without a host read, as PyTorch's fused optimizers take found_inf.
  // The fused updates (SGD, Adam, AdamW) read the flag in their kernels and
  // keep their step counts on the device, so that a skipped step does not
  // count (Adam's bias correction, the momentum buffer's first update), as
  // PyTorch's fused Adam subtracts found_inf from its device step. Such a
  // step can be captured. Optimizers without that update (RMSprop, AMSGrad,
  // ...) read the flag on the host and step unless it is set, as PyTorch's
  // GradScaler does for them.
  void step(const GradientStore& grads, const Tensor& found_inf);

  std::vector<Group>& param_groups() { return groups_; }
  const std::vector<Group>& param_groups() const { return groups_; }
  double lr() const { return groups_.front().lr; }
  void set_lr(double lr);  // every group
  virtual std::string type_name() const = 0;

  // Per-parameter buffers and step counts, and each group's hyperparameters,
  // as flat named tensors: "state.<group>.<index>.<buffer>", "group.<group>.lr",
  // "group.<group>.momentum", ...
  StateDict state_dict() const;
  // Expects a state dict of the same optimizer type over parameters of the same shapes.
  void load_state_dict(const StateDict& state);

 protected:
  struct DeviceCount;
  struct ParamState {
    std::int64_t step = 0;            // updates done so far, before this one
    std::map<std::string, Tensor> buffers;
    // For captured updates (optimizers with step_scalars()): the values the
    // fused kernel reads at run time, written before each replay when they
    // changed. Eager updates pass them as push constants instead.
    Tensor scalars;
    std::array<float, 4> scalars_written{};
    bool scalars_valid = false;
    // Steps skipped on the device (step(grads, found_inf)): the count and
    // values the device keeps (DeviceCount), shared by the parameters of a
    // group that step together, so that each step computes them once per
    // group rather than once per parameter. `device_scalars` is the f32 [5]
    // the fused kernel reads during an update.
    std::shared_ptr<DeviceCount> device_step;
    Tensor device_scalars;
  };
  // f32 [4] on the parameters' device: the count of updates applied (held
  // there instead of ParamState::step; exact to 2^24 steps, where every bias
  // correction has long reached 1) and values 1 to 3 of the next update's
  // step_scalars(), advanced on the device after each update applied. Made
  // from the host's values, written at the first replay when made inside a
  // capture (`pending`), or at the first use outside it before that.
  struct DeviceCount {
    Tensor values;
    bool pending = false;
  };
  // state.scalars inside a capture, else undefined (the update's fields are used).
  static Tensor captured_scalars(const ParamState& state);
  // `defaults`: the optimizer's hyperparameters other than lr and weight
  // decay; a group's options may set only these.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name,
            std::map<std::string, double> defaults = {});
  // Updates `param` in place, with recording off; state.step counts earlier updates.
  virtual void update(Tensor& param, const Tensor& grad, ParamState& state, const Group& group) = 0;
  // An optimizer may queue the updates of one step and run them together
  // (SGD: a few parameters per kernel, as PyTorch's foreach): step() calls
  // finish_updates() once every update() of the step was made, or once a
  // parameter failed the step (the updates before it stand, as one by one).
  virtual void finish_updates() {}
  // The buffers update() keeps per parameter (with this group's options):
  // a loaded state with step > 0 must have all of them, and no others.
  virtual std::vector<std::string> buffer_names(const Group&) const { return {}; }
  // Optimizer-wide state beyond the per-parameter buffers (LBFGS's history),
  // saved under "extra.<name>". load_extra runs once the rest of the state
  // dict has been checked and loaded, and must use every "extra." entry.
  virtual void save_extra(StateDict&) const {}
  virtual void load_extra(const StateDict&) {}
  // The per-step values this optimizer's fused kernel reads from
  // ParamState::scalars (see ops/optimizer_step.hpp); nullopt: none, and the
  // optimizer cannot be captured.
  virtual std::optional<std::array<float, 4>> step_scalars(const ParamState&, const Group&) const {
    return std::nullopt;
  }
  // Values 1 to 3 of step_scalars() for the update after the one that used
  // `values` (f32 [3] on the device), computed on the device. Optimizers with
  // step_scalars() define it.
  virtual Tensor advance_device_scalars(const Tensor& values, const Group&) const;
  // The options (besides the lr) that step_scalars() carries, by name and
  // place (1 to 3): a captured step follows them as they change (SGD's
  // momentum and dampening), and where the step counts live on the device the
  // host sets them at each step (the device advances the other values).
  // Other options are recorded by a capture, which refuses a replay after one
  // changed.
  virtual std::map<std::string, std::int64_t> replayed_options() const { return {}; }

 private:
  static void write_scalars(ParamState& state, const std::array<float, 4>& values);
  void run_step(const GradientStore& grads, const Tensor* found_inf);
  // Throws CaptureError where a group's weight decay or option differs from
  // `baked` (per group, as a capture recorded them); those in `replayed` may
  // change, but not between zero and not zero (a zero momentum records other
  // kernels).
  void check_baked_options(const std::vector<std::pair<double, std::map<std::string, double>>>& baked,
                           const std::map<std::string, std::int64_t>& replayed) const;
  // The count of applied updates as step(grads) keeps it, read back from the device where it lives.
  static std::int64_t host_step(const ParamState& state);
  // The first value of ParamState::device_step, from the host's count.
  std::array<float, 4> device_step_values(const ParamState& state, const Group& group) const;
  std::vector<Group> groups_;
  std::vector<std::vector<ParamState>> state_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // replay hooks check that the optimizer lives
  std::uint64_t state_generation_ = 0;  // load_state_dict replaces the buffers a capture recorded
};

}  // namespace rumus::optim

RUMUS_API_END
