#include "rumus/distributed/sharded_optim.hpp"

#include <algorithm>
#include <cmath>

#include "rumus/distributed/fsdp.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/optim/clip.hpp"

namespace rumus::fsdp {

double clip_grad_norm_(GradientStore& grads, const std::vector<Tensor>& shards, double max_norm,
                       distributed::ProcessGroup& group, double norm_type) {
  const char* op = "fsdp::clip_grad_norm_";
  optim::check_clip_arguments(op, max_norm, norm_type);
  const double term = optim::grad_norm_term(grads, shards, norm_type, op);
  // Sums of |g|^p add across ranks; for the max norm every rank's max is gathered.
  double total_term = 0;
  if (std::isinf(norm_type)) {
    const std::vector<double> maxima = group.all_gather(full({}, term, {.dtype = DType::f64})).to_vector<double>();
    total_term = *std::max_element(maxima.begin(), maxima.end());
  } else {
    Tensor t = full({}, term, {.dtype = DType::f64});
    group.all_reduce(t, distributed::Reduce::sum);
    total_term = t.item();
  }
  const double total = optim::norm_from_term(total_term, norm_type);
  optim::scale_grads_to_norm(grads, shards, total, max_norm);
  return total;
}

double FullyShardedModule::clip_grad_norm_(GradientStore& grads, double max_norm, double norm_type) {
  return fsdp::clip_grad_norm_(grads, parameters(), max_norm, group(), norm_type);
}

ShardedGradScaler::ShardedGradScaler(distributed::ProcessGroup& group, optim::GradScalerOptions options)
    : GradScaler(options), group_(group) {
  if (options.enabled && options.device_side)
    throw ValueError("ShardedGradScaler: device_side is not supported (the ranks agree on found_inf on the host)");
}

bool ShardedGradScaler::found_inf_anywhere(bool found_here) {
  Tensor found = full({}, found_here ? 1.0 : 0.0, {.dtype = DType::f64});
  group_.all_reduce(found, distributed::Reduce::sum);
  return found.item() != 0.0;
}

}  // namespace rumus::fsdp
