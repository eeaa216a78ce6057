#include "rumus/distributed/ddp.hpp"

#include <fmt/format.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"

namespace rumus::distributed {

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options)
    : module_(module), group_(group), options_(options), params_(module.parameters()) {
  if (options_.bucket_bytes == 0) throw Error("DistributedDataParallel: expected bucket_bytes > 0, got 0");
  for (std::size_t i = 1; i < params_.size(); ++i)
    if (params_[i].device() != params_[0].device())
      throw DeviceError(fmt::format("DistributedDataParallel: expected every parameter on one device, got {} and {}",
                                    params_[0].device().str(), params_[i].device().str()));
  if (options_.broadcast_from_rank0) {
    NoGradGuard no_grad;
    for (auto& [name, t] : module.state_dict()) group.broadcast(t, 0);
  }
  // Buckets in reverse registration order (the order backward produces the
  // gradients), one dtype per bucket, at most bucket_bytes unless one
  // parameter alone is larger.
  std::vector<std::size_t> bucket;
  std::size_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    const std::size_t n = std::size_t(p.numel()) * dtype_size(p.dtype());
    if (!bucket.empty() && (bytes + n > options_.bucket_bytes || params_[bucket.front()].dtype() != p.dtype())) {
      buckets_.push_back(std::move(bucket));
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(k);
    bytes += n;
  }
  if (!bucket.empty()) buckets_.push_back(std::move(bucket));
}

void DistributedDataParallel::reduce_gradients(GradientStore& grads) {
  NoGradGuard no_grad;
  // Which parameters have a gradient anywhere: one small host all_reduce.
  std::vector<std::int32_t> local(params_.size());
  for (std::size_t k = 0; k < params_.size(); ++k) local[k] = grads.contains(params_[k]) ? 1 : 0;
  Tensor present = tensor(local);
  group_.all_reduce(present, Reduce::sum);
  const std::vector<std::int32_t> anywhere = present.to_vector<std::int32_t>();

  for (const std::vector<std::size_t>& bucket : buckets_) {
    std::vector<Tensor> parts;
    std::vector<std::size_t> members;
    for (std::size_t k : bucket) {
      if (!anywhere[k]) continue;
      const Tensor& p = params_[k];
      Tensor g = grads.get(p);
      parts.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, {.dtype = p.dtype(), .device = p.device()}));
      members.push_back(k);
    }
    if (parts.empty()) continue;
    // A new buffer: gradients may alias each other (add passes one tensor to both inputs).
    Tensor flat = parts.size() == 1 ? parts[0].clone() : cat(parts, 0);
    group_.all_reduce(flat, Reduce::average);
    std::int64_t offset = 0;
    for (std::size_t k : members) {
      const Tensor& p = params_[k];
      grads.insert(p.grad_id(), flat.narrow(0, offset, p.numel()).view(p.shape()));
      offset += p.numel();
    }
  }
}

GradientStore DistributedDataParallel::backward(const Tensor& loss) {
  GradientStore grads = rumus::backward(loss);
  reduce_gradients(grads);
  return grads;
}

}  // namespace rumus::distributed
