#pragma once
// Fully sharded data parallel training.
//
// Every parameter is split along dim 0 across the ranks of a group (padded
// with zero rows to a multiple of the world size: see shard_rows), and each
// rank keeps, trains and steps only its shard: the optimizer is built on the
// shards, so its state (momentum, Adam moments) is sharded too. In forward
// the full parameter is all-gathered; in backward its gradient is
// reduce-scattered straight back into the shard's gradient (averaged over
// ranks by default, so N ranks on N equal slices of a batch compute the
// gradient of the whole batch). backward(loss) therefore returns a
// GradientStore keyed by the shards, and opt.step(grads) needs nothing else.
//
// Two ways in:
//  - nn::FsdpLinear, a drop-in sharded Linear for models written with it;
//  - fsdp::shard(module, group), which shards every parameter of any module,
//    gathered all at once or unit by unit (ShardOptions::auto_wrap_policy).
//
// Checkpoints hold full tensors under the unsharded names, so one file loads
// into any world size or into the unsharded model.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/distributed/functional.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/io/safetensors.hpp"
#include "rumus/nn/linear.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::fsdp {

using distributed::ProcessGroup;
using distributed::Reduce;

// Implemented by modules whose parameters are dim-0 shards over a group.
class ShardedParameters {
 public:
  virtual ~ShardedParameters() = default;
  // The full shape of the module's own parameter `name` (no dots), or nullopt
  // when that parameter is replicated rather than sharded.
  virtual std::optional<Shape> full_shape(const std::string& name) const = 0;
};

// Collective (every rank calls it): the full state dict of a module built
// from sharded layers (nn::FsdpLinear) and ordinary ones, under the names the
// unsharded model uses. Replicated tensors and buffers come from this rank.
StateDict full_state_dict(const nn::Module& module, ProcessGroup& group);
// Not collective: copies this rank's shard of every full tensor in `state`
// (as written by any world size) into `module`. Checks everything first.
void load_full_state_dict(nn::Module& module, const StateDict& state, ProcessGroup& group, bool strict = true);
// Collective: rank 0 writes one safetensors file; every rank returns once it exists.
void save(const nn::Module& module, ProcessGroup& group, const std::string& path, const io::Metadata& metadata = {});
// Every rank reads `path` (it must be readable by each) and takes its shards.
void load(nn::Module& module, ProcessGroup& group, const std::string& path, bool strict = true);

// PyTorch's MixedPrecision: the dtypes FSDP gathers parameters in (and so
// computes in) and reduce-scatters gradients in. The shards, their
// gradients and the optimizer stay in the parameters' own dtype (the f32
// master copy). Unset fields keep the parameters' dtype; reduce_dtype
// defaults to param_dtype, as in PyTorch.
struct MixedPrecision {
  std::optional<DType> param_dtype;
  std::optional<DType> reduce_dtype;
  // Floating inputs of the wrapped module are cast to param_dtype (PyTorch's cast_forward_inputs).
  bool cast_forward_inputs = true;
};

// Which submodules become units of their own (PyTorch's auto_wrap_policy).
// Called bottom-up (children before their parent) for every submodule below
// the wrapped module with its dotted name and the number of its parameter
// elements not already in a unit below it; true makes it a unit of those
// parameters. What no unit takes belongs to the wrapped module's own unit.
using WrapPolicy =
    std::function<bool(const nn::Module& module, const std::string& name, std::int64_t unwrapped_numel)>;
// PyTorch's ModuleWrapPolicy: every submodule whose type_name() is listed.
WrapPolicy module_wrap_policy(std::vector<std::string> type_names);
// PyTorch's size_based_auto_wrap_policy: every submodule with at least
// `min_num_params` parameter elements not yet in a unit.
WrapPolicy size_based_wrap_policy(std::int64_t min_num_params = 100'000'000);

// When backward starts gathering the unit before the running one (PyTorch's
// BackwardPrefetch, None spelled `none`):
// - backward_pre: when the running unit is gathered, before its gradients are
//   computed. Most overlap; the next unit's parameters arrive while the
//   running unit's parameters and gradients exist (three units at the peak).
// - backward_post: when the running unit's last gradient reaches its
//   reduce-scatter. The gather overlaps the reduce-scatters and the ops
//   between the units; the running unit's parameters are already freed
//   (two units at the peak).
// - none: each unit is gathered when backward reaches it.
enum class BackwardPrefetch { none, backward_pre, backward_post };

struct ShardOptions {
  Reduce grad_reduce = Reduce::average;
  // Start every rank from rank 0's parameters (one broadcast per parameter);
  // off when every rank already holds the same values.
  bool sync_from_rank0 = true;
  // Units (see FullyShardedModule). Empty: the whole module is one unit.
  WrapPolicy auto_wrap_policy;
  // PyTorch's FULL_SHARD (true) or SHARD_GRAD_OP (false): a unit other than
  // the wrapped module's own frees its gathered parameters right after its
  // forward and gathers them again when backward reaches it.
  bool reshard_after_forward = true;
  // Start the next unit's gather while this unit computes: in forward
  // (PyTorch's forward_prefetch, off by default) and in backward (see
  // BackwardPrefetch; PyTorch's default is BACKWARD_PRE). The order is the
  // one the units ran in during the last forward, so the first forward has none.
  bool forward_prefetch = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::backward_pre;
  MixedPrecision mixed_precision;
};

// Memory of one rank's FullyShardedModule, in bytes: its shards, and the
// gathered (full) parameters alive now and at their peak since the last
// reset. A gathered parameter counts from its gather until it is freed.
// peak_param_grad_bytes: parameters and gradients at their peak, sampled at
// each gather and each gradient's reduce-scatter: the shards, the gathered
// parameters, each full gradient from when its unit's backward made it
// until it is freed (after its reduce-scatter), and the shards' gradients
// while the caller holds them.
struct FsdpMemoryStats {
  std::int64_t shard_bytes = 0;
  std::int64_t gathered_bytes = 0, peak_gathered_bytes = 0;
  std::int64_t peak_param_grad_bytes = 0;
  // Of the units: the largest unit's full parameters.
  std::int64_t largest_unit_bytes = 0;
};

// A module whose parameters are sharded over a group (see shard()).
//
// Between forward passes the wrapped module's parameters are empty
// placeholders (shape [0]) and this rank holds only its shards.
//
// Units. The wrap policy splits the parameters into units: submodules that
// gather their own parameters just before their forward and free them after
// it, so only the units running (and one prefetched) hold full parameters.
// A unit's gather and free run from forward hooks (nn::Module's), so a unit
// must be called through operator() or a container such as Sequential, not
// by forward() directly. Backward gathers a unit again when the gradient of
// its output is complete (an identity node on the output), before any of its
// ops run, and its reduce-scatters free it again. Without a policy there is one unit, the
// wrapped module, gathered for the whole forward as below.
//
// The wrapped module's own unit: forward() all-gathers those parameters into
// the module's own parameter tensors, runs the module's forward, and frees
// each gathered copy as soon as nothing can read it any more: right after
// forward when no graph was recorded, else when the gradient of that
// parameter has been reduce-scattered (the autograd node that did it is
// released). backward through one graph twice (retain_graph) works as in one
// process: each pass reduce-scatters its own gradients, and the gathered
// copies live until the graph is released.
class FullyShardedModule {
 public:
  FullyShardedModule(nn::Module& module, ProcessGroup& group, ShardOptions options = {});
  ~FullyShardedModule();
  FullyShardedModule(const FullyShardedModule&) = delete;
  FullyShardedModule& operator=(const FullyShardedModule&) = delete;

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // This rank's shards (leaves that require grad), in the module's parameter order.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // Collective: fsdp::clip_grad_norm_ (sharded_optim.hpp) over this module's
  // shards, as torch's FullyShardedDataParallel.clip_grad_norm_.
  double clip_grad_norm_(GradientStore& grads, double max_norm, double norm_type = 2.0);
  // Elements of this rank's shards, and of the full parameters.
  std::int64_t shard_numel() const;
  std::int64_t full_numel() const;
  // The full (unsharded) shape of each parameter, in parameters() order.
  std::vector<Shape> full_shapes() const;
  // The units' names (dotted submodule names; "" is the wrapped module's
  // own), in the order of the module's parameters.
  std::vector<std::string> unit_names() const;
  FsdpMemoryStats memory_stats() const;
  void reset_peak_memory_stats();

  // Collective: full tensors (parameters gathered, buffers from this rank).
  StateDict state_dict();
  // Not collective: each rank takes its shards of full tensors.
  void load_state_dict(const StateDict& state, bool strict = true);
  void save(const std::string& path, const io::Metadata& metadata = {});
  void load(const std::string& path, bool strict = true);

  void train(bool on = true) { module_.train(on); }
  void eval() { module_.train(false); }
  // Moves the shards and the module's buffers.
  void to(Device device);

  nn::Module& module() { return module_; }
  ProcessGroup& group() { return group_; }

  struct Param;
  struct Unit;
  struct Shared;

 private:
  nn::Module& module_;
  ProcessGroup& group_;
  ShardOptions options_;
  std::vector<std::shared_ptr<Param>> params_;
  std::shared_ptr<Shared> shared_;  // units and per-step state, reached from hooks
};

// Shards every parameter of `module` over `group`. Every rank calls it on a
// module of the same architecture; the module must outlive the result.
std::unique_ptr<FullyShardedModule> shard(nn::Module& module, ProcessGroup& group, ShardOptions options = {});

}  // namespace rumus::fsdp

namespace rumus::nn {

// A Linear layer whose weight [out, in] and bias [out] are dim-0 shards over a
// group: each rank holds c = ceil(out / size) rows (zero padded). Forward
// all-gathers the full weight and bias; backward computes the input's
// gradient with the full weight and reduce-scatters the weight's and bias's
// gradients (averaged over ranks by default) into the shards.
class FsdpLinear : public Module, public fsdp::ShardedParameters {
 public:
  // Initialised like nn::Linear on rank 0 and broadcast, so every rank agrees.
  FsdpLinear(std::int64_t in_features, std::int64_t out_features, distributed::ProcessGroup& group,
             bool bias = true, distributed::Reduce grad_reduce = distributed::Reduce::average);
  // The shards of `full` (which every rank must hold with the same values).
  FsdpLinear(const Linear& full, distributed::ProcessGroup& group,
             distributed::Reduce grad_reduce = distributed::Reduce::average);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "FsdpLinear"; }
  std::optional<Shape> full_shape(const std::string& name) const override;

  Tensor weight, bias;  // this rank's shards: [c, in] and [c]
  std::int64_t in_features, out_features;

 private:
  void init_from(const Tensor& w, const Tensor& b);
  distributed::ProcessGroup& group_;
  distributed::Reduce grad_reduce_;
};

}  // namespace rumus::nn

RUMUS_API_END
