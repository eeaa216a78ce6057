#pragma once
// Data parallel training with replicated parameters: every rank holds the
// whole model, runs forward and backward on its slice of the batch, and the
// gradients are averaged across ranks before opt.step().
//
// Gradients travel in buckets: the gradients of several parameters are
// copied into one flat buffer (up to bucket_bytes) and all-reduced at once,
// and the store then holds views of the reduced buffer. The reduction
// overlaps backward (as PyTorch's Reducer): a gradient-ready hook on each
// parameter copies its gradient into its bucket, and once a bucket is full
// its all_reduce starts on the group's communication thread while backward
// goes on; reduce_gradients() waits for them. Buckets start in order, so
// every rank issues the same collectives in the same order. The first
// buckets follow the reverse parameter order; after the first step they are
// rebuilt in the order the gradients actually became ready (rank 0's).
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/autograd/hooks.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

struct DdpOptions {
  std::size_t bucket_bytes = std::size_t(4) << 20;
  // Start every rank from rank 0's parameters and buffers (one broadcast each).
  bool broadcast_from_rank0 = true;
  // PyTorch's name: every forward() with grad enabled first broadcasts rank
  // 0's buffers (BatchNorm's running statistics), so all ranks normalise alike.
  bool broadcast_buffers = true;
  // PyTorch's name. Off (the default), every parameter that requires grad
  // must get a gradient in every backward on every rank; one that gets none
  // is an Error naming it. On, one small all-reduce per step finds which
  // parameters got a gradient anywhere: a missing one counts as zero where it
  // is missing, and one missing everywhere stays without a gradient. The
  // buckets are then reduced after backward, not overlapped with it.
  bool find_unused_parameters = false;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options = {});
  ~DistributedDataParallel();
  // Its hooks point at it.
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Collective when broadcast_buffers is on, grad is enabled and the module has buffers.
  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // Collective: replaces every parameter's gradient in `grads` by its average
  // over ranks. Waits for the buckets backward started and reduces the rest
  // (all of them when the hooks did not run: a store built otherwise). Call
  // it once per backward; a second backward before it (accumulation) makes
  // it reduce the summed store after the fact, without overlap.
  void reduce_gradients(GradientStore& grads);
  // backward(loss) followed by reduce_gradients.
  GradientStore backward(const Tensor& loss);

  // PyTorch's no_sync(), for gradient accumulation: while the returned guard
  // lives, backward passes start no reduction. Sum their stores and the
  // store of the step's last backward (`grads += backward(loss)`), then call
  // reduce_gradients once the guard is gone: it averages the sum, after that
  // backward rather than overlapped with it.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ++ddp.no_sync_depth_; }
    ~NoSync() {
      if (ddp_) --ddp_->no_sync_depth_;
    }
    NoSync(NoSync&& other) noexcept : ddp_(std::exchange(other.ddp_, nullptr)) {}
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  nn::Module& module() { return module_; }
  ProcessGroup& group() { return group_; }
  // Parameter indices (into module().parameters()) of each bucket, in reduction order.
  const std::vector<std::vector<std::size_t>>& buckets() const { return bucket_members_; }

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // parameter indices
    std::int64_t numel = 0;
    DType dtype = DType::f32;
    std::size_t waiting = 0;  // members without a gradient yet, this step
    Tensor flat;              // this step's buffer (new each step: the last store keeps views of the old)
    std::shared_ptr<Work> work;
  };
  struct Place {
    std::size_t bucket = 0;
    std::int64_t offset = 0;
  };

  void assign_buckets(const std::vector<std::size_t>& order);
  void on_gradient(std::size_t k, const Tensor& grad);
  void launch_full_buckets();
  void drain() noexcept;  // waits for every started bucket, ignoring errors
  void reset_step();
  void reduce_unused_aware(GradientStore& grads);

  nn::Module& module_;
  ProcessGroup& group_;
  DdpOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::size_t> trainable_;  // indices of parameters that require grad
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::size_t>> bucket_members_;
  std::vector<Place> place_;
  std::vector<autograd::HookHandle> hooks_;
  // This step: which parameters have their gradient, in what order, and the next bucket to start.
  std::vector<char> ready_;
  std::vector<std::size_t> ready_order_;
  std::size_t next_bucket_ = 0;
  bool second_pass_ = false;  // a gradient arrived twice: reduce the store at the end
  int no_sync_depth_ = 0;      // live NoSync guards
  bool accumulated_ = false;   // a backward ran under no_sync since the last reduction
  bool rebuilt_ = false;
};

}  // namespace rumus::distributed

RUMUS_API_END
