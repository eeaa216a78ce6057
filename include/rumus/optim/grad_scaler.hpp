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
#include <cstdint>
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
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  virtual ~GradScaler() = default;

  // loss * scale (a recorded op), or loss itself when disabled.
  Tensor scale(const Tensor& loss) const;

  // Divides the gradients of `optimizer`'s parameters in `grads` by the scale
  // and notes whether any is inf or NaN. Call it before working on the true
  // gradients (clip_grad_norm_); step() calls it otherwise. At most once per
  // optimizer between update()s.
  void unscale_(Optimizer& optimizer, GradientStore& grads);
  // The same for every gradient in `grads` (for hand-written updates).
  void unscale_(GradientStore& grads);

  // Unscales (unless done), then runs optimizer.step(grads) unless a
  // gradient was inf or NaN. Returns whether the step ran.
  bool step(Optimizer& optimizer, GradientStore& grads);

  // Ends the iteration: backoff_factor on the scale if any step was skipped,
  // else growth_factor after growth_interval clean iterations in a row; growth
  // stops at the largest finite f32 (about 3.4e38), so the scale never becomes inf.
  void update();
  // Sets the scale instead (the growth count is kept).
  void update(double new_scale);

  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  std::int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
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
    bool found_inf = false;
  };
  // Unscales the gradients of `params` (all of them when null); whether one was inf/NaN.
  bool unscale_grads(GradientStore& grads, const std::vector<const Tensor*>* params, const char* op);

  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  // Per optimizer (or per gradient store, for unscale_(grads)) since the last update().
  std::map<const void*, Record> records_;
};

}  // namespace rumus::optim

RUMUS_API_END
