// DistributedDataParallel: bucketed gradient all-reduces started from
// gradient-ready hooks while backward runs (see ddp.hpp).
#include "rumus/distributed/ddp.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::distributed {

namespace {
// Waits for every work; rethrows the first error once all are done, so no
// collective still writes into a buffer when the caller unwinds.
void wait_all(const std::vector<std::shared_ptr<Work>>& works) {
  std::exception_ptr first;
  for (const auto& w : works) {
    try {
      if (w) w->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, ProcessGroup& group, DdpOptions options)
    : module_(module), group_(group), options_(options) {
  if (options_.bucket_bytes == 0) throw Error("DistributedDataParallel: expected bucket_bytes > 0, got 0");
  for (auto& [name, p] : module.named_parameters()) {
    names_.push_back(name);
    params_.push_back(p);
  }
  for (std::size_t i = 1; i < params_.size(); ++i)
    if (params_[i].device() != params_[0].device())
      throw DeviceError(fmt::format("DistributedDataParallel: expected every parameter on one device, got {} and {}",
                                    params_[0].device().str(), params_[i].device().str()));
  if (options_.broadcast_from_rank0) {
    NoGradGuard no_grad;
    for (auto& [name, t] : module.state_dict()) group.broadcast(t, 0);
  }
  for (std::size_t k = 0; k < params_.size(); ++k)
    if (params_[k].requires_grad()) trainable_.push_back(k);
  // First guess at the order backward produces the gradients: reverse registration order.
  assign_buckets(std::vector<std::size_t>(trainable_.rbegin(), trainable_.rend()));
  for (std::size_t k : trainable_)
    hooks_.push_back(autograd::register_hook(params_[k], [this, k](const Tensor& g) {
      on_gradient(k, g);
      return Tensor();  // the store keeps the local gradient until reduce_gradients replaces it
    }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (autograd::HookHandle& h : hooks_) h.remove();
  drain();
}

// Buckets in `order`, one dtype each, at most bucket_bytes unless one
// parameter alone is larger.
void DistributedDataParallel::assign_buckets(const std::vector<std::size_t>& order) {
  buckets_.clear();
  bucket_members_.clear();
  place_.assign(params_.size(), {});
  Bucket current;
  std::size_t bytes = 0;
  for (std::size_t k : order) {
    const Tensor& p = params_[k];
    const std::size_t n = std::size_t(p.numel()) * dtype_size(p.dtype());
    if (!current.members.empty() && (bytes + n > options_.bucket_bytes || current.dtype != p.dtype())) {
      buckets_.push_back(std::move(current));
      current = Bucket{};
      bytes = 0;
    }
    current.dtype = p.dtype();
    place_[k] = {buckets_.size(), current.numel};
    current.members.push_back(k);
    current.numel += p.numel();
    bytes += n;
  }
  if (!current.members.empty()) buckets_.push_back(std::move(current));
  for (const Bucket& b : buckets_) bucket_members_.push_back(b.members);
  reset_step();
}

void DistributedDataParallel::reset_step() {
  ready_.assign(params_.size(), 0);
  accumulated_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
  ready_order_.clear();
  next_bucket_ = 0;
  second_pass_ = false;
  any_accumulated_ = false;
  for (Bucket& b : buckets_) {
    b.waiting = b.members.size();
    b.flat = Tensor();
    b.work.reset();
  }
}

void DistributedDataParallel::drain() noexcept {
  for (Bucket& b : buckets_) {
    try {
      if (b.work) b.work->wait();
    } catch (...) {  // the caller reports its own error
    }
  }
}

Tensor DistributedDataParallel::slot(std::size_t k) {
  const Tensor& p = params_[k];
  Bucket& b = buckets_[place_[k].bucket];
  if (!b.flat.defined()) b.flat = empty({b.numel}, {.dtype = b.dtype, .device = p.device()});
  return b.flat.narrow(0, place_[k].offset, p.numel());
}

// A parameter's gradient is complete. Under no_sync it joins the parameter's
// running sum in its slot; otherwise it completes the slot (the sum's last
// term, or the whole gradient), and every bucket that is then full and has
// no unfinished bucket before it starts.
void DistributedDataParallel::on_gradient(std::size_t k, const Tensor& grad) {
  if (second_pass_) return;
  // Another backward after this step's synchronising one, before
  // reduce_gradients: the store will hold the sum (buckets may be in flight).
  if (ready_[k] || (no_sync_depth_ > 0 && !ready_order_.empty())) {
    second_pass_ = true;
    return;
  }
  const Tensor& p = params_[k];
  if (grad.numel() != p.numel())
    throw ShapeError(fmt::format("DistributedDataParallel: expected a gradient of shape {} for parameter '{}', got {}",
                                 shape_str(p.shape()), names_[k], shape_str(grad.shape())));
  NoGradGuard no_grad;
  Tensor s = slot(k);
  // A copy, not the gradient itself: gradients may alias each other (add
  // passes one tensor to both inputs). Added in the order a store summed by
  // hand adds them (((g1 + g2) + g3) ...), so the bits are the same.
  if (accumulated_[k]) s.add_(grad.reshape({-1}));
  else s.copy_(grad.reshape({-1}));
  used_[k] = 1;
  if (no_sync_depth_ > 0) {
    accumulated_[k] = 1;
    any_accumulated_ = true;
    return;
  }
  mark_ready(k);
}

void DistributedDataParallel::mark_ready(std::size_t k) {
  ready_[k] = 1;
  ready_order_.push_back(k);
  if (--buckets_[place_[k].bucket].waiting == 0) launch_full_buckets();
}

void DistributedDataParallel::launch_full_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].waiting == 0) {
    Bucket& b = buckets_[next_bucket_++];
    b.work = group_.all_reduce_async(b.flat, Reduce::average);
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  // As PyTorch: only forwards that may be followed by a backward sync the
  // buffers, so an evaluation under NoGradGuard stays rank-local.
  if (options_.broadcast_buffers && grad_enabled() && group_.size() > 1) {
    NoGradGuard no_grad;
    std::vector<std::shared_ptr<Work>> works;
    for (auto& [name, b] : module_.named_buffers()) works.push_back(group_.broadcast_async(b, 0));
    wait_all(works);
  }
  return module_.forward(input);
}

void DistributedDataParallel::reduce_gradients(GradientStore& grads) {
  if (no_sync_depth_ > 0)
    throw Error("DistributedDataParallel::reduce_gradients: expected no live no_sync() guard, got one; reduce after "
                "the step's last backward, outside the guard");
  NoGradGuard no_grad;
  std::vector<char> anywhere;  // find_unused_parameters: used on some rank
  try {
    if (second_pass_) {
      // What the hooks reduced is stale: start over from the store. Not after
      // no_sync, where the store may hold the sum or only the last backward.
      if (any_accumulated_)
        throw Error("DistributedDataParallel::reduce_gradients: expected one backward outside no_sync() per step, "
                    "got a second one before reduce_gradients after backward passes under no_sync(); call "
                    "reduce_gradients (or ddp.backward) for the step's last backward");
      drain();
      reset_step();
    }
    // The end of backward: complete every slot the hooks left open, then
    // start the remaining buckets, in order.
    std::vector<std::string> missing;
    for (std::size_t k : trainable_) {
      if (ready_[k]) continue;
      if (accumulated_[k]) {  // a gradient under no_sync, none in the last backward: the slot holds the sum
        mark_ready(k);
      } else if (Tensor g = grads.get(params_[k]); g.defined()) {  // not seen by the hooks: a store built otherwise
        on_gradient(k, g);
      } else if (options_.find_unused_parameters) {  // unused on this rank: zeros, as PyTorch's Reducer
        slot(k).zero_();
        mark_ready(k);
      } else {
        missing.push_back(fmt::format("'{}'", names_[k]));
      }
    }
    if (!missing.empty())
      throw Error(fmt::format("DistributedDataParallel::reduce_gradients: expected a gradient for every parameter "
                              "that requires grad, got none for {} on rank {}; construct it with "
                              "find_unused_parameters = true when parameters may go unused",
                              fmt::join(missing, ", "), group_.rank()));
    launch_full_buckets();
    std::shared_ptr<Work> used_work;
    Tensor used;
    if (options_.find_unused_parameters) {
      // After the buckets, so every rank issues it in the same place.
      std::vector<std::int32_t> local(trainable_.size());
      for (std::size_t i = 0; i < trainable_.size(); ++i) local[i] = used_[trainable_[i]];
      used = tensor(local);
      used_work = group_.all_reduce_async(used, Reduce::sum);
    }
    for (Bucket& b : buckets_) b.work->wait();
    if (used_work) {
      used_work->wait();
      const std::vector<std::int32_t> count = used.to_vector<std::int32_t>();
      anywhere.assign(params_.size(), 0);
      for (std::size_t i = 0; i < trainable_.size(); ++i) anywhere[trainable_[i]] = count[i] > 0;
    }
  } catch (...) {
    drain();
    reset_step();
    throw;
  }
  for (const Bucket& b : buckets_)
    for (std::size_t k : b.members) {
      const Tensor& p = params_[k];
      if (!anywhere.empty() && !anywhere[k]) continue;  // unused everywhere: no gradient, as PyTorch leaves .grad
      grads.insert(p.grad_id(), b.flat.narrow(0, place_[k].offset, p.numel()).view(p.shape()));
    }
  if (!rebuilt_) {
    // Rebuild the buckets in the order the gradients became ready, rank 0's
    // on every rank (one small broadcast, once), as PyTorch's Reducer. The
    // parameters completed at the end of backward come last.
    rebuilt_ = true;
    std::vector<std::int64_t> order(ready_order_.begin(), ready_order_.end());
    Tensor t = tensor(order);
    group_.broadcast(t, 0);
    std::vector<std::size_t> agreed;
    std::vector<char> seen(params_.size(), 0);
    for (std::int64_t k : t.to_vector<std::int64_t>()) {
      if (k < 0 || std::size_t(k) >= params_.size() || seen[std::size_t(k)] || !params_[std::size_t(k)].requires_grad())
        throw Error(fmt::format("DistributedDataParallel: rank 0's gradient order names parameter {}, which is not "
                                "one of this rank's {} parameters that require grad (do all ranks hold the same model?)",
                                k, trainable_.size()));
      seen[std::size_t(k)] = 1;
      agreed.push_back(std::size_t(k));
    }
    assign_buckets(agreed);
    return;
  }
  reset_step();
}

GradientStore DistributedDataParallel::backward(const Tensor& loss) {
  GradientStore grads;
  try {
    grads = rumus::backward(loss);
  } catch (...) {
    drain();
    reset_step();
    throw;
  }
  if (no_sync_depth_ == 0) reduce_gradients(grads);  // under no_sync the hooks only accumulated
  return grads;
}

}  // namespace rumus::distributed
