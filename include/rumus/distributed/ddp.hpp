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
// goes on; reduce_gradients() (the end of backward) completes the buckets
// still waiting and waits for them all. Buckets start strictly in order, so
// every rank issues the same collectives in the same order whatever its
// hooks saw. The first buckets follow the reverse parameter order; after the
// first step they are rebuilt in the order the gradients actually became
// ready (rank 0's).
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
  // must get a gradient in every step (in one of its backward passes, see
  // no_sync) on every rank; one that gets none is an Error naming it. On, a parameter may go without: its bucket still
  // starts from the hooks during backward when all its members got their
  // gradients, and otherwise at the end of backward (reduce_gradients), where
  // the parameters that got none on this rank count as zeros. One small
  // all-reduce after the buckets (a bitmap of the parameters used on this
  // rank, as PyTorch's local_used_map) then tells which got a gradient on
  // some rank: those get the average with zeros where they went unused; one
  // unused on every rank gets no gradient in the store.
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
  // over ranks. This is the end of backward: it completes the buckets the
  // hooks left waiting (unused parameters, gradients the hooks did not see:
  // a store built otherwise) and waits for every bucket. Call it once per
  // step, outside no_sync(). A second backward before it (accumulation
  // without no_sync) makes it reduce the summed store after the fact,
  // without overlap (the first backward's buckets were sent for nothing).
  void reduce_gradients(GradientStore& grads);
  // backward(loss) followed by reduce_gradients; under no_sync() only
  // backward(loss): the gradients of this backward, not reduced.
  GradientStore backward(const Tensor& loss);

  // PyTorch's no_sync(), for gradient accumulation. While the returned guard
  // lives, backward passes start no collective: DDP's hooks add their
  // gradients into the buckets' buffers instead (PyTorch accumulates them in
  // .grad; a rumus GradientStore belongs to one backward, so DDP keeps the
  // running sum). The step's first backward outside the guard adds its own
  // gradients as they become ready and starts each full bucket during that
  // backward; reduce_gradients (or ddp.backward) then gives the average over
  // ranks of the sum over the step's backward passes:
  //   { auto guard = ddp.no_sync(); for (micro-batches but the last) ddp.backward(loss_i); }
  //   opt.step(ddp.backward(loss_last));   // the averaged sum of every micro-batch's gradients
  // The stores of the backward passes under the guard hold their own
  // gradients and need not be kept. The earlier usage, summing them by hand
  // (`grads += backward(loss)`, the last one too) and passing the sum to
  // reduce_gradients, gives the same result: the reduced store's values come
  // from DDP's sum, never added to the store's, so nothing counts twice.
  // A second backward outside the guard before reduce_gradients is then an
  // Error: the store could hold every pass's sum or the last pass's alone. A
  // parameter has a gradient for the step (find_unused_parameters) when any
  // of the step's backward passes gave it one.
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
  // How many of this step's buckets have started their all-reduce: from a
  // gradient hook it tells what overlaps the rest of backward (tests, diagnostics).
  std::size_t buckets_started() const { return next_bucket_; }

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
  Tensor slot(std::size_t k);           // k's part of its bucket's buffer (allocated on first use)
  void mark_ready(std::size_t k);       // k's slot holds its final value: count it in its bucket
  void launch_full_buckets();
  void drain() noexcept;  // waits for every started bucket, ignoring errors
  void reset_step();

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
  // This step (from one reduction to the next), per parameter: its slot holds
  // its final value (ready_), a sum of gradients seen under no_sync
  // (accumulated_), and whether it got a gradient on this rank (used_).
  std::vector<char> ready_, accumulated_, used_;
  std::vector<std::size_t> ready_order_;
  std::size_t next_bucket_ = 0;  // the next bucket to start
  bool second_pass_ = false;  // another backward after the step's synchronising one: reduce the store at the end
  bool any_accumulated_ = false;  // a backward ran under no_sync since the last reduction
  int no_sync_depth_ = 0;  // live NoSync guards
  bool rebuilt_ = false;
};

}  // namespace rumus::distributed

RUMUS_API_END
