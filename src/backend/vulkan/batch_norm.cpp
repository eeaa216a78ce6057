// Vulkan kernels of the batch-norm family (../batch_norm.hpp): host side of
// batch_norm.comp. Each reduction is two launches: a workgroup per chunk of a
// channel's values, then an invocation per channel merging its chunks.
// 16-bit x (f16, bf16) comes with f32 [C] operands, as batch_norm2d makes them.
#include "../batch_norm.hpp"

#include <algorithm>
#include <cstring>

#include "rumus/core/error.hpp"
#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::BatchNormPush;
using Operand = VulkanBackend::Operand;

constexpr std::uint32_t kLocal = 256;  // batch_norm.comp's workgroup
// A chunk holds at least kMinChunk values (16 an invocation), and the chunks of
// all channels number about kTargetGroups: enough to fill a large GPU when a
// few channels hold half a million values each.
constexpr std::int64_t kMinChunk = 4096, kTargetGroups = 2048;

BatchNormPush batch_norm_push(TensorArg x, std::initializer_list<TensorArg> operands) {
  BatchNormPush pc{};
  const std::int64_t n = x.layout->shape[0], c = x.layout->shape[1], hw = x.layout->shape[2], m = n * hw;
  pc.n = std::uint32_t(n);
  pc.c = std::uint32_t(c);
  pc.hw = std::uint32_t(hw);
  std::int64_t parts = std::clamp<std::int64_t>(
      std::min((m + kMinChunk - 1) / kMinChunk, (kTargetGroups + c - 1) / std::max<std::int64_t>(c, 1)), 1, 65535);
  const std::int64_t chunk = (m + parts - 1) / parts;
  parts = (m + chunk - 1) / chunk;  // no empty chunk
  pc.parts = std::uint32_t(parts);
  pc.chunk = std::uint32_t(chunk);
  int k = 0;
  for (TensorArg t : operands) pc.off[k++] = t.storage ? std::uint32_t(t.layout->offset) : 0;
  return pc;
}

void set_scalar(double v, DType dtype, std::uint32_t& lo, std::uint32_t& hi) {
  if (dtype == DType::f64) return push::split_double(v, lo, hi);
  const float f = float(v);
  std::memcpy(&lo, &f, 4);
}

// The dtype of the [C] operands and of the partial sums: f32 for 16-bit x.
DType channel_dtype(DType x) { return is_16bit_float(x) ? DType::f32 : x; }

// `per_channel`: the [C] operands, of channel_dtype(x.dtype).
void check(const char* op, TensorArg x, std::initializer_list<TensorArg> operands,
           std::initializer_list<TensorArg> per_channel) {
  for (TensorArg t : operands)
    if (t.storage) require_contiguous(op, t);
  for (TensorArg t : per_channel) {
    if (!t.storage) continue;
    require_contiguous(op, t);
    if (t.dtype != channel_dtype(x.dtype))
      throw DTypeError(std::string(op) + ": the Vulkan kernel takes " + std::string(dtype_name(x.dtype)) +
                       " input with per-channel operands of " + std::string(dtype_name(channel_dtype(x.dtype))) +
                       ", got " + std::string(dtype_name(t.dtype)));
  }
  if (x.layout->shape[1] > 65535) throw Error(std::string(op) + ": the Vulkan kernel takes at most 65535 channels");
}

// Values per invocation of the per-element passes (batch_norm.comp's VEC):
// four where a channel's rows hold a multiple of four, so they share one.
std::uint32_t values_per_invocation(TensorArg x) { return x.layout->shape[2] % 4 == 0 ? 4u : 1u; }

// The [c, parts, 2] partial sums of a reduction.
Storage partials(VulkanBackend& vk, const BatchNormPush& pc, DType dtype) {
  return Storage(vk.device(), std::size_t(pc.c) * pc.parts * 2 * dtype_size(dtype));
}

void batch_norm_stats(Backend& be, TensorArg mean, TensorArg invstd, TensorArg running_mean, TensorArg running_var,
                      TensorArg x, double eps, double momentum) {
  VulkanBackend& vk = device_of(be);
  check("batch_norm_stats", x, {x}, {mean, invstd, running_mean, running_var});
  if (x.layout->numel() == 0) return;
  const bool running = running_mean.storage != nullptr;
  const ShaderId shader = shader_for(ShaderId::batch_norm, x.dtype);
  const std::uint32_t dt = std::uint32_t(x.dtype), dtc = std::uint32_t(channel_dtype(x.dtype));
  BatchNormPush pc = batch_norm_push(x, {{}, x, mean, invstd, running_mean, running_var});
  set_scalar(eps, x.dtype, pc.eps_lo, pc.eps_hi);
  set_scalar(momentum, x.dtype, pc.momentum_lo, pc.momentum_hi);
  Storage part_storage = partials(vk, pc, channel_dtype(x.dtype));
  const Layout part_layout = Layout::contiguous({std::int64_t(pc.c), std::int64_t(pc.parts), 2});
  const TensorArg part{&part_storage, channel_dtype(x.dtype), &part_layout};
  Operand chunk_ops[] = {{part, true}, {x, false}, {x, false}, {x, false},
                         {x, false},   {x, false}, {x, false}, {x, false}};
  vk.launch(shader, {0u, dt, 0u, 0u, dtc}, chunk_ops, &pc, sizeof pc, pc.parts, pc.c);
  Operand merge_ops[] = {{part, false},
                         {x, false},
                         {mean, true},
                         {invstd, true},
                         {running ? running_mean : x, running},
                         {running ? running_var : x, running},
                         {x, false},
                         {x, false}};
  vk.launch(shader, {1u, dt, 0u, running ? 1u : 0u, dtc}, merge_ops, &pc, sizeof pc, groups_for(pc.c, kLocal));
}

void batch_norm_forward(Backend& be, TensorArg out, TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight,
                        TensorArg bias) {
  VulkanBackend& vk = device_of(be);
  check("batch_norm_forward", x, {out, x}, {mean, invstd, weight, bias});
  const std::int64_t total = x.layout->numel();
  if (total == 0) return;
  const BatchNormPush pc = batch_norm_push(x, {out, x, mean, invstd, weight, bias});
  Operand ops[] = {{out, true},    {x, false}, {mean, false}, {invstd, false}, {weight.storage ? weight : x, false},
                   {bias.storage ? bias : x, false}, {x, false}, {x, false}};
  const std::uint32_t vec = values_per_invocation(x);
  vk.launch(shader_for(ShaderId::batch_norm, x.dtype),
            {2u, std::uint32_t(x.dtype), weight.storage != nullptr, bias.storage != nullptr,
             std::uint32_t(channel_dtype(x.dtype)), vec},
            ops, &pc, sizeof pc, groups_for(total / vec, kLocal));
}

void batch_norm_backward_reduce(Backend& be, TensorArg sum_dy, TensorArg sum_dy_xhat, TensorArg grad_out, TensorArg x,
                                TensorArg mean, TensorArg invstd) {
  VulkanBackend& vk = device_of(be);
  check("batch_norm_backward_reduce", x, {grad_out, x}, {sum_dy, sum_dy_xhat, mean, invstd});
  if (grad_out.dtype != x.dtype)
    throw DTypeError("batch_norm_backward_reduce: grad_out dtype " + std::string(dtype_name(grad_out.dtype)) +
                     " differs from input dtype " + std::string(dtype_name(x.dtype)));
  if (x.layout->numel() == 0) return;
  const ShaderId shader = shader_for(ShaderId::batch_norm, x.dtype);
  const std::uint32_t dt = std::uint32_t(x.dtype), dtc = std::uint32_t(channel_dtype(x.dtype));
  const BatchNormPush pc = batch_norm_push(x, {{}, x, grad_out, mean});
  Storage part_storage = partials(vk, pc, channel_dtype(x.dtype));
  const Layout part_layout = Layout::contiguous({std::int64_t(pc.c), std::int64_t(pc.parts), 2});
  const TensorArg part{&part_storage, channel_dtype(x.dtype), &part_layout};
  Operand chunk_ops[] = {{part, true}, {x, false}, {grad_out, false}, {mean, false},
                         {x, false},   {x, false}, {x, false},        {x, false}};
  vk.launch(shader, {3u, dt, 0u, 0u, dtc}, chunk_ops, &pc, sizeof pc, pc.parts, pc.c);
  BatchNormPush pm = batch_norm_push(x, {{}, sum_dy, sum_dy_xhat, invstd});
  Operand merge_ops[] = {{part, false}, {sum_dy, true}, {sum_dy_xhat, true}, {invstd, false},
                         {x, false},    {x, false},     {x, false},          {x, false}};
  vk.launch(shader, {4u, dt, 0u, 0u, dtc}, merge_ops, &pm, sizeof pm, groups_for(pc.c, kLocal));
}

void batch_norm_backward(Backend& be, TensorArg grad_x, TensorArg grad_out, TensorArg x, TensorArg mean,
                         TensorArg invstd, TensorArg weight, TensorArg sum_dy, TensorArg sum_dy_xhat) {
  VulkanBackend& vk = device_of(be);
  check("batch_norm_backward", x, {grad_x, grad_out, x}, {mean, invstd, weight, sum_dy, sum_dy_xhat});
  const std::int64_t total = x.layout->numel();
  if (total == 0) return;
  const BatchNormPush pc = batch_norm_push(x, {grad_x, x, grad_out, mean, invstd, weight, sum_dy, sum_dy_xhat});
  Operand ops[] = {{grad_x, true},   {x, false},
                   {grad_out, false}, {mean, false},
                   {invstd, false},   {weight.storage ? weight : x, false},
                   {sum_dy, false},   {sum_dy_xhat, false}};
  const std::uint32_t vec = values_per_invocation(x);
  vk.launch(shader_for(ShaderId::batch_norm, x.dtype),
            {5u, std::uint32_t(x.dtype), weight.storage != nullptr, 0u, std::uint32_t(channel_dtype(x.dtype)), vec},
            ops, &pc, sizeof pc, groups_for(total / vec, kLocal));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, batch_norm) {
  const DTypeSet dtypes{DType::f32, DType::f64, DType::f16, DType::bf16};
  register_kernel<BatchNormStatsKernel>(Device::Kind::vulkan, dtypes, &vulkan::batch_norm_stats, &runs_f64);
  register_kernel<BatchNormForwardKernel>(Device::Kind::vulkan, dtypes, &vulkan::batch_norm_forward, &runs_f64);
  register_kernel<BatchNormBackwardReduceKernel>(Device::Kind::vulkan, dtypes, &vulkan::batch_norm_backward_reduce,
                                                 &runs_f64);
  register_kernel<BatchNormBackwardKernel>(Device::Kind::vulkan, dtypes, &vulkan::batch_norm_backward, &runs_f64);
}

}  // namespace rumus
