// DistributedDataParallel: bucketed gradient all-reduces started from
// gradient-ready hooks while backward runs (see ddp.hpp).
#include "rumus/distributed/ddp.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"

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
  if (!options_.find_unused_parameters)  // with it, the buckets wait for the presence check after backward
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
  ready_order_.clear();
  next_bucket_ = 0;
  second_pass_ = false;
  accumulated_ = false;
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

// A parameter's gradient is complete: into its bucket, and start every bucket
// that is full and has no unfinished bucket before it.
void DistributedDataParallel::on_gradient(std::size_t k, const Tensor& grad) {
  if (no_sync_depth_ > 0) {  // accumulating: the reduction waits for the summed store
    accumulated_ = true;
    return;
  }
  if (second_pass_) return;
  if (ready_[k] || accumulated_) {  // another backward before reduce_gradients: the store will hold the sum
    second_pass_ = true;
    return;
  }
  const Tensor& p = params_[k];
  if (grad.numel() != p.numel())
    throw ShapeError(fmt::format("DistributedDataParallel: expected a gradient of shape {} for parameter '{}', got {}",
                                 shape_str(p.shape()), names_[k], shape_str(grad.shape())));
  NoGradGuard no_grad;
  Bucket& b = buckets_[place_[k].bucket];
  if (!b.flat.defined()) b.flat = empty({b.numel}, {.dtype = b.dtype, .device = p.device()});
  // A copy: gradients may alias each other (add passes one tensor to both inputs).
  b.flat.narrow(0, place_[k].offset, p.numel()).copy_(grad.reshape({-1}));
  ready_[k] = 1;
  ready_order_.push_back(k);
  if (--b.waiting == 0) launch_full_buckets();
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
  NoGradGuard no_grad;
  if (options_.find_unused_parameters) return reduce_unused_aware(grads);
  try {
    if (second_pass_) {  // what the hooks reduced is stale: start over from the store
      drain();
      reset_step();
    }
    // Gradients the hooks did not see (a store built otherwise, or the second pass).
    for (std::size_t k : trainable_)
      if (!ready_[k])
        if (Tensor g = grads.get(params_[k]); g.defined()) on_gradient(k, g);
    std::vector<std::string> missing;
    for (std::size_t k : trainable_)
      if (!ready_[k]) missing.push_back(fmt::format("'{}'", names_[k]));
    if (!missing.empty())
      throw Error(fmt::format("DistributedDataParallel::reduce_gradients: expected a gradient for every parameter "
                              "that requires grad, got none for {} on rank {}; construct it with "
                              "find_unused_parameters = true when parameters may go unused",
                              fmt::join(missing, ", "), group_.rank()));
    for (Bucket& b : buckets_) b.work->wait();
  } catch (...) {
    drain();
    reset_step();
    throw;
  }
  for (const Bucket& b : buckets_)
    for (std::size_t k : b.members) {
      const Tensor& p = params_[k];
      grads.insert(p.grad_id(), b.flat.narrow(0, place_[k].offset, p.numel()).view(p.shape()));
    }
  if (!rebuilt_) {
    // Rebuild the buckets in the order the gradients became ready, rank 0's
    // on every rank (one small broadcast, once), as PyTorch's Reducer.
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

// find_unused_parameters: which parameters got a gradient anywhere decides
// what each bucket holds; the buckets then reduce one after the other.
void DistributedDataParallel::reduce_unused_aware(GradientStore& grads) {
  std::vector<std::int32_t> local(trainable_.size());
  for (std::size_t i = 0; i < trainable_.size(); ++i) local[i] = grads.contains(params_[trainable_[i]]) ? 1 : 0;
  Tensor present = tensor(local);
  group_.all_reduce(present, Reduce::sum);
  const std::vector<std::int32_t> count = present.to_vector<std::int32_t>();
  std::vector<char> anywhere(params_.size(), 0);
  for (std::size_t i = 0; i < trainable_.size(); ++i) anywhere[trainable_[i]] = count[i] > 0;

  std::vector<Tensor> flats;
  std::vector<std::vector<std::size_t>> members;
  std::vector<std::shared_ptr<Work>> works;
  for (const Bucket& b : buckets_) {
    std::vector<Tensor> parts;
    std::vector<std::size_t> in;
    for (std::size_t k : b.members) {
      if (!anywhere[k]) continue;
      const Tensor& p = params_[k];
      Tensor g = grads.get(p);
      parts.push_back(g.defined() ? g.reshape({-1}) : zeros({p.numel()}, {.dtype = p.dtype(), .device = p.device()}));
      in.push_back(k);
    }
    if (parts.empty()) continue;
    // A new buffer: gradients may alias each other (add passes one tensor to both inputs).
    flats.push_back(parts.size() == 1 ? parts[0].clone() : cat(parts, 0));
    members.push_back(std::move(in));
    works.push_back(group_.all_reduce_async(flats.back(), Reduce::average));
  }
  wait_all(works);
  for (std::size_t i = 0; i < flats.size(); ++i) {
    std::int64_t offset = 0;
    for (std::size_t k : members[i]) {
      const Tensor& p = params_[k];
      grads.insert(p.grad_id(), flats[i].narrow(0, offset, p.numel()).view(p.shape()));
      offset += p.numel();
    }
  }
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
  reduce_gradients(grads);
  return grads;
}

}  // namespace rumus::distributed
