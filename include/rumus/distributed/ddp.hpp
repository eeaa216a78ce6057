#pragma once
// Data parallel training with replicated parameters: every rank holds the
// whole model, runs forward and backward on its slice of the batch, and
// reduce_gradients() averages the gradients across ranks before opt.step().
// Gradients travel in buckets: the gradients of several parameters are
// flattened into one buffer (up to bucket_bytes) and all-reduced at once, and
// the store then holds views of the reduced buffer (no copy back).
#include <cstddef>
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

struct DdpOptions {
  std::size_t bucket_bytes = std::size_t(4) << 20;
  // Start every rank from rank 0's parameters and buffers (one broadcast each).
  bool broadcast_from_rank0 = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options = {});

  Tensor forward(const Tensor& input) { return module_.forward(input); }
  Tensor operator()(const Tensor& input) { return module_.forward(input); }

  // Collective: replaces every parameter's gradient in `grads` by its average
  // over ranks. A parameter without a gradient on some rank counts as zero
  // there; one without a gradient on every rank stays without one.
  void reduce_gradients(GradientStore& grads);
  // backward(loss) followed by reduce_gradients.
  GradientStore backward(const Tensor& loss);

  nn::Module& module() { return module_; }
  ProcessGroup& group() { return group_; }
  // Parameter indices (into module().parameters()) of each bucket, in reduction order.
  const std::vector<std::vector<std::size_t>>& buckets() const { return buckets_; }

 private:
  nn::Module& module_;
  ProcessGroup& group_;
  DdpOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::vector<std::size_t>> buckets_;
};

}  // namespace rumus::distributed

RUMUS_API_END
