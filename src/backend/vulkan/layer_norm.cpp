// Vulkan kernels of the layer-norm family (../layer_norm.hpp): host side of
// layer_norm.comp.
#include "../layer_norm.hpp"

#include <algorithm>

#include "rumus/core/error.hpp"
#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::LayerNormPush;
using Operand = VulkanBackend::Operand;

// Rows per block of the weight and bias gradients' partial sums: about 256
// blocks, so that the column sums spread over the device.
constexpr std::int64_t kLayerNormBlocks = 256;

LayerNormPush layer_norm_push(std::int64_t rows, std::int64_t d) {
  LayerNormPush pc{};
  pc.rows = std::uint32_t(rows);
  pc.d = std::uint32_t(d);
  pc.block = std::uint32_t(std::max<std::int64_t>(16, (rows + kLayerNormBlocks - 1) / kLayerNormBlocks));
  return pc;
}

// Invocations per row for layer_norm.comp's per-row modes: a quarter of
// row_group's, so each takes four or more columns (measured on an H200:
// char_lm's GPU time per 20 steps at context 1024, 320.1 -> 316.0 ms; 128:
// 147.6 -> 145.5; a half or an eighth: 316.8).
std::uint32_t layer_norm_row_group(std::int64_t d) { return std::max(32u, row_group(d) / 4); }

// The build of layer_norm.comp for its per-row modes (0, 1): rows summed by
// subgroups where the device has subgroup arithmetic (f64 keeps the tree).
ShaderId layer_norm_rows_shader(const VulkanBackend& vk, DType dtype) {
  return vk.context().subgroup_arithmetic && dtype != DType::f64 ? ShaderId::layer_norm_sg
                                                                 : shader_for(ShaderId::layer_norm, dtype);
}

void layer_norm_forward(Backend& be, TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                        TensorArg bias, double eps) {
  VulkanBackend& vk = device_of(be);
  for (TensorArg t : {out, mean, invstd, x, weight, bias})
    if (t.storage) require_contiguous("layer_norm_forward", t);
  const std::int64_t d = x.layout->shape.back(), rows = d ? x.layout->numel() / d : 0;
  if (rows == 0) return;
  LayerNormPush pc = layer_norm_push(rows, d);
  pc.off0 = std::uint32_t(out.layout->offset);
  pc.off1 = std::uint32_t(x.layout->offset);
  pc.off2 = weight.storage ? std::uint32_t(weight.layout->offset) : 0;
  pc.off3 = bias.storage ? std::uint32_t(bias.layout->offset) : 0;
  pc.off4 = std::uint32_t(mean.layout->offset);
  pc.off5 = std::uint32_t(invstd.layout->offset);
  if (x.dtype == DType::f64) {
    push::split_double(eps, pc.eps_lo, pc.eps_hi);
  } else {
    const float e = float(eps);
    std::memcpy(&pc.eps_lo, &e, 4);
  }
  Operand ops[] = {{out, true}, {x, false}, {weight.storage ? weight : x, false}, {bias.storage ? bias : x, false},
                   {mean, true}, {invstd, true}};
  std::uint32_t gx, gy;
  row_grid(rows, gx, gy);
  vk.launch(layer_norm_rows_shader(vk, x.dtype),
            {layer_norm_row_group(d), 0, std::uint32_t(x.dtype), weight.storage != nullptr, bias.storage != nullptr},
            ops, &pc, sizeof pc, gx, gy);
}

void layer_norm_backward(Backend& be, TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias,
                         TensorArg grad_out, TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight) {
  VulkanBackend& vk = device_of(be);
  for (TensorArg t : {grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight})
    if (t.storage) require_contiguous("layer_norm_backward", t);
  const std::int64_t d = x.layout->shape.back(), rows = d ? x.layout->numel() / d : 0;
  if (rows == 0) return;
  const ShaderId shader = shader_for(ShaderId::layer_norm, x.dtype);
  const std::uint32_t local = row_group(d), dt = std::uint32_t(x.dtype);
  LayerNormPush pc = layer_norm_push(rows, d);
  pc.off1 = std::uint32_t(x.layout->offset);
  pc.off2 = weight.storage ? std::uint32_t(weight.layout->offset) : 0;
  pc.off3 = std::uint32_t(grad_out.layout->offset);
  pc.off4 = std::uint32_t(mean.layout->offset);
  pc.off5 = std::uint32_t(invstd.layout->offset);
  if (grad_x.storage) {
    LayerNormPush px = pc;
    px.off0 = std::uint32_t(grad_x.layout->offset);
    Operand ops[] = {{grad_x, true}, {x, false}, {weight.storage ? weight : x, false}, {grad_out, false},
                     {mean, false}, {invstd, false}};
    std::uint32_t gx, gy;
    row_grid(rows, gx, gy);
    vk.launch(layer_norm_rows_shader(vk, x.dtype), {layer_norm_row_group(d), 1, dt, weight.storage != nullptr, 0}, ops,
              &px, sizeof px, gx, gy);
  }
  if (!grad_weight.storage && !grad_bias.storage) return;
  // Partial sums per block of rows, then the blocks summed in order.
  const std::int64_t blocks = (rows + pc.block - 1) / pc.block;
  Layout partial_layout = Layout::contiguous({blocks, 2, d});
  Storage partials(vk.device(), std::size_t(blocks * 2 * d) * dtype_size(x.dtype));
  const TensorArg part{&partials, x.dtype, &partial_layout};
  const std::uint32_t column_groups = std::uint32_t((d + local - 1) / local);
  LayerNormPush pp = pc;
  pp.off0 = 0;
  Operand partial_ops[] = {{part, true}, {x, false}, {x, false}, {grad_out, false}, {mean, false}, {invstd, false}};
  vk.launch(shader, {local, 2, dt, 0, 0}, partial_ops, &pp, sizeof pp, column_groups, std::uint32_t(blocks));
  LayerNormPush pf = pc;
  pf.off0 = grad_weight.storage ? std::uint32_t(grad_weight.layout->offset) : 0;
  pf.off1 = 0;
  pf.off3 = grad_bias.storage ? std::uint32_t(grad_bias.layout->offset) : 0;
  const TensorArg any_out = grad_weight.storage ? grad_weight : grad_bias;
  Operand final_ops[] = {{any_out, grad_weight.storage != nullptr}, {part, false}, {part, false},
                         {grad_bias.storage ? grad_bias : any_out, grad_bias.storage != nullptr}, {part, false},
                         {part, false}};
  // The final sums: 8 invocations a column, so local / 8 columns a workgroup.
  vk.launch(shader, {local, 3, dt, grad_weight.storage != nullptr, grad_bias.storage != nullptr}, final_ops, &pf,
            sizeof pf, std::uint32_t((d + local / 8 - 1) / (local / 8)));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, layer_norm) {
  register_kernel<LayerNormForwardKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f64},
                                          &vulkan::layer_norm_forward, &runs_f64);
  register_kernel<LayerNormBackwardKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f64},
                                           &vulkan::layer_norm_backward, &runs_f64);
}

}  // namespace rumus
