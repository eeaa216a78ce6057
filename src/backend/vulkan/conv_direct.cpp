// Host side of conv_direct.comp: f32 convolutions whose reduction is tiny
// (C x KH x KW up to 32, under 8 channels, one group: a network's first
// layer), forward and weight gradient. conv_igemm.comp's 64 x 64 tiles were
// mostly empty there: the MNIST CNN's conv1 (1 -> 32 channels, 3 x 3) at
// batch 512 spent 122 us a step in its forward and 188 us in its weight
// gradient on an H100, for 44 MB written and read; here 55 and 81 us.
#include <algorithm>
#include <bit>
#include <optional>

#include "../conv.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kForward = 0, kBackwardWeight = 2;
constexpr std::int64_t kMaxReduction = 32;  // conv_direct.comp keeps a window's inputs in registers
constexpr std::int64_t kBlock = 64;         // positions a weight-gradient workgroup stages at a time

std::int64_t reduction(const Conv2dGeometry& g) { return g.channels * g.kernel_h * g.kernel_w; }

// Output channels per workgroup: the least of 8, 16, 32 and 64 that holds them all.
std::uint32_t channel_block(std::int64_t oc) {
  return std::uint32_t(std::clamp<std::uint64_t>(std::bit_ceil(std::uint64_t(oc)), 8, 64));
}

std::vector<std::uint32_t> spec(std::uint32_t mode, const Conv2dGeometry& g, std::int64_t oc, bool has_bias,
                                bool relu) {
  return {mode,           std::uint32_t(reduction(g)), std::uint32_t(g.kernel_h), std::uint32_t(g.kernel_w),
          has_bias ? 1u : 0u, relu ? 1u : 0u,          channel_block(oc)};
}

}  // namespace

std::int64_t& conv_direct_max_groups() {
  static std::int64_t groups = 65535;
  return groups;
}

bool conv_takes_direct(const Conv2dGeometry& g, std::int64_t groups, DType dtype) {
  // Only where the route is chosen per shape: a forced route takes every shape it can.
  const ConvRoute route = conv_route_override();
  if (route != ConvRoute::automatic && route != ConvRoute::winograd_no_weight) return false;
  return dtype == DType::f32 && groups == 1 && g.channels < 8 && reduction(g) <= kMaxReduction;
}

void conv2d_forward_direct(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, push::ConvIgemmPush pc,
                           TensorArg out, TensorArg in, TensorArg weight, TensorArg bias, bool relu) {
  const bool has_bias = bias.storage != nullptr;
  Operand ops[] = {{out, true}, {in, false}, {weight, false}, {has_bias ? bias : weight, false}};
  const auto s = spec(kForward, g, oc, has_bias, relu);
  const std::uint32_t blocks = std::uint32_t((pc.N + 255) / 256), max_groups = std::uint32_t(conv_direct_max_groups());
  const std::uint32_t gy = std::uint32_t((oc + s[6] - 1) / s[6]);
  for (std::uint32_t b0 = 0; b0 < blocks; b0 += max_groups) {
    pc.tile_n0 = b0;
    vk.launch(ShaderId::conv_direct, s, ops, &pc, sizeof pc, std::min(max_groups, blocks - b0), gy);
  }
}

void conv2d_backward_weight_direct(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                   push::ConvIgemmPush pc, TensorArg grad_weight, TensorArg grad_bias,
                                   TensorArg grad_out, TensorArg in) {
  const bool has_bias = grad_bias.storage != nullptr;
  const auto s = spec(kBackwardWeight, g, oc, has_bias, false);
  const std::int64_t positions = g.batch * g.out_h * g.out_w, k = reduction(g);
  const std::int64_t channel_blocks = (oc + s[6] - 1) / s[6];
  // Slices of the positions: about 1,024 workgroups (several per SM of a large
  // GPU), each at least 4 blocks long.
  const std::int64_t want = std::max<std::int64_t>(1, 1024 / channel_blocks);
  std::int64_t chunk = std::max<std::int64_t>(4 * kBlock, (positions + want - 1) / want);
  chunk = (chunk + kBlock - 1) / kBlock * kBlock;
  chunk = std::max(chunk, (positions + conv_direct_max_groups() - 1) / conv_direct_max_groups());
  chunk = (chunk + kBlock - 1) / kBlock * kBlock;
  const std::int64_t slices = (positions + chunk - 1) / chunk;
  pc.N = std::uint32_t(positions);
  pc.k_chunk = std::uint32_t(chunk);
  pc.off1 = std::uint32_t(in.layout->offset);
  pc.off2 = std::uint32_t(grad_out.layout->offset);
  if (slices == 1) {
    pc.off0 = std::uint32_t(grad_weight.layout->offset);
    pc.off3 = has_bias ? std::uint32_t(grad_bias.layout->offset) : 0;
    Operand ops[] = {{grad_weight, true}, {in, false}, {grad_out, false}, {has_bias ? grad_bias : grad_weight, has_bias}};
    vk.launch(ShaderId::conv_direct, s, ops, &pc, sizeof pc, 1, std::uint32_t(channel_blocks));
    return;
  }
  // Slices [slices, OC * K] and [slices, OC], then summed down the slices.
  const Layout w_parts_l = Layout::contiguous({slices, oc * k}), b_parts_l = Layout::contiguous({slices, oc});
  Storage w_parts(vk.device(), std::size_t(slices * oc * k) * 4);
  std::optional<Storage> b_parts;
  if (has_bias) b_parts.emplace(vk.device(), std::size_t(slices * oc) * 4);
  const TensorArg w_arg{&w_parts, DType::f32, &w_parts_l}, b_arg{has_bias ? &*b_parts : &w_parts, DType::f32, &b_parts_l};
  pc.off0 = 0;
  pc.off3 = 0;
  Operand ops[] = {{w_arg, true}, {in, false}, {grad_out, false}, {b_arg, has_bias}};
  vk.launch(ShaderId::conv_direct, s, ops, &pc, sizeof pc, std::uint32_t(slices), std::uint32_t(channel_blocks));
  const Layout w_l{{1, oc * k}, {0, 1}, grad_weight.layout->offset};
  reduce(vk, ReduceOp::sum, TensorArg{grad_weight.storage, DType::f32, &w_l}, w_arg);
  if (has_bias) {
    const Layout b_l{{1, oc}, {0, 1}, grad_bias.layout->offset};
    reduce(vk, ReduceOp::sum, TensorArg{grad_bias.storage, DType::f32, &b_l}, b_arg);
  }
}

}  // namespace rumus::vulkan
