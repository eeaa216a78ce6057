// Host side of conv_winograd.comp and conv_winograd4.comp: 3x3 convolutions
// of stride 1 as Winograd F(2x2, 3x3) or F(4x4, 3x3), the forward pass, the
// data gradient (a 3x3 stride-1 convolution of the output gradient with the
// kernel turned and transposed) and the weight gradient, in f32, f16 or bf16.
// Forward and data: the weights' transform once, then per chunk of the batch
// the input transform into a workspace, 16 or 36 products (gemm.comp,
// batched), and the output transform with the bias and the fused ReLU.
// Weight: per chunk the input's and the output gradient's transforms, 16 or
// 36 products summed over the chunks' tiles, then the sums' transform into
// the 3x3 gradient.
// F(2x2, 3x3) makes 4 multiplications of an output's 9, on 4 transformed
// points an input pixel; F(4x4, 3x3) 2.25, on 2.25 points, with larger
// rounding errors: with f16 tiles and products (64 to 256 channels, inputs
// in [-1, 1]) its outputs' errors are 2.6e-3 of their rms (1.5e-2 at most)
// against F(2x2, 3x3)'s 6e-4 (2.7e-3), below those of F(2x2, 3x3) on bf16
// tiles, 4e-3 (1.7e-2). It moves 1.78 times fewer bytes and multiplies 1.78
// times less, but it is not measured on a GPU yet: every pass takes
// F(2x2, 3x3), and winograd_tile_override() F(4x4, 3x3) for benchmarks.
// conv.cpp picks the way per shape.
// f32 passes with small products run in one kernel instead, with no workspace
// for the tiles: the forward and data passes in conv_winograd_fused.comp, the
// weight pass in conv_winograd_weight_fused.comp.
// The transforms write the operands' dtype, so 16-bit convolutions (autocast)
// multiply 16-bit tiles with f32 accumulation. f16 products are stored in f16
// for the output's transform (bf16's 8 bits would cost accuracy); the weight
// gradient's sums stay f32.
#include <algorithm>
#include <optional>
#include <string>

#include "../../core/env.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::ConvWinogradPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 256;
enum Mode : std::uint32_t { kWeights = 0, kInput = 1, kOutput = 2, kOutputGradient = 3, kWeightGradient = 4 };

// One Winograd convolution: out [batch, rows, out_h, out_w] from image
// [batch, reduction, height, width] and the 3x3 kernel `weight` (flip: the
// data gradient's reading of a forward kernel [reduction, rows, 3, 3]), in
// output tiles of tile x tile (2: F(2x2, 3x3), 4: F(4x4, 3x3)).
struct Problem {
  std::int64_t batch, reduction, height, width, pad_h, pad_w, rows, out_h, out_w;
  bool flip;
  DType dtype;  // the tensors' and the transformed tiles'
  std::int64_t tile = 2;
};

std::int64_t tiles_of(std::int64_t extent, std::int64_t tile) { return (extent + tile - 1) / tile; }
// A tile's transformed points: 16 or 36.
std::int64_t points(const Problem& q) { return (q.tile + 2) * (q.tile + 2); }

std::int64_t element_bytes(const Problem& q) { return std::int64_t(dtype_size(q.dtype)); }

// The forward and data passes' products M: f16 where the operands are, since
// they are bound by writing and reading M (ResNet-18's layer1 at batch 512
// moves 0.5 GB a pass with F(2x2, 3x3)), else f32.
DType product_dtype(const Problem& q) { return q.dtype == DType::f16 ? DType::f16 : DType::f32; }

// One pass of conv_winograd.comp (conv_winograd4.comp for tiles of 4):
// `total` items from src (from element off_src) into dst (from off_dst), each
// read and written in its own dtype; the output's transform also adds a bias
// (null storage: none) and the ReLU.
void transform(VulkanBackend& vk, const Problem& q, ConvWinogradPush pc, Mode mode, TensorArg dst,
               std::int64_t off_dst, TensorArg src, std::int64_t off_src, std::int64_t total,
               TensorArg bias = {nullptr, DType::f32, nullptr}, bool relu = false) {
  const bool has_bias = bias.storage != nullptr;
  pc.off_src = std::uint32_t(off_src);
  pc.off_dst = std::uint32_t(off_dst);
  pc.off_bias = has_bias ? std::uint32_t(bias.layout->offset) : 0;
  Operand ops[] = {{dst, true}, {src, false}, {has_bias ? bias : src, false}};
  if (q.tile == 4) {  // its output transform writes rows of 4 outputs a store already
    pc.total = std::uint32_t(total);
    vk.launch(ShaderId::conv_winograd4,
              {kLocal, mode, has_bias ? 1u : 0u, relu ? 1u : 0u, std::uint32_t(src.dtype), std::uint32_t(dst.dtype)},
              ops, &pc, sizeof pc, groups_for(pc.total, kLocal));
    return;
  }
  // The output transform four neighbouring tiles an item where a row of tiles
  // holds whole quads and the products start on one: ResNet-18's captured
  // step on an H100 1.02x (f32) to 1.04x (amp) faster, with the columns in
  // quads. The input and output-gradient transforms stay one tile an item: in
  // quads they read their pixels 16 bytes apart across a subgroup, and the
  // amp step ran 0.95x.
  const bool quads = mode == kOutput && pc.tiles_w % 4 == 0 && off_src % 4 == 0 &&
                     (src.dtype == DType::f32 || is_16bit_float(src.dtype));
  pc.total = std::uint32_t(quads ? total / 4 : total);  // tiles % tiles_w == 0
  vk.launch(ShaderId::conv_winograd,
            {kLocal, mode, has_bias ? 1u : 0u, relu ? 1u : 0u, std::uint32_t(src.dtype), std::uint32_t(dst.dtype),
             quads ? 1u : 0u},
            ops, &pc, sizeof pc, groups_for(pc.total, kLocal));
}

std::int64_t tiles_per_sample(const Problem& q) { return tiles_of(q.out_h, q.tile) * tiles_of(q.out_w, q.tile); }

ConvWinogradPush push_of(const Problem& q) {
  ConvWinogradPush pc{};
  pc.reduction = std::uint32_t(q.reduction);
  pc.height = std::uint32_t(q.height);
  pc.width = std::uint32_t(q.width);
  pc.pad_h = std::int32_t(q.pad_h);
  pc.pad_w = std::int32_t(q.pad_w);
  pc.rows = std::uint32_t(q.rows);
  pc.out_h = std::uint32_t(q.out_h);
  pc.out_w = std::uint32_t(q.out_w);
  pc.tiles_h = std::uint32_t(tiles_of(q.out_h, q.tile));
  pc.tiles_w = std::uint32_t(tiles_of(q.out_w, q.tile));
  pc.flip = q.flip ? 1u : 0u;
  return pc;
}

// Samples per chunk: as many as fit their transformed tiles (the image's, and
// the rows' products or transforms) into the workspace.
std::int64_t chunk_of(const Problem& q) {
  const std::int64_t per_sample_bytes =
      points(q) * (q.reduction * element_bytes(q) + q.rows * std::int64_t(dtype_size(product_dtype(q)))) *
      tiles_per_sample(q);
  return std::clamp<std::int64_t>(conv_workspace_bytes() / std::max<std::int64_t>(1, per_sample_bytes), 1, q.batch);
}

// The batch a chunk at a time: for samples [b0, b0 + n), with pc.batch and
// pc.tiles set to them, the image's transform V [T, reduction, P] (T =
// points(q), P = n * tiles per sample, q.dtype), then `step(b0, p, v, r)`
// with a workspace R [T, rows, P] of product_dtype(q) (the products, or the
// output gradient's 16-bit transforms, which fit in it).
template <class Step>
void over_chunks(VulkanBackend& vk, const Problem& q, ConvWinogradPush& pc, TensorArg image, Step&& step) {
  const std::int64_t per_sample = tiles_per_sample(q), nb = chunk_of(q);
  const std::int64_t t = points(q);
  Storage v(vk.device(), std::size_t(t * q.reduction * nb * per_sample * element_bytes(q))),
      r(vk.device(), std::size_t(t * q.rows * nb * per_sample) * dtype_size(product_dtype(q)));
  for (std::int64_t b0 = 0; b0 < q.batch; b0 += nb) {
    const std::int64_t n = std::min(nb, q.batch - b0), p = n * per_sample;
    pc.batch = std::uint32_t(n);
    pc.tiles = std::uint32_t(p);
    const Layout v_l = Layout::contiguous({t, q.reduction, p}), r_l = Layout::contiguous({t, q.rows, p});
    const TensorArg v_arg{&v, q.dtype, &v_l}, r_arg{&r, product_dtype(q), &r_l};
    transform(vk, q, pc, kInput, v_arg, 0, image, image.layout->offset + b0 * q.reduction * q.height * q.width,
              q.reduction * p);
    step(b0, p, v_arg, r_arg);
  }
}

// The one-pass kernel (conv_winograd_fused.comp) takes f32 convolutions whose
// products are small (rows x reduction up to 2,048): there the unfused ones
// are bound by writing and reading the transformed tiles. Measured on an H100
// as whole captured steps: the MNIST CNN's conv2 (32 -> 64 channels, both
// passes at 2,048) 1.13x faster at batch 512; ResNet-18's layer1 (64 x 64)
// 0.92x, so it stays on the products.
bool fused_applies(const Problem& q) { return q.dtype == DType::f32 && q.rows * q.reduction <= 2048; }

// conv_winograd_fused.comp over the whole batch: workgroups of 32 tiles x 32 rows.
void run_fused(VulkanBackend& vk, const Problem& q, ConvWinogradPush pc, TensorArg out, TensorArg image, TensorArg u,
               TensorArg bias, bool relu) {
  constexpr std::int64_t kTiles = 32, kRows = 32;
  const std::int64_t max_groups = winograd_fused_max_groups();
  const bool has_bias = bias.storage != nullptr;
  const std::int64_t tiles = q.batch * tiles_per_sample(q);
  pc.batch = std::uint32_t(q.batch);
  pc.tiles = std::uint32_t(tiles);
  pc.off_src = std::uint32_t(image.layout->offset);
  pc.off_dst = std::uint32_t(out.layout->offset);
  pc.off_bias = has_bias ? std::uint32_t(bias.layout->offset) : 0;
  Operand ops[] = {{out, true}, {image, false}, {u, false}, {has_bias ? bias : image, false}};
  for (std::int64_t first = 0; first < tiles; first += max_groups * kTiles) {
    pc.total = std::uint32_t(first);  // the launch's first tile
    const std::int64_t count = std::min(tiles - first, max_groups * kTiles);
    vk.launch(ShaderId::conv_winograd_fused, {has_bias ? 1u : 0u, relu ? 1u : 0u}, ops, &pc, sizeof pc,
              std::uint32_t((count + kTiles - 1) / kTiles), std::uint32_t((q.rows + kRows - 1) / kRows));
  }
}

// The weight gradient's sums S [16, rows, reduction] = sum over the tiles of
// (A dy A^T) . (B^T d B) by conv_winograd_weight_fused.comp: workgroups of 32
// rows x 32 channels, each over a slice of the tiles (about 512 workgroups in
// all, slices of 64 tiles or more), then the slices added; with a bias, its
// gradient too, from the same loads of the output gradient. Measured on an
// H100: the MNIST CNN's conv2 weight pass 0.49 ms a step at batch 512, where
// the transforms and products took 0.81 ms; its step 1.10x faster.
void weight_sums_fused(VulkanBackend& vk, const Problem& q, ConvWinogradPush pc, TensorArg sums, TensorArg grad_bias,
                       TensorArg grad_out, TensorArg image) {
  constexpr std::int64_t kBlock = 32, kTilesPerStep = 8, kMaxGroups = 65535;
  const std::int64_t tiles = q.batch * tiles_per_sample(q);
  const std::int64_t row_blocks = (q.rows + kBlock - 1) / kBlock, channel_blocks = (q.reduction + kBlock - 1) / kBlock;
  std::int64_t slices = std::clamp<std::int64_t>(512 / (row_blocks * channel_blocks), 1, std::max<std::int64_t>(1, tiles / 64));
  const std::int64_t per = ((tiles + slices - 1) / slices + kTilesPerStep - 1) / kTilesPerStep * kTilesPerStep;
  slices = std::min((tiles + per - 1) / per, kMaxGroups);
  const std::int64_t plane = 16 * q.rows * q.reduction;
  const Layout parts_l = Layout::contiguous({1, slices, plane});
  Storage parts(vk.device(), std::size_t(slices * plane) * 4);
  const TensorArg parts_arg{&parts, DType::f32, &parts_l};
  pc.batch = std::uint32_t(q.batch);
  pc.tiles = std::uint32_t(tiles);
  pc.total = std::uint32_t(per);
  pc.off_src = std::uint32_t(image.layout->offset);
  pc.off_bias = std::uint32_t(grad_out.layout->offset);
  // The bias gradient's slices [slices, rows], from the same loads of the output gradient.
  const bool has_bias = grad_bias.storage != nullptr;
  const Layout bias_parts_l = Layout::contiguous({slices, q.rows});
  std::optional<Storage> bias_parts;
  if (has_bias) bias_parts.emplace(vk.device(), std::size_t(slices * q.rows) * 4);
  const TensorArg bias_parts_arg{has_bias ? &*bias_parts : &parts, DType::f32, &bias_parts_l};
  Operand ops[] = {{parts_arg, true}, {image, false}, {grad_out, false}, {bias_parts_arg, has_bias}};
  vk.launch(ShaderId::conv_winograd_weight_fused, {has_bias ? 1u : 0u}, ops, &pc, sizeof pc, std::uint32_t(slices),
            std::uint32_t(row_blocks), std::uint32_t(channel_blocks));
  const Layout sums_l{{1, 1, plane}, {plane, 0, 1}, sums.layout->offset};
  reduce(vk, ReduceOp::sum, TensorArg{sums.storage, DType::f32, &sums_l}, parts_arg);
  if (has_bias) {
    const Layout bias_l{{1, q.rows}, {0, 1}, grad_bias.layout->offset};
    reduce(vk, ReduceOp::sum, TensorArg{grad_bias.storage, DType::f32, &bias_l}, bias_parts_arg);
  }
}

void run(VulkanBackend& vk, Problem q, TensorArg out, TensorArg image, TensorArg weight, TensorArg bias, bool relu) {
  q.tile = winograd_tile_override() == 4 ? 4 : 2;
  ConvWinogradPush pc = push_of(q);

  // U [T, rows, reduction]
  const std::int64_t t = points(q);
  Storage u(vk.device(), std::size_t(t * q.rows * q.reduction * element_bytes(q)));
  const Layout u_l = Layout::contiguous({t, q.rows, q.reduction});
  const TensorArg u_arg{&u, q.dtype, &u_l};
  transform(vk, q, pc, kWeights, u_arg, 0, weight, weight.layout->offset, q.rows * q.reduction);
  if (q.tile == 2 && fused_applies(q)) return run_fused(vk, q, pc, out, image, u_arg, bias, relu);

  // Per chunk: the products M [T, rows, P] = U V, then the output's transform.
  over_chunks(vk, q, pc, image, [&](std::int64_t b0, std::int64_t p, TensorArg v_arg, TensorArg m_arg) {
    gemm(vk, GemmArgs::packed(u_arg, v_arg, m_arg, q.rows, p, q.reduction, {.batch = t}));
    transform(vk, q, pc, kOutput, out, out.layout->offset + b0 * q.rows * q.out_h * q.out_w, m_arg, 0, q.rows * p, bias,
              relu);
  });
}

}  // namespace

std::int64_t& winograd_fused_max_groups() {
  static std::int64_t groups = 65535;
  return groups;
}

std::int64_t& winograd_tile_override() {
  static std::int64_t tile = [] {
    const auto v = env::text("RUMUS_VULKAN_WINOGRAD_TILE");
    return v && (*v == "2" || *v == "4") ? std::int64_t(std::stoi(*v)) : std::int64_t(0);
  }();
  return tile;
}

bool conv_takes_winograd(ConvPass pass, const Conv2dGeometry& g, std::int64_t groups) {
  const ConvRoute route = conv_route_override();
  const bool per_shape = route == ConvRoute::automatic || route == ConvRoute::winograd_no_weight;
  if (route != ConvRoute::winograd && !per_shape) return false;
  // Measured at ResNet-18's shapes on an H100 (bench_vulkan_conv vulkan:0
  // resnet 128): against the implicit GEMM and the columns, the forward ran
  // 1.7x (32x32, 64 channels) to 2.3x (4x4, 512) faster, the data pass level
  // at 32x32 and 2.8x to 3.1x faster at 8x8 and 4x4. The stem's 3 channels
  // are too few to pay for the transforms (3.3x slower), so automatic takes
  // 8 channels or more.
  if (per_shape && g.channels < 8) return false;
  // The weight pass too, measured as whole captured ResNet-18 steps on an
  // H100 (bench_vulkan_resnet vulkan:0 60 captured): f32 1.29x (batch 128)
  // and 1.33x (512) faster than with the columns' one wide product, amp
  // 1.09x and 1.12x; the MNIST CNN level. winograd_no_weight keeps the columns.
  if (route == ConvRoute::winograd_no_weight && pass == ConvPass::backward_weight) return false;
  return groups == 1 && g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.dilation_h == 1 && g.dilation_w == 1 && g.pad_h >= 0 && g.pad_h <= 2 && g.pad_w >= 0 && g.pad_w <= 2;
}

void conv2d_forward_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg out, TensorArg in,
                             TensorArg weight, TensorArg bias, bool relu) {
  run(vk, {g.batch, g.channels, g.height, g.width, g.pad_h, g.pad_w, oc, g.out_h, g.out_w, false, out.dtype}, out, in,
      weight, bias, relu);
}

void conv2d_backward_data_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_in,
                                   TensorArg grad_out, TensorArg weight) {
  // Stride 1: each input pixel's gradient is the 3x3 correlation of the output
  // gradient, padded by 2 - pad, with the kernel turned 180 degrees and its
  // channels swapped.
  run(vk, {g.batch, oc, g.out_h, g.out_w, 2 - g.pad_h, 2 - g.pad_w, g.channels, g.height, g.width, true, grad_in.dtype},
      grad_in, grad_out, weight, TensorArg{nullptr, grad_in.dtype, nullptr}, false);
}

void conv2d_backward_weight_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                     TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in) {
  Problem q{g.batch, g.channels, g.height, g.width, g.pad_h, g.pad_w, oc, g.out_h, g.out_w, false,
            grad_weight.dtype};
  q.tile = winograd_tile_override() == 4 ? 4 : 2;
  ConvWinogradPush pc = push_of(q);
  const std::int64_t t = points(q);
  Storage s(vk.device(), std::size_t(t * q.rows * q.reduction) * 4);
  const Layout s_l = Layout::contiguous({t, q.rows, q.reduction});
  const TensorArg s_arg{&s, DType::f32, &s_l};
  if (q.tile == 2 && fused_applies(q)) {
    weight_sums_fused(vk, q, pc, s_arg, grad_bias, grad_out, in);
    transform(vk, q, pc, kWeightGradient, grad_weight, grad_weight.layout->offset, s_arg, 0, q.rows * q.reduction);
    return;
  }
  // Per chunk: the output gradient's transform D [T, rows, P] (q.dtype), then
  // the f32 sums S [T, rows, reduction] += D V^T gather every chunk's tiles.
  over_chunks(vk, q, pc, in, [&](std::int64_t b0, std::int64_t p, TensorArg v_arg, TensorArg r_arg) {
    const TensorArg d_arg{r_arg.storage, q.dtype, r_arg.layout};
    transform(vk, q, pc, kOutputGradient, d_arg, 0, grad_out, grad_out.layout->offset + b0 * q.rows * q.out_h * q.out_w,
              q.rows * p);
    GemmArgs ga = GemmArgs::packed(d_arg, v_arg, s_arg, q.rows, q.reduction, p, {.trans_b = true, .batch = t});
    ga.beta = b0 == 0 ? 0.0 : 1.0;
    gemm(vk, ga);
  });
  transform(vk, q, pc, kWeightGradient, grad_weight, grad_weight.layout->offset, s_arg, 0, q.rows * q.reduction);
  if (grad_bias.storage) conv2d_backward_bias(vk, g, oc, grad_bias, grad_out);
}

}  // namespace rumus::vulkan
