// Convolutions on materialised columns: im2col into a workspace (nothing for a
// 1x1 kernel of stride 1 without padding, whose columns are the input itself),
// then gemm.comp, whose prefetching tiles run these products faster than
// conv_igemm.comp's gathering ones at most shapes (`bench_vulkan_conv vulkan:0
// resnet`). conv.cpp picks the way per shape. The batch goes through in chunks,
// so the workspace stays under conv_workspace_bytes() whatever the batch.
// The columns take the operands' dtype: f32, or f16/bf16 under autocast, whose
// products run on the cooperative-matrix units with f32 accumulation.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "../../core/env.hpp"
#include "kernels.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

bool columns_are_input(const Conv2dGeometry& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// Samples per chunk: as many as fit `bytes_per_sample` into the workspace.
std::int64_t chunk_of(std::int64_t batch, std::int64_t bytes_per_sample) {
  return std::clamp<std::int64_t>(conv_workspace_bytes() / std::max<std::int64_t>(1, bytes_per_sample), 1, batch);
}

// Samples [b0, b0 + nb) of a contiguous [N, C, H, W] operand.
Layout samples(TensorArg t, std::int64_t b0, std::int64_t nb, std::int64_t c, std::int64_t hw) {
  return Layout{{nb, c, hw}, {c * hw, hw, 1}, t.layout->offset + b0 * c * hw};
}

// Samples [b0, b0 + n) of the [N, C, H, W] image `t`, as im2col and col2im take it.
Layout images(TensorArg t, const Conv2dGeometry& g, std::int64_t b0, std::int64_t n) {
  const std::int64_t hw = g.height * g.width;
  return Layout{{n, g.channels, g.height, g.width},
                {g.channels * hw, hw, g.width, 1},
                t.layout->offset + b0 * g.channels * hw};
}

// The [K, n*L] view (K-major: one row per (channel, kh, kw), samples side by
// side) of a chunk's column buffer, as the [n, K, L] the column kernels index.
Layout k_major(std::int64_t n, std::int64_t k, std::int64_t l) { return Layout{{n, k, l}, {l, n * l, 1}, 0}; }

std::int64_t element_bytes(TensorArg t) { return std::int64_t(dtype_size(t.dtype)); }

// im2col of samples [b0, b0 + n) into `cols`, K-major.
void columns_of(VulkanBackend& vk, const Conv2dGeometry& g, TensorArg in, std::int64_t b0, std::int64_t n,
                Storage& cols) {
  Conv2dGeometry gc = g;
  gc.batch = n;
  const Layout in4 = images(in, g, b0, n), cols_l = k_major(n, g.channels * g.kernel_h * g.kernel_w, g.out_h * g.out_w);
  im2col(vk, gc, TensorArg{&cols, in.dtype, &cols_l}, TensorArg{in.storage, in.dtype, &in4});
}

// grad_out of samples [b0, b0 + n) copied into `dst` as [OC, n*L].
void k_major_copy(VulkanBackend& vk, TensorArg grad_out, std::int64_t oc, std::int64_t l, std::int64_t b0,
                  std::int64_t n, Storage& dst) {
  const Layout src = samples(grad_out, b0, n, oc, l), dst_l = k_major(n, oc, l);
  copy(vk, TensorArg{&dst, grad_out.dtype, &dst_l}, TensorArg{grad_out.storage, grad_out.dtype, &src});
}

ConvRoute route_from_environment() {
  const auto v = env::text("RUMUS_VULKAN_CONV");
  if (v == "columns") return ConvRoute::columns;
  if (v == "implicit_gemm") return ConvRoute::implicit_gemm;
  if (v == "weight_columns") return ConvRoute::weight_columns;
  if (v == "winograd") return ConvRoute::winograd;
  if (v == "winograd_no_weight") return ConvRoute::winograd_no_weight;
  return ConvRoute::automatic;
}

}  // namespace

std::int64_t& conv_workspace_bytes() {
  static std::int64_t bytes = std::int64_t(256) << 20;
  return bytes;
}

ConvRoute& conv_route_override() {
  static ConvRoute route = route_from_environment();
  return route;
}

bool conv_takes_columns(ConvPass pass, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups) {
  if (groups != 1) return false;  // grouped and depthwise convolutions stay on the implicit GEMM
  switch (conv_route_override()) {
    case ConvRoute::columns: return true;
    case ConvRoute::implicit_gemm: return false;
    case ConvRoute::weight_columns: return pass == ConvPass::backward_weight;
    case ConvRoute::automatic:
    case ConvRoute::winograd:
    case ConvRoute::winograd_no_weight: break;  // the passes and shapes Winograd does not take
  }
  (void)oc;
  // Measured per pass at ResNet-18's shapes on an H100 (bench_vulkan_conv
  // resnet, bench_vulkan_resnet): the weight gradient's long reduction runs
  // faster as one wide product than as conv_igemm's split tiles at every
  // shape but the stem's 3 channels; the forward and data passes gain where a
  // sample has few positions. At layer1's 1,024 the forward is level either
  // way and the data pass loses 2 ms a step: its product has only OC = 64 to
  // sum over, so writing and col2im-reading the columns dominates.
  // RUMUS_VULKAN_CONV_COLUMNS_POSITIONS="forward,data" moves those bounds for benchmarks.
  static const std::pair<std::int64_t, std::int64_t> bound = [] {
    long long fwd = 256, data = 256;
    if (const auto v = env::text("RUMUS_VULKAN_CONV_COLUMNS_POSITIONS"))
      if (std::sscanf(v->c_str(), "%lld,%lld", &fwd, &data) == 1) data = fwd;
    return std::pair<std::int64_t, std::int64_t>{fwd, data};
  }();
  if (g.channels < 8) return false;
  if (pass == ConvPass::backward_weight) return true;
  return g.out_h * g.out_w <= (pass == ConvPass::forward ? bound.first : bound.second);
}

void conv2d_forward_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg out, TensorArg in,
                            TensorArg weight, TensorArg bias, bool relu) {
  const std::int64_t k = g.channels * g.kernel_h * g.kernel_w, l = g.out_h * g.out_w;
  if (columns_are_input(g)) {  // out[b] = W in[b], every sample in one batched product
    GemmArgs ga = GemmArgs::packed(weight, in, out, oc, l, k, {.batch = g.batch});
    ga.stride_a = 0;  // one weight for every sample
    gemm(vk, ga);
  } else {
    // One product per chunk over all its samples' positions: W [OC, K] @
    // cols [K, n*L] (K-major, so the product is wide even where a sample has
    // few positions), then the [OC, n, L] result is copied into NCHW.
    const DType dt = out.dtype;
    const std::int64_t nb = chunk_of(g.batch, (k + oc) * l * element_bytes(out));
    Storage cols(vk.device(), std::size_t(nb * k * l * element_bytes(out))),
        y(vk.device(), std::size_t(nb * oc * l * element_bytes(out)));
    for (std::int64_t b0 = 0; b0 < g.batch; b0 += nb) {
      const std::int64_t n = std::min(nb, g.batch - b0);
      columns_of(vk, g, in, b0, n, cols);
      const Layout b_l = Layout::contiguous({k, n * l}), y_l = Layout::contiguous({oc, n * l});
      gemm(vk, GemmArgs::packed(weight, TensorArg{&cols, dt, &b_l}, TensorArg{&y, dt, &y_l}, oc, n * l, k));
      const Layout y_nol = k_major(n, oc, l), out_l = samples(out, b0, n, oc, l);
      copy(vk, TensorArg{out.storage, dt, &out_l}, TensorArg{&y, dt, &y_nol});
    }
  }
  Layout out3 = Layout::contiguous({g.batch, oc, l});
  out3.offset = out.layout->offset;
  TensorArg out_all{out.storage, out.dtype, &out3};
  if (bias.storage) {
    const Layout b_bcast{{g.batch, oc, l}, {0, bias.layout->strides[0], 0}, bias.layout->offset};
    binary(vk, BinaryOp::add, out_all, out_all, TensorArg{bias.storage, bias.dtype, &b_bcast}, 0, 0);
  }
  if (relu) unary(vk, UnaryOp::relu, out_all, out_all, 0, 0);
}

void conv2d_backward_data_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_in,
                                  TensorArg grad_out, TensorArg weight) {
  const std::int64_t k = g.channels * g.kernel_h * g.kernel_w, l = g.out_h * g.out_w;
  if (columns_are_input(g)) {  // grad_in[b] = W^T grad_out[b]
    GemmArgs ga = GemmArgs::packed(weight, grad_out, grad_in, g.channels, l, oc, {.trans_a = true, .batch = g.batch});
    ga.stride_a = 0;
    gemm(vk, ga);
    return;
  }
  // Per chunk: grad_out copied K-major [OC, n*L], dcols [K, n*L] = W^T of it,
  // then col2im gathers each input pixel's entries.
  const DType dt = grad_in.dtype;
  const std::int64_t nb = chunk_of(g.batch, (k + oc) * l * element_bytes(grad_in));
  Storage dcols(vk.device(), std::size_t(nb * k * l * element_bytes(grad_in))),
      go_t(vk.device(), std::size_t(nb * oc * l * element_bytes(grad_in)));
  for (std::int64_t b0 = 0; b0 < g.batch; b0 += nb) {
    const std::int64_t n = std::min(nb, g.batch - b0);
    k_major_copy(vk, grad_out, oc, l, b0, n, go_t);
    const Layout a_l = Layout::contiguous({oc, n * l}), c_l = Layout::contiguous({k, n * l});
    gemm(vk, GemmArgs::packed(weight, TensorArg{&go_t, dt, &a_l}, TensorArg{&dcols, dt, &c_l}, k, n * l, oc,
                              {.trans_a = true}));
    Conv2dGeometry gc = g;
    gc.batch = n;
    const Layout gi4 = images(grad_in, g, b0, n), cols_l = k_major(n, k, l);
    col2im(vk, gc, TensorArg{grad_in.storage, dt, &gi4}, TensorArg{&dcols, dt, &cols_l});
  }
}

void conv2d_backward_weight_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                    TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in) {
  const std::int64_t k = g.channels * g.kernel_h * g.kernel_w, l = g.out_h * g.out_w;
  // gW [OC, K] = sum over samples of grad_out[b] [OC, L] cols[b]^T: one product
  // per chunk over the chunk's samples and positions, with both operands laid
  // out K-major ([OC, n*L] and [K, n*L]) so that the reduction is one index.
  // 16-bit gradients are summed over the chunks in f32 and rounded once.
  const DType dt = grad_weight.dtype;
  const std::int64_t nb = chunk_of(g.batch, (k + oc) * l * element_bytes(grad_weight));
  Storage cols(vk.device(), std::size_t(nb * k * l * element_bytes(grad_weight))),
      go_t(vk.device(), std::size_t(nb * oc * l * element_bytes(grad_weight)));
  const Layout sums_l = Layout::contiguous({oc, k});
  std::optional<Storage> sums;
  if (dt != DType::f32) sums.emplace(vk.device(), std::size_t(oc * k) * 4);
  const TensorArg sums_arg = sums ? TensorArg{&*sums, DType::f32, &sums_l} : grad_weight;
  for (std::int64_t b0 = 0; b0 < g.batch; b0 += nb) {
    const std::int64_t n = std::min(nb, g.batch - b0);
    columns_of(vk, g, in, b0, n, cols);
    k_major_copy(vk, grad_out, oc, l, b0, n, go_t);
    const Layout a_l = Layout::contiguous({oc, n * l}), b_l = Layout::contiguous({k, n * l});
    GemmArgs ga = GemmArgs::packed(TensorArg{&go_t, dt, &a_l}, TensorArg{&cols, dt, &b_l}, sums_arg, oc, k, n * l,
                                   {.trans_b = true});
    ga.beta = b0 == 0 ? 0.0 : 1.0;
    gemm(vk, ga);
  }
  if (sums) {
    const Layout gw_l{{oc, k}, {k, 1}, grad_weight.layout->offset};
    copy(vk, TensorArg{grad_weight.storage, dt, &gw_l}, sums_arg);
  }
  if (grad_bias.storage) conv2d_backward_bias(vk, g, oc, grad_bias, grad_out);
}

void conv2d_backward_bias(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_bias,
                          TensorArg grad_out) {
  // Row sums of grad_out over samples and positions, in two passes: over
  // each sample's positions ([N, OC] sums of contiguous runs), then over the
  // samples. In one pass each of the few outputs walked N * L strided
  // elements alone (0.75 ms of a 5.4 ms CNN step at batch 512 on an H100).
  const std::int64_t l = g.out_h * g.out_w;
  // The per-sample sums are f32 whatever grad_out's dtype.
  const Layout go3{{g.batch, oc, l}, {oc * l, l, 1}, grad_out.layout->offset};
  const Layout per_sample{{g.batch, oc, 1}, {oc, 1, 1}, 0};
  Storage sums(vk.device(), std::size_t(g.batch * oc) * 4);
  reduce(vk, ReduceOp::sum, TensorArg{&sums, DType::f32, &per_sample}, TensorArg{grad_out.storage, grad_out.dtype, &go3});
  const Layout sums2{{g.batch, oc}, {oc, 1}, 0}, gb2{{1, oc}, {oc, 1}, grad_bias.layout->offset};
  reduce(vk, ReduceOp::sum, TensorArg{grad_bias.storage, grad_bias.dtype, &gb2}, TensorArg{&sums, DType::f32, &sums2});
}

}  // namespace rumus::vulkan
