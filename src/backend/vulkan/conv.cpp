// Host side of conv_igemm.comp: direct f32 convolutions (forward with the
// bias, backward data, backward weight with the bias gradient) as implicit
// GEMMs, one dispatch per call (plus a slice sum when the weight gradient
// splits its reduction), or through conv_direct.cpp, conv_winograd.cpp and
// conv_columns.cpp where those are faster.
// 16-bit convolutions (f16 and bf16, as autocast makes them) take Winograd or
// the columns, whose longer products run on the cooperative-matrix units; the
// grouped ones, which neither takes, run the f32 kernels on widened copies.
#include <algorithm>
#include <limits>
#include <optional>

#include "rumus/core/error.hpp"
#include "../conv.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::ConvIgemmPush;
using Operand = VulkanBackend::Operand;

enum Mode : std::uint32_t { kForward = 0, kBackwardData = 1, kBackwardWeight = 2 };

// Every operand of one call shares the dtype `dt` (f32, f16 or bf16), is
// contiguous and fits 32-bit indices.
void require_dense(const char* op, TensorArg t, DType dt, const char* what) {
  if (t.dtype != dt)
    throw DTypeError(std::string(op) + ": the Vulkan kernel takes operands of one dtype, " +
                     std::string(dtype_name(dt)) + ", got " + what + " of " + std::string(dtype_name(t.dtype)));
  if (!t.layout->is_contiguous())
    throw Error(std::string(op) + ": the Vulkan kernel needs a contiguous " + what);
  // The shader indexes with 32-bit integers.
  if (t.layout->offset + t.layout->numel() > std::int64_t(std::numeric_limits<std::uint32_t>::max()))
    throw ShapeError(std::string(op) + ": " + what + " of " + std::to_string(t.layout->numel()) +
                     " elements is past the Vulkan kernel's 32-bit indexing");
}

// An f32 copy of a 16-bit operand for conv_igemm.comp (f32 only), which
// grouped 16-bit convolutions run on; write_back rounds a result into the operand.
class Widened {
 public:
  Widened(VulkanBackend& vk, TensorArg narrow, bool read)
      : vk_(vk), narrow_(narrow), layout_(Layout::contiguous(narrow.layout->shape)),
        storage_(vk.device(), std::size_t(std::max<std::int64_t>(1, layout_.numel())) * 4) {
    if (read) copy(vk, arg(), narrow);
  }
  TensorArg arg() { return {&storage_, DType::f32, &layout_}; }
  void write_back() { copy(vk_, narrow_, arg()); }

 private:
  VulkanBackend& vk_;
  TensorArg narrow_;
  Layout layout_;
  Storage storage_;
};

ConvIgemmPush igemm_push(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups) {
  ConvIgemmPush pc{};
  pc.batch = std::uint32_t(g.batch);
  pc.channels = std::uint32_t(g.channels);
  pc.height = std::uint32_t(g.height);
  pc.width = std::uint32_t(g.width);
  pc.kernel_h = std::uint32_t(g.kernel_h);
  pc.kernel_w = std::uint32_t(g.kernel_w);
  pc.stride_h = std::uint32_t(g.stride_h);
  pc.stride_w = std::uint32_t(g.stride_w);
  pc.pad_h = std::int32_t(g.pad_h);
  pc.pad_w = std::int32_t(g.pad_w);
  pc.dilation_h = std::uint32_t(g.dilation_h);
  pc.dilation_w = std::uint32_t(g.dilation_w);
  pc.out_h = std::uint32_t(g.out_h);
  pc.out_w = std::uint32_t(g.out_w);
  pc.out_channels = std::uint32_t(oc);
  pc.groups = std::uint32_t(groups);
  pc.splits = 1;
  return pc;
}

// Tile (bm x bn, 8 x 8 per invocation) as gemm picks it: 128 on a side unless
// the matrix is thinner, then smaller tiles while the grid stays under two
// waves of a big GPU.
struct Tile {
  std::uint32_t bm, bn, bk;
  std::int64_t count;  // tiles over every group
};
Tile choose_tile(std::int64_t m, std::int64_t n, std::int64_t groups) {
  auto count = [&](std::int64_t bm, std::int64_t bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn) * groups; };
  std::uint32_t bm = m <= 64 ? 64 : 128, bn = n <= 64 ? 64 : 128;
  if (count(bm, bn) < 264 && bm == 128) bm = 64;
  if (count(bm, bn) < 264 && bn == 128) bn = 64;
  return {bm, bn, bm == 64 && bn == 64 ? 16u : 8u, count(bm, bn)};
}

std::vector<std::uint32_t> igemm_spec(const Tile& t, Mode mode, bool has_bias, const Conv2dGeometry& g,
                                      bool relu = false) {
  const bool unit_stride = g.stride_h == 1 && g.stride_w == 1;
  return {(t.bm / 8) * (t.bn / 8), t.bm, t.bn, t.bk, std::uint32_t(mode), has_bias ? 1u : 0u, unit_stride ? 1u : 0u,
          relu ? 1u : 0u};
}

std::uint32_t tiles_along(std::int64_t extent, std::uint32_t tile) { return std::uint32_t((extent + tile - 1) / tile); }

// Vulkan promises 65535 workgroups per grid dimension. Column tiles (batch x
// positions, often more) go out in several dispatches; row tiles and groups
// times splits must fit.
constexpr std::uint32_t kMaxGroups = 65535;

void check_grid(const char* op, std::uint32_t gy, std::uint32_t gz) {
  if (gy > kMaxGroups || gz > kMaxGroups)
    throw ShapeError(std::string(op) + ": " + std::to_string(gy) + " row tiles x " + std::to_string(gz) +
                     " groups exceed the Vulkan grid's 65535 workgroups per dimension");
}

template <class Dispatch>
void over_column_tiles(ConvIgemmPush& pc, std::uint32_t tiles_n, Dispatch&& dispatch) {
  for (std::uint32_t t0 = 0; t0 < tiles_n; t0 += kMaxGroups) {
    pc.tile_n0 = t0;
    dispatch(std::min(kMaxGroups, tiles_n - t0));
  }
}

void conv2d_forward(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, TensorArg out,
                    TensorArg in, TensorArg weight, TensorArg bias, bool relu) {
  VulkanBackend& vk = device_of(be);
  const char* op = "conv2d_forward";
  require_dense(op, out, out.dtype, "output");
  require_dense(op, in, out.dtype, "input");
  require_dense(op, weight, out.dtype, "weight");
  const bool has_bias = bias.storage != nullptr;
  if (has_bias) require_dense(op, bias, out.dtype, "bias");
  ConvIgemmPush pc = igemm_push(g, oc, groups);
  pc.M = std::uint32_t(oc / groups);
  pc.N = std::uint32_t(g.batch * g.out_h * g.out_w);
  pc.K = std::uint32_t(g.channels / groups * g.kernel_h * g.kernel_w);
  pc.k_chunk = pc.K;
  pc.off0 = std::uint32_t(out.layout->offset);
  pc.off1 = std::uint32_t(in.layout->offset);
  pc.off2 = std::uint32_t(weight.layout->offset);
  pc.off3 = has_bias ? std::uint32_t(bias.layout->offset) : 0;
  if (pc.M == 0 || pc.N == 0) return;
  if (conv_takes_direct(g, groups, out.dtype)) return conv2d_forward_direct(vk, g, oc, pc, out, in, weight, bias, relu);
  if (conv_takes_winograd(ConvPass::forward, g, groups))
    return conv2d_forward_winograd(vk, g, oc, out, in, weight, bias, relu);
  const bool narrow = is_16bit_float(out.dtype);
  if (narrow ? groups == 1 : conv_takes_columns(ConvPass::forward, g, oc, groups))
    return conv2d_forward_columns(vk, g, oc, out, in, weight, bias, relu);
  if (narrow) {
    Widened o(vk, out, false), x(vk, in, true), w(vk, weight, true);
    std::optional<Widened> b;
    if (has_bias) b.emplace(vk, bias, true);
    conv2d_forward(be, g, oc, groups, o.arg(), x.arg(), w.arg(), b ? b->arg() : bias, relu);
    return o.write_back();
  }
  const Tile t = choose_tile(pc.M, pc.N, groups);
  Operand ops[] = {{out, true}, {in, false}, {weight, false}, {has_bias ? bias : weight, false}};
  // conv2d_relu: the ReLU is applied in the kernel's epilogue, with the bias.
  const auto spec = igemm_spec(t, kForward, has_bias, g, relu);
  const std::uint32_t gy = tiles_along(pc.M, t.bm), gz = std::uint32_t(groups);
  check_grid(op, gy, gz);
  over_column_tiles(pc, tiles_along(pc.N, t.bn), [&](std::uint32_t gx) {
    vk.launch(ShaderId::conv_igemm, spec, ops, &pc, sizeof pc, gx, gy, gz);
  });
}

void conv2d_backward_data(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups,
                          TensorArg grad_in, TensorArg grad_out, TensorArg weight) {
  VulkanBackend& vk = device_of(be);
  const char* op = "conv2d_backward_data";
  require_dense(op, grad_in, grad_in.dtype, "input gradient");
  require_dense(op, grad_out, grad_in.dtype, "output gradient");
  require_dense(op, weight, grad_in.dtype, "weight");
  ConvIgemmPush pc = igemm_push(g, oc, groups);
  pc.M = std::uint32_t(g.channels / groups);
  pc.N = std::uint32_t(g.batch * g.height * g.width);
  pc.K = std::uint32_t(oc / groups * g.kernel_h * g.kernel_w);
  pc.k_chunk = pc.K;
  pc.off0 = std::uint32_t(grad_in.layout->offset);
  pc.off1 = std::uint32_t(grad_out.layout->offset);
  pc.off2 = std::uint32_t(weight.layout->offset);
  if (pc.M == 0 || pc.N == 0) return;
  if (conv_takes_winograd(ConvPass::backward_data, g, groups))
    return conv2d_backward_data_winograd(vk, g, oc, grad_in, grad_out, weight);
  const bool narrow = is_16bit_float(grad_in.dtype);
  if (narrow ? groups == 1 : conv_takes_columns(ConvPass::backward_data, g, oc, groups))
    return conv2d_backward_data_columns(vk, g, oc, grad_in, grad_out, weight);
  if (narrow) {
    Widened gi(vk, grad_in, false), go(vk, grad_out, true), w(vk, weight, true);
    conv2d_backward_data(be, g, oc, groups, gi.arg(), go.arg(), w.arg());
    return gi.write_back();
  }
  const Tile t = choose_tile(pc.M, pc.N, groups);
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {weight, false}};
  const auto spec = igemm_spec(t, kBackwardData, false, g);
  const std::uint32_t gy = tiles_along(pc.M, t.bm), gz = std::uint32_t(groups);
  check_grid(op, gy, gz);
  over_column_tiles(pc, tiles_along(pc.N, t.bn), [&](std::uint32_t gx) {
    vk.launch(ShaderId::conv_igemm, spec, ops, &pc, sizeof pc, gx, gy, gz);
  });
}

void conv2d_backward_weight(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups,
                            TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in) {
  VulkanBackend& vk = device_of(be);
  const char* op = "conv2d_backward_weight";
  require_dense(op, grad_weight, grad_weight.dtype, "weight gradient");
  require_dense(op, grad_out, grad_weight.dtype, "output gradient");
  require_dense(op, in, grad_weight.dtype, "input");
  const bool has_bias = grad_bias.storage != nullptr;
  if (has_bias) require_dense(op, grad_bias, grad_weight.dtype, "bias gradient");
  ConvIgemmPush pc = igemm_push(g, oc, groups);
  const std::int64_t m = oc / groups, n = g.channels / groups * g.kernel_h * g.kernel_w,
                     k = g.batch * g.out_h * g.out_w;
  pc.M = std::uint32_t(m);
  pc.N = std::uint32_t(n);
  pc.K = std::uint32_t(k);
  pc.k_chunk = pc.K;
  pc.off1 = std::uint32_t(in.layout->offset);
  pc.off2 = std::uint32_t(grad_out.layout->offset);
  if (m == 0 || n == 0) return;
  if (conv_takes_direct(g, groups, grad_weight.dtype))
    return conv2d_backward_weight_direct(vk, g, oc, pc, grad_weight, grad_bias, grad_out, in);
  if (conv_takes_winograd(ConvPass::backward_weight, g, groups))
    return conv2d_backward_weight_winograd(vk, g, oc, grad_weight, grad_bias, grad_out, in);
  const bool narrow = is_16bit_float(grad_weight.dtype);
  if (narrow ? groups == 1 : conv_takes_columns(ConvPass::backward_weight, g, oc, groups))
    return conv2d_backward_weight_columns(vk, g, oc, grad_weight, grad_bias, grad_out, in);
  if (narrow) {
    Widened gw(vk, grad_weight, false), go(vk, grad_out, true), x(vk, in, true);
    std::optional<Widened> gb;
    if (has_bias) gb.emplace(vk, grad_bias, false);
    conv2d_backward_weight(be, g, oc, groups, gw.arg(), gb ? gb->arg() : grad_bias, go.arg(), x.arg());
    gw.write_back();
    if (gb) gb->write_back();
    return;
  }
  const Tile t = choose_tile(m, n, groups);
  // Few output tiles but a long reduction (the usual case: a small weight
  // summed over batch and positions): split it so the whole GPU works, then
  // add the slices, as gemm does.
  std::int64_t splits = 1;
  if (t.count < 132 && k >= 1024) {
    // About 264 workgroups; about 1,056 for a reduction of 65,536 or more (a
    // first layer's weight summed over the batch's positions: the MNIST CNN's
    // conv1 at batch 512 sums 346,112 in one tile), each slice still 256 or more.
    const std::int64_t target = k >= 65536 ? 1056 : 264;
    const std::int64_t want = std::min<std::int64_t>((target + t.count - 1) / t.count, k / 256);
    const std::int64_t chunk = ((k + want - 1) / want + t.bk - 1) / t.bk * t.bk;
    splits = (k + chunk - 1) / chunk;
    pc.k_chunk = std::uint32_t(chunk);
  }
  // llvmpipe (lavapipe) stops a loop after 65535 iterations: keep each
  // workgroup's reduction well under that many slices.
  const std::int64_t max_chunk = std::int64_t(32768) * t.bk;
  if (pc.k_chunk > max_chunk) {
    pc.k_chunk = std::uint32_t(max_chunk);
    splits = (k + max_chunk - 1) / max_chunk;
  }
  const std::uint32_t tiles_n = tiles_along(n, t.bn), gy = tiles_along(m, t.bm), gz = std::uint32_t(groups * splits);
  check_grid(op, gy, gz);
  const auto spec = igemm_spec(t, kBackwardWeight, has_bias, g);
  if (splits == 1) {
    pc.off0 = std::uint32_t(grad_weight.layout->offset);
    pc.off3 = has_bias ? std::uint32_t(grad_bias.layout->offset) : 0;
    Operand ops[] = {{grad_weight, true}, {in, false}, {grad_out, false}, {has_bias ? grad_bias : grad_weight, has_bias}};
    over_column_tiles(pc, tiles_n, [&](std::uint32_t gx) {
      vk.launch(ShaderId::conv_igemm, spec, ops, &pc, sizeof pc, gx, gy, gz);
    });
    return;
  }
  // Slices [groups, splits, OCg, Cg*KK] and [groups, splits, OCg], summed over splits.
  pc.splits = std::uint32_t(splits);
  Layout w_parts_layout = Layout::contiguous({groups, splits, m * n});
  Storage w_parts(vk.device(), std::size_t(groups * splits * m * n) * 4);
  TensorArg w_parts_arg{&w_parts, DType::f32, &w_parts_layout};
  Layout b_parts_layout = Layout::contiguous({groups, splits, m});
  std::optional<Storage> b_parts;
  if (has_bias) b_parts.emplace(vk.device(), std::size_t(groups * splits * m) * 4);
  TensorArg b_parts_arg{has_bias ? &*b_parts : &w_parts, DType::f32, &b_parts_layout};
  Operand ops[] = {{w_parts_arg, true}, {in, false}, {grad_out, false}, {b_parts_arg, has_bias}};
  over_column_tiles(pc, tiles_n, [&](std::uint32_t gx) {
    vk.launch(ShaderId::conv_igemm, spec, ops, &pc, sizeof pc, gx, gy, gz);
  });
  Layout w_layout{{groups, 1, m * n}, {m * n, 0, 1}, grad_weight.layout->offset};
  reduce(vk, ReduceOp::sum, TensorArg{grad_weight.storage, DType::f32, &w_layout}, w_parts_arg);
  if (has_bias) {
    Layout b_layout{{groups, 1, m}, {m, 0, 1}, grad_bias.layout->offset};
    reduce(vk, ReduceOp::sum, TensorArg{grad_bias.storage, DType::f32, &b_layout}, b_parts_arg);
  }
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, conv) {
  const DTypeSet dtypes{DType::f32, DType::f16, DType::bf16};
  register_kernel<Conv2dForwardKernel>(Device::Kind::vulkan, dtypes, &vulkan::conv2d_forward);
  register_kernel<Conv2dBackwardDataKernel>(Device::Kind::vulkan, dtypes, &vulkan::conv2d_backward_data);
  register_kernel<Conv2dBackwardWeightKernel>(Device::Kind::vulkan, dtypes, &vulkan::conv2d_backward_weight);
}

}  // namespace rumus
