#pragma once
// Gradient clipping and loss scaling over sharded gradients. Under FSDP each
// rank holds a shard of every gradient, so a norm or an inf/NaN check of one
// rank's gradients sees only part of the model: these ask every rank, so all
// ranks clip by the same factor and skip the same steps, as one process
// training on the whole batch would (torch.distributed.fsdp's
// FullyShardedDataParallel.clip_grad_norm_ and ShardedGradScaler).
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/core/export.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/optim/grad_scaler.hpp"

RUMUS_API_BEGIN

namespace rumus::fsdp {

// Collective: scales the gradients of `shards` (this rank's part of each
// parameter; each element lives on exactly one rank) so that the norm of the
// whole model's gradient, over every rank, is at most max_norm; returns that
// norm before clipping, the same on every rank.
double clip_grad_norm_(GradientStore& grads, const std::vector<Tensor>& shards, double max_norm,
                       distributed::ProcessGroup& group, double norm_type = 2.0);

// A GradScaler whose inf/NaN check covers every rank's shard: unscale_() and
// step() are collective, and every rank skips (and backs off) together.
class ShardedGradScaler : public optim::GradScaler {
 public:
  // device_side is refused: the ranks agree on the flag through a host all_reduce.
  explicit ShardedGradScaler(distributed::ProcessGroup& group, optim::GradScalerOptions options = {});

 protected:
  bool found_inf_anywhere(bool found_here) override;

 private:
  distributed::ProcessGroup& group_;
};

}  // namespace rumus::fsdp

RUMUS_API_END
