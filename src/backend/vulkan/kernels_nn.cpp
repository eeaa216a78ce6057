// Host side of the network kernels: conv lowering, pooling, softmax, layer
// norm, row gathers and scatters.
#include <algorithm>
#include <bit>
#include <cstring>

#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::ConvPush;
using push::IndexPush;
using push::PoolPush;
using push::LayerNormPush;
using push::SoftmaxPush;
constexpr std::uint32_t kLocal = 256;

void require_contiguous(const char* op, TensorArg t) {
  if (!t.layout->is_contiguous()) throw Error(std::string(op) + ": the Vulkan kernel needs contiguous operands");
}

// One workgroup per row (softmax, layer norm): rows along x, and along y past
// the 65535 workgroups one dimension allows.
void row_grid(std::int64_t rows, std::uint32_t& gx, std::uint32_t& gy) {
  gx = std::uint32_t(std::min<std::int64_t>(rows, 65535));
  gy = std::uint32_t((rows + gx - 1) / gx);
}

ConvPush conv_push(const Conv2dGeometry& g, TensorArg image, TensorArg cols, std::int64_t total) {
  ConvPush pc{std::uint32_t(g.batch), std::uint32_t(g.channels), std::uint32_t(g.height), std::uint32_t(g.width),
              std::uint32_t(g.kernel_h), std::uint32_t(g.kernel_w), std::uint32_t(g.stride_h),
              std::uint32_t(g.stride_w), std::int32_t(g.pad_h), std::int32_t(g.pad_w), std::uint32_t(g.dilation_h),
              std::uint32_t(g.dilation_w), std::uint32_t(g.out_h), std::uint32_t(g.out_w),
              std::int32_t(image.layout->offset), std::int32_t(cols.layout->offset), {}, {}, std::uint32_t(total)};
  for (int d = 0; d < 4; ++d) pc.in_stride[d] = std::int32_t(image.layout->strides[d]);
  for (int d = 0; d < 3; ++d) pc.cols_stride[d] = std::int32_t(cols.layout->strides[d]);
  return pc;
}

PoolPush pool_push(const Pool2dParams& p, std::int64_t total) {
  return {std::uint32_t(p.planes), std::uint32_t(p.height), std::uint32_t(p.width), std::uint32_t(p.out_h),
          std::uint32_t(p.out_w), std::uint32_t(p.kernel_h), std::uint32_t(p.kernel_w), std::uint32_t(p.stride_h),
          std::uint32_t(p.stride_w), std::int32_t(p.pad_h), std::int32_t(p.pad_w), std::uint32_t(p.dilation_h),
          std::uint32_t(p.dilation_w), p.count_include_pad ? 1u : 0u, 0, 0, 0, std::uint32_t(total)};
}

// Workgroup size for one row of `cols`: a power of two in [32, 256].
std::uint32_t row_group(std::int64_t cols) {
  return std::uint32_t(std::clamp<std::int64_t>(std::int64_t(std::bit_ceil(std::uint64_t(std::max<std::int64_t>(cols, 1)))), 32, 256));
}
}  // namespace

void VulkanBackend::im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) {
  const std::int64_t total = cols.layout->numel();
  if (total == 0) return;
  ConvPush pc = conv_push(g, in, cols, total);
  Operand ops[] = {{cols, true}, {in, false}};
  launch(shader_for("conv", in.dtype), {kLocal, 0, std::uint32_t(in.dtype)}, ops, &pc, sizeof pc, groups_for(total, kLocal));
}

void VulkanBackend::col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) {
  require_contiguous("col2im", out);
  const std::int64_t total = out.layout->numel();
  if (total == 0) return;
  ConvPush pc = conv_push(g, out, cols, total);
  Operand ops[] = {{out, true}, {cols, false}};
  launch(shader_for("conv", out.dtype), {kLocal, 1, std::uint32_t(out.dtype)}, ops, &pc, sizeof pc, groups_for(total, kLocal));
}

void VulkanBackend::pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) {
  require_contiguous("pool2d_forward", out);
  require_contiguous("pool2d_forward", in);
  const std::int64_t total = out.layout->numel();
  if (total == 0) return;
  const bool max = p.kind == PoolKind::max;
  PoolPush pc = pool_push(p, total);
  pc.off0 = std::int32_t(out.layout->offset);
  pc.off1 = std::int32_t(in.layout->offset);
  pc.off2 = max ? std::int32_t(indices.layout->offset) : 0;
  Operand ops[] = {{out, true}, {in, false}, {max ? indices : out, max}};
  launch(shader_for("pool", in.dtype), {kLocal, std::uint32_t(p.kind), 0, std::uint32_t(in.dtype)}, ops, &pc, sizeof pc,
         groups_for(total, kLocal));
}

void VulkanBackend::pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) {
  require_contiguous("pool2d_backward", grad_in);
  require_contiguous("pool2d_backward", grad_out);
  const std::int64_t total = grad_in.layout->numel();
  if (total == 0) return;
  const bool max = p.kind == PoolKind::max;
  PoolPush pc = pool_push(p, total);
  pc.off0 = std::int32_t(grad_in.layout->offset);
  pc.off1 = std::int32_t(grad_out.layout->offset);
  pc.off2 = max ? std::int32_t(indices.layout->offset) : 0;
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {max ? indices : grad_out, false}};
  launch(shader_for("pool", grad_in.dtype), {kLocal, std::uint32_t(p.kind), 1, std::uint32_t(grad_in.dtype)}, ops, &pc, sizeof pc,
         groups_for(total, kLocal));
}

void VulkanBackend::softmax_forward(TensorArg out, TensorArg in, bool log) {
  require_contiguous("softmax_forward", out);
  require_contiguous("softmax_forward", in);
  const std::int64_t cols = in.layout->shape.back(), rows = cols ? in.layout->numel() / cols : 0;
  if (rows == 0) return;
  SoftmaxPush pc{std::uint32_t(rows), std::uint32_t(cols), std::int32_t(out.layout->offset),
                 std::int32_t(in.layout->offset), 0};
  Operand ops[] = {{out, true}, {in, false}};
  std::uint32_t gx, gy;
  row_grid(rows, gx, gy);
  launch(shader_for("softmax", in.dtype), {row_group(cols), log, 0, std::uint32_t(in.dtype)}, ops, &pc, sizeof pc, gx, gy);
}

void VulkanBackend::softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) {
  require_contiguous("softmax_backward", grad_in);
  require_contiguous("softmax_backward", grad_out);
  require_contiguous("softmax_backward", out);
  const std::int64_t cols = out.layout->shape.back(), rows = cols ? out.layout->numel() / cols : 0;
  if (rows == 0) return;
  SoftmaxPush pc{std::uint32_t(rows), std::uint32_t(cols), std::int32_t(grad_in.layout->offset),
                 std::int32_t(grad_out.layout->offset), std::int32_t(out.layout->offset)};
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {out, false}};
  std::uint32_t gx, gy;
  row_grid(rows, gx, gy);
  launch(shader_for("softmax", out.dtype), {row_group(cols), log, 1, std::uint32_t(out.dtype)}, ops, &pc, sizeof pc, gx, gy);
}

namespace {
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
}  // namespace

// The build of layer_norm.comp for its per-row modes (0, 1): rows summed by
// subgroups where the device has subgroup arithmetic (f64 keeps the tree).
std::string VulkanBackend::layer_norm_rows_shader(DType dtype) const {
  return ctx_->subgroup_arithmetic && dtype != DType::f64 ? "layer_norm_sg" : shader_for("layer_norm", dtype);
}

void VulkanBackend::layer_norm_forward(TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                                       TensorArg bias, double eps) {
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
  launch(layer_norm_rows_shader(x.dtype),
         {layer_norm_row_group(d), 0, std::uint32_t(x.dtype), weight.storage != nullptr, bias.storage != nullptr}, ops, &pc,
         sizeof pc, gx, gy);
}

void VulkanBackend::layer_norm_backward(TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias,
                                        TensorArg grad_out, TensorArg x, TensorArg mean, TensorArg invstd,
                                        TensorArg weight) {
  for (TensorArg t : {grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight})
    if (t.storage) require_contiguous("layer_norm_backward", t);
  const std::int64_t d = x.layout->shape.back(), rows = d ? x.layout->numel() / d : 0;
  if (rows == 0) return;
  const std::string shader = shader_for("layer_norm", x.dtype);
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
    launch(layer_norm_rows_shader(x.dtype), {layer_norm_row_group(d), 1, dt, weight.storage != nullptr, 0}, ops, &px, sizeof px, gx, gy);
  }
  if (!grad_weight.storage && !grad_bias.storage) return;
  // Partial sums per block of rows, then the blocks summed in order.
  const std::int64_t blocks = (rows + pc.block - 1) / pc.block;
  Layout partial_layout = Layout::contiguous({blocks, 2, d});
  Storage partials(device(), std::size_t(blocks * 2 * d) * dtype_size(x.dtype));
  const TensorArg part{&partials, x.dtype, &partial_layout};
  const std::uint32_t column_groups = std::uint32_t((d + local - 1) / local);
  LayerNormPush pp = pc;
  pp.off0 = 0;
  Operand partial_ops[] = {{part, true}, {x, false}, {x, false}, {grad_out, false}, {mean, false}, {invstd, false}};
  launch(shader, {local, 2, dt, 0, 0}, partial_ops, &pp, sizeof pp, column_groups, std::uint32_t(blocks));
  LayerNormPush pf = pc;
  pf.off0 = grad_weight.storage ? std::uint32_t(grad_weight.layout->offset) : 0;
  pf.off1 = 0;
  pf.off3 = grad_bias.storage ? std::uint32_t(grad_bias.layout->offset) : 0;
  const TensorArg any_out = grad_weight.storage ? grad_weight : grad_bias;
  Operand final_ops[] = {{any_out, grad_weight.storage != nullptr}, {part, false}, {part, false},
                         {grad_bias.storage ? grad_bias : any_out, grad_bias.storage != nullptr}, {part, false},
                         {part, false}};
  // The final sums: 8 invocations a column, so local / 8 columns a workgroup.
  launch(shader, {local, 3, dt, grad_weight.storage != nullptr, grad_bias.storage != nullptr}, final_ops, &pf,
         sizeof pf, std::uint32_t((d + local / 8 - 1) / (local / 8)));
}

namespace {
IndexPush index_push(const char* op, TensorArg big, TensorArg small, TensorArg index) {
  require_contiguous(op, big);
  require_contiguous(op, small);
  require_contiguous(op, index);
  if (index.dtype != DType::i64) throw DTypeError(std::string(op) + ": the Vulkan kernel needs i64 indices");
  const Shape& b = big.layout->shape;
  const Shape& s = small.layout->shape;
  const Shape& i = index.layout->shape;
  if (b.size() != 3 || s.size() != 3 || i.size() != 2)
    throw Error(std::string(op) + ": the Vulkan kernel needs 3-D views and a 2-D index");
  return {std::uint32_t(b[0]), std::uint32_t(b[1]), std::uint32_t(s[1]), std::uint32_t(b[2]), std::uint32_t(i[0]),
          std::int32_t(big.layout->offset), std::int32_t(small.layout->offset), std::int32_t(index.layout->offset),
          std::uint32_t(small.layout->numel())};
}
}  // namespace

void VulkanBackend::index_select(TensorArg out, TensorArg src, TensorArg index) {
  IndexPush pc = index_push("index_select", src, out, index);
  if (pc.total == 0) return;
  Operand ops[] = {{out, true}, {src, false}, {index, false}, {index_fault_operand(), true}};
  launch("index_select", {kLocal, std::uint32_t(out.dtype), std::uint32_t(dtype_size(out.dtype))}, ops, &pc,
         sizeof pc, groups_for(pc.total, kLocal));
}

void VulkanBackend::index_add(TensorArg out, TensorArg index, TensorArg src) {
  IndexPush pc = index_push("index_add", out, src, index);
  if (pc.total == 0) return;
  Operand ops[] = {{out, true}, {src, false}, {index, false}, {index_fault_operand(), true}};
  // Without float atomics of the width: the variants that add by compare-and-swap.
  const std::string shader = out.dtype == DType::f64 ? (ctx_->float64_atomics ? "index_add_f64" : "index_add_f64cas")
                             : ctx_->float_atomics   ? "index_add"
                                                     : "index_add_cas";
  launch(shader, {kLocal}, ops, &pc, sizeof pc, groups_for(pc.total, kLocal));
}

}  // namespace rumus::vulkan
