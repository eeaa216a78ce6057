// Host side of fused attention: shaders/attention_tiled.comp (rows in
// registers, the other sequence streamed through shared memory) for head dims
// up to 128, shaders/attention.comp (one row per invocation, everything from
// global memory) beyond.
#include <algorithm>

#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::AttentionPush;
constexpr std::uint32_t kLocal = 64;
constexpr std::uint32_t kTiledRows = 64;
enum Mode : std::uint32_t { kForward = 0, kGradQ = 1, kGradKV = 2 };

void require_contiguous(TensorArg t) {
  if (!t.layout->is_contiguous())
    throw Error("scaled_dot_product_attention: the Vulkan kernel needs contiguous operands");
}

AttentionPush make_push(const AttentionParams& p, TensorArg mask) {
  AttentionPush pc{};
  pc.bh = std::uint32_t(p.batch * p.heads);
  pc.heads = std::uint32_t(p.heads);
  pc.lq = std::uint32_t(p.lq);
  pc.lk = std::uint32_t(p.lk);
  pc.d = std::uint32_t(p.d);
  pc.dv = std::uint32_t(p.dv);
  pc.scale = float(p.scale);
  pc.causal = p.causal ? 1u : 0u;
  if (mask.storage) {
    pc.mask_kind = mask.dtype == DType::u8 ? 1u : 2u;
    pc.mask_dt = std::uint32_t(mask.dtype);
    pc.mask_off = std::int32_t(mask.layout->offset);
    for (int i = 0; i < 4; ++i) pc.mask_stride[i] = std::int32_t(mask.layout->strides[std::size_t(i)]);
  }
  if (p.dropout_p > 0) {
    // A threshold of 0 means "no dropout" to the shader; p this small keeps every weight anyway.
    pc.dropout_threshold = dropout_threshold(p.dropout_p);
    pc.keep_scale = p.dropout_p >= 1.0 ? 0.0f : float(1.0 / (1.0 - p.dropout_p));
    pc.seed_lo = std::uint32_t(p.seed);
    pc.seed_hi = std::uint32_t(p.seed >> 32);
    pc.counter_lo = std::uint32_t(p.offset);
    pc.counter_hi = std::uint32_t(p.offset >> 32);
  }
  return pc;
}

// The tiled kernel's register width (>= d and dv) and shared-memory tile
// height; false when the head dims are too wide for it.
bool tiled_config(const AttentionParams& p, std::uint32_t shared_bytes, std::uint32_t& d_max, std::uint32_t& tile) {
  const std::int64_t widest = std::max(p.d, p.dv);
  if (widest > 128) return false;
  d_max = 16;
  while (d_max < widest) d_max *= 2;
  for (tile = 32; tile >= 8; tile /= 2)
    if ((2 * tile * d_max + 2 * tile) * 4 <= shared_bytes) return true;
  return false;
}

// Workgroups of kTiledRows rows along x, one (batch, head) each along y (and z past 65535).
void tiled_grid(std::int64_t rows, std::int64_t bh, std::uint32_t& gx, std::uint32_t& gy, std::uint32_t& gz) {
  gx = std::uint32_t((rows + kTiledRows - 1) / kTiledRows);
  gy = std::uint32_t(std::min<std::int64_t>(bh, 65535));
  gz = std::uint32_t((bh + gy - 1) / gy);
}

void grid(std::int64_t rows, std::uint32_t& gx, std::uint32_t& gy) {
  const std::int64_t groups = std::max<std::int64_t>(1, (rows + kLocal - 1) / kLocal);
  gx = std::uint32_t(std::min<std::int64_t>(groups, 65535));
  gy = std::uint32_t((groups + gx - 1) / gx);
}

}  // namespace

void VulkanBackend::attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k,
                                      TensorArg v, TensorArg mask) {
  for (TensorArg t : {out, lse, q, k, v}) require_contiguous(t);
  if (q.dtype != DType::f32) throw DTypeError("scaled_dot_product_attention: the Vulkan kernel needs f32");
  const std::int64_t rows = p.batch * p.heads * p.lq;
  if (rows == 0) return;
  AttentionPush pc = make_push(p, mask);
  const TensorArg ops_in[] = {q, k, v, out, lse};
  for (int b = 0; b < 5; ++b) pc.off[b] = std::int32_t(ops_in[b].layout->offset);
  const TensorArg m = mask.storage ? mask : q;
  Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, true}, {lse, true},
                   {m, false}, {q, false}, {q, false}, {q, false}, {q, false}};
  std::uint32_t gx, gy, gz, d_max, tile;
  if (tiled_config(p, ctx_->properties.limits.maxComputeSharedMemorySize, d_max, tile)) {
    tiled_grid(p.lq, p.batch * p.heads, gx, gy, gz);
    launch("attention_tiled", {kTiledRows, kForward, d_max, tile}, ops, &pc, sizeof pc, gx, gy, gz);
    return;
  }
  grid(rows, gx, gy);
  launch("attention", {kLocal, kForward}, ops, &pc, sizeof pc, gx, gy);
}

void VulkanBackend::attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k,
                                       TensorArg grad_v, TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v,
                                       TensorArg out, TensorArg lse, TensorArg mask) {
  for (TensorArg t : {grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse}) require_contiguous(t);
  if (q.dtype != DType::f32) throw DTypeError("scaled_dot_product_attention: the Vulkan kernel needs f32");
  AttentionPush pc = make_push(p, mask);
  const TensorArg in[] = {q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v};
  for (int b = 0; b < 9; ++b) pc.off[b] = std::int32_t(in[b].layout->offset);
  const TensorArg m = mask.storage ? mask : q;
  std::uint32_t gx, gy, gz, d_max, tile;
  const bool tiled = tiled_config(p, ctx_->properties.limits.maxComputeSharedMemorySize, d_max, tile);
  const std::int64_t bh = p.batch * p.heads;
  if (bh == 0) return;
  if (p.lq > 0) {
    Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {grad_q, true}, {q, false}, {q, false}};
    if (tiled) {
      tiled_grid(p.lq, bh, gx, gy, gz);
      launch("attention_tiled", {kTiledRows, kGradQ, d_max, tile}, ops, &pc, sizeof pc, gx, gy, gz);
    } else {
      grid(bh * p.lq, gx, gy);
      launch("attention", {kLocal, kGradQ}, ops, &pc, sizeof pc, gx, gy);
    }
  }
  if (p.lk > 0) {
    Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {q, false}, {grad_k, true}, {grad_v, true}};
    if (tiled) {
      tiled_grid(p.lk, bh, gx, gy, gz);
      launch("attention_tiled", {kTiledRows, kGradKV, d_max, tile}, ops, &pc, sizeof pc, gx, gy, gz);
    } else {
      grid(bh * p.lk, gx, gy);
      launch("attention", {kLocal, kGradKV}, ops, &pc, sizeof pc, gx, gy);
    }
  }
}

}  // namespace rumus::vulkan
