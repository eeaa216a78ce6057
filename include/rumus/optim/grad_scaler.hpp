#pragma once
// Dynamic loss scaling for mixed-precision training (torch.amp.GradScaler):
// the loss is multiplied by a large scale so that small 16-bit gradients do
// not flush to zero; the gradients are divided by it again before the
// optimizer step, which is skipped when any of them is inf or NaN; the scale
// then backs off, or grows after `growth_interval` clean steps in a row.
//
//   optim::GradScaler scaler;
//   auto loss = rumus::autocast([&] { return cross_entropy(model.forward(x), y); });
//   auto grads = backward(scaler.scale(loss));
//   scaler.step(optimizer, grads);
//   scaler.update();
//
// The scale, the growth count and the found-inf flags are one-element f32
// tensors on the device of the first loss or gradients seen, as PyTorch's
// _scale, _growth_tracker and found_inf: scale() multiplies by the tensor,
// unscaling divides on the device (amp_unscale) and update() computes the
// next scale there (PyTorch's _amp_update_scale_). By default step() then
// reads the flag back, to skip the optimizer's step and to return whether it
// ran. With `device_side`, nothing is read back: the optimizer skips on the
// device (Optimizer::step(grads, found_inf)), and a whole amp step can be
// captured (core/capture.hpp).
#include <cstdint>
#include <functional>
#include <map>

#include "rumus/autograd/engine.hpp"
#include "rumus/core/export.hpp"
#include "rumus/core/state_dict.hpp"
#include "rumus/optim/optimizer.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: every method passes through, as without a scaler
  // true: no host reads per step. step() hands the flag to the optimizer,
  // which skips on the device (SGD, Adam and AdamW; others read the flag),
  // and returns true: the update was issued, and is void where found_inf()
  // holds 1 after it. Needed to capture a step; a sharded scaler's ranks
  // must then agree on the flag themselves. false: as PyTorch's GradScaler
  // with an unfused optimizer: one read of the flag per step, and step()
  // says whether the update ran.
  bool device_side = false;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  virtual ~GradScaler() = default;

  // loss * scale (a recorded op, reading the scale tensor: a captured step
  // uses the scale of each replay), or loss itself when disabled.
  Tensor scale(const Tensor& loss);

  // Divides the gradients of `optimizer`'s parameters in `grads` by the scale
  // and notes whether any is inf or NaN. Call it before working on the true
  // gradients (clip_grad_norm_); step() calls it otherwise. At most once per
  // optimizer between update()s.
  void unscale_(Optimizer& optimizer, GradientStore& grads);
  // The same for every gradient in `grads` (for hand-written updates).
  void unscale_(GradientStore& grads);

  // Unscales (unless done), then runs optimizer.step(grads) unless a
  // gradient was inf or NaN. Returns whether the step ran (device_side:
  // true, the skip is decided on the device).
  bool step(Optimizer& optimizer, GradientStore& grads);

  // Ends the iteration: backoff_factor on the scale if any step was skipped,
  // else growth_factor after growth_interval clean iterations in a row; growth
  // stops at the largest finite f32 (about 3.4e38), so the scale never becomes inf.
  void update();
  // Sets the scale instead (the growth count is kept).
  void update(double new_scale);

  // Read back from the device (for logging and checkpoints, not per step).
  double get_scale() const;
  std::int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  bool is_device_side() const { return options_.enabled && options_.device_side; }
  // The device tensors (undefined until the first loss or gradients):
  // f32 [1] each. found_inf(optimizer) is that optimizer's flag since the
  // last update(), 1 where a gradient was inf or NaN.
  const Tensor& scale_tensor() const { return scale_t_; }
  const Tensor& growth_tracker_tensor() const { return tracker_t_; }
  Tensor found_inf(const Optimizer& optimizer) const;
  const GradScalerOptions& options() const { return options_; }

  // "scale" and "growth_tracker" (f64 scalars), to resume training.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  // Whether any process found an inf or NaN, given this one's finding:
  // itself here; a sharded scaler asks every rank (fsdp::ShardedGradScaler).
  virtual bool found_inf_anywhere(bool found_here) { return found_here; }

 private:
  enum class Stage { ready, unscaled, stepped };
  struct Record {
    Stage stage = Stage::ready;
    bool found_inf = false;  // read back (not device_side)
    Tensor flag;             // f32 [1] on the scaler's device
  };
  // Unscales the gradients of `params` (all of them when null) into r.flag; reads it unless device_side.
  void unscale_grads(GradientStore& grads, const std::vector<const Tensor*>* params, const char* op, Record& r);
  // Makes the device tensors on `device` the first time (from the host values kept until then).
  void ensure_state(Device device, const char* op);
  // Tensors made inside a capture get their first values at its first
  // replay; a use outside the capture before that writes them first.
  void settle() const;
  mutable std::function<void()> settle_;

  GradScalerOptions options_;
  // Before the first loss or gradients, and where no tensors exist yet.
  double initial_scale_;
  std::int64_t initial_tracker_ = 0;
  Tensor scale_t_, tracker_t_;
  // Per optimizer (or per gradient store, for unscale_(grads)) since the last update().
  std::map<const void*, Record> records_;
};

}  // namespace rumus::optim

RUMUS_API_END
