// Host side of fused attention. f32: shaders/attention_tiled.comp (rows in
// registers, the other sequence streamed through shared memory) for head dims
// up to 128, shaders/attention.comp (one row per invocation, everything from
// global memory) beyond; the forward for head dims up to 64 runs
// shaders/attention_blocked.comp (rows by keys per invocation) where
// subgroups shuffle, from 512 queries and keys shaders/attention_grid.comp (a
// 4 x 4 grid of scores per invocation), and the backward for those heads
// shaders/attention_blocked_backward.comp (one pass, grad_q by float atomics)
// where the device has them. f16: shaders/attention_coopmat.comp on the
// matrix units, head dims up to 128.
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "rumus/core/error.hpp"
#include "../attention.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::AttentionPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 64;
constexpr std::uint32_t kTiledRows = 64;
enum Mode : std::uint32_t { kForward = 0, kGradQ = 1, kGradKV = 2 };

constexpr std::uint32_t kCoopmatThreads = 128;  // four 32-lane subgroups, 16 rows each

// attention_coopmat.comp's shared memory, as its declarations add up.
std::uint32_t coopmat_shared_bytes(std::uint32_t mode, std::uint32_t d_pad, std::uint32_t bc) {
  const std::uint32_t tiles = 2 * bc * (d_pad + 8) * 2, scores = 4 * 16 * bc * 4, p16 = 4 * 16 * bc * 2;
  const std::uint32_t dp = mode == kForward ? 16 : scores;
  const std::uint32_t ds = mode == kGradKV ? p16 + 2 * bc * 4 : 16 + 2 * 16;
  return tiles + scores + dp + p16 + ds + 4 * 256 * 4;
}

// The coopmat kernel's padded head dim and streamed tile height (64 where it fits, else 32).
void coopmat_config(const AttentionParams& p, Mode mode, std::uint32_t shared_bytes, std::uint32_t& d_pad,
                    std::uint32_t& bc) {
  const std::int64_t widest = std::max(p.d, p.dv);
  if (widest > 128)
    throw Error(fmt::format("scaled_dot_product_attention: the Vulkan f16 kernel takes head dims up to 128, got {}",
                            widest));
  d_pad = std::uint32_t(std::max<std::int64_t>(16, (widest + 15) / 16 * 16));
  for (bc = 64; bc >= 32; bc /= 2)
    if (coopmat_shared_bytes(mode, d_pad, bc) <= shared_bytes) return;
  throw Error(fmt::format("scaled_dot_product_attention: the Vulkan f16 kernel needs {} bytes of shared memory, "
                          "the device has {}",
                          coopmat_shared_bytes(mode, d_pad, 32), shared_bytes));
}

// Whether a kernel may read rows 16 bytes (`unit` elements) at a time.
std::uint32_t rows_aligned(const AttentionParams& p, std::initializer_list<TensorArg> rows, std::int64_t unit) {
  bool ok = p.d % unit == 0 && p.dv % unit == 0;
  for (TensorArg t : rows) ok = ok && t.layout->offset % unit == 0;
  return ok ? 1u : 0u;
}

// The head_slots() layout that operands `group` share; the kernels read no other.
std::uint32_t shared_slots(std::initializer_list<TensorArg> group) {
  const std::int64_t slots = head_slots(*group.begin()->layout);
  for (TensorArg t : group)
    if (slots < 0 || head_slots(*t.layout) != slots)
      throw Error("scaled_dot_product_attention: the Vulkan kernels need q, k and v (and out and grad_out, and the "
                  "gradients) in one layout of heads");
  return std::uint32_t(slots);
}

void require_contiguous(TensorArg t) {
  if (!t.layout->is_contiguous())
    throw Error("scaled_dot_product_attention: the Vulkan kernels need contiguous row logsumexps");
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
  pc.flags = p.causal ? 1u : 0u;
  if (mask.storage) {
    const bool bool_mask = mask.dtype == DType::boolean || mask.dtype == DType::u8;
    pc.flags |= (bool_mask ? 1u : 2u) << 1 | std::uint32_t(mask.dtype) << 8;
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

// attention_tiled.comp's build and workgroup size: the four invocations of a
// subgroup quad share a row where the device has quads in compute shaders.
struct TiledKernel {
  ShaderId shader;
  std::uint32_t local;
};
TiledKernel tiled_kernel(const Context& ctx) {
  if (ctx.subgroup_quad && ctx.properties.limits.maxComputeWorkGroupInvocations >= 4 * kTiledRows)
    return {ShaderId::attention_tiled_quad, 4 * kTiledRows};
  return {ShaderId::attention_tiled, kTiledRows};
}

// attention_blocked.comp, the forward for head dims up to 64 where subgroups
// shuffle: 128 invocations, 16 query rows per workgroup. Measured on one GPU
// against attention_tiled.comp's forward: as fast at 128 keys, faster from
// 1024 (most with dropout: one Philox draw serves an invocation's 4 keys).
// Its backward is attention_blocked_backward.comp (below).
constexpr std::uint32_t kBlockedThreads = 128, kBlockedRows = 16;

// A kernel's build for register width 32 (`d_max` 32) or 64.
ShaderId of_width(std::uint32_t d_max, ShaderId width32, ShaderId width64) { return d_max == 32 ? width32 : width64; }

// Whether a blocked kernel's workgroup (kBlockedThreads, `shared_bytes`) fits the device.
bool blocked_fits(const Context& ctx, std::uint32_t shared_bytes) {
  return shared_bytes <= ctx.properties.limits.maxComputeSharedMemorySize &&
         ctx.properties.limits.maxComputeWorkGroupInvocations >= kBlockedThreads;
}

// Its build (register width 32 or 64, >= d and dv), or none where it does
// not apply: wider heads, no shuffles, too little shared memory.
std::optional<ShaderId> blocked_forward(const Context& ctx, const AttentionParams& p, std::uint32_t& d_max) {
  const std::int64_t widest = std::max(p.d, p.dv);
  if (!ctx.subgroup_shuffle || widest > 64) return std::nullopt;
  d_max = widest <= 32 ? 32 : 64;
  // Shared memory as its declarations add up: query rows, key and value tiles, weights.
  if (!blocked_fits(ctx, (kBlockedRows + 2 * 32) * d_max * 4 + kBlockedRows * 32 * 4)) return std::nullopt;
  return of_width(d_max, ShaderId::attention_blocked32, ShaderId::attention_blocked64);
}

// attention_grid.comp, the forward for head dims up to 64 over long
// sequences where subgroups shuffle: a 4 x 4 grid of scores per invocation,
// 64 query rows per workgroup of 128 invocations. Measured on one GPU
// against attention_blocked.comp with as many queries as keys
// (bench/RESULTS.md at 5bd8bfb): 1.1x faster at 512 and 1.2x at 1024, as fast at 256,
// slower at 128, where its workgroups see too few key tiles to pay for
// their 64 query rows. Fewer queries than that were not measured: they
// keep the blocked kernel's 16-row workgroups.
constexpr std::uint32_t kGridRows = 64;
constexpr std::int64_t kGridMinLength = 512;

// Its build (register width 32 or 64), or none where it does not apply.
std::optional<ShaderId> grid_forward(const Context& ctx, const AttentionParams& p) {
  const std::int64_t widest = std::max(p.d, p.dv);
  if (!ctx.subgroup_shuffle || widest > 64 || std::min(p.lq, p.lk) < kGridMinLength) return std::nullopt;
  const std::uint32_t d_max = widest <= 32 ? 32 : 64;
  // Shared memory as its declarations add up: query rows, key and value tiles of 32 rows, weights.
  if (!blocked_fits(ctx, (kGridRows * d_max + 2 * 32 * d_max + 32 * kGridRows) * 4)) return std::nullopt;
  return of_width(d_max, ShaderId::attention_grid32, ShaderId::attention_grid64);
}

// attention_blocked_backward.comp, the f32 backward for head dims up to 64
// in one pass (grad_q by float atomics): 128 invocations, 32 keys per
// workgroup, tiles of 32 queries.
constexpr std::uint32_t kBlockedBackwardKeys = 32;

// Its build (register width 32 or 64), or none for wider heads, devices
// without float atomics, or too little shared memory: the tiled kernels then
// run the backward, grad_q and grad_k/grad_v apart.
std::optional<ShaderId> blocked_backward(const Context& ctx, const AttentionParams& p, std::uint32_t& d_max) {
  const std::int64_t widest = std::max(p.d, p.dv);
  if (widest > 64 || !ctx.float_atomics) return std::nullopt;
  d_max = widest <= 32 ? 32 : 64;
  // Shared memory as its declarations add up: four row tiles, two weight
  // tiles, and the lse and 4-part D of 32 query rows.
  const std::uint32_t rows = kBlockedBackwardKeys;
  if (!blocked_fits(ctx, (4 * rows * d_max + 2 * rows * rows + rows * 5) * 4)) return std::nullopt;
  return of_width(d_max, ShaderId::attention_blocked_backward32, ShaderId::attention_blocked_backward64);
}

// Workgroups of `per` rows along x, one (batch, head) each along y (and z past 65535).
void tiled_grid(std::int64_t rows, std::int64_t bh, std::uint32_t& gx, std::uint32_t& gy, std::uint32_t& gz,
                std::uint32_t per = kTiledRows) {
  gx = std::uint32_t((rows + per - 1) / per);
  gy = std::uint32_t(std::min<std::int64_t>(bh, 65535));
  gz = std::uint32_t((bh + gy - 1) / gy);
}

void grid(std::int64_t rows, std::uint32_t& gx, std::uint32_t& gy) {
  const std::int64_t groups = std::max<std::int64_t>(1, (rows + kLocal - 1) / kLocal);
  gx = std::uint32_t(std::min<std::int64_t>(groups, 65535));
  gy = std::uint32_t((groups + gx - 1) / gx);
}

void require_dtypes(TensorArg q, TensorArg lse, bool coopmat) {
  if (q.dtype == DType::f16 && coopmat) {
    if (lse.dtype != DType::f32)
      throw DTypeError("scaled_dot_product_attention: the Vulkan f16 kernel keeps the row logsumexps in f32");
    return;
  }
  if (q.dtype != DType::f32)
    throw DTypeError(fmt::format("scaled_dot_product_attention: the Vulkan kernels take f32{}, got {}",
                                 coopmat ? " or f16" : "", dtype_name(q.dtype)));
}

void attention_forward(Backend& be, const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k,
                       TensorArg v, TensorArg mask) {
  VulkanBackend& vk = device_of(be);
  const Context& ctx = vk.context();
  require_contiguous(lse);
  require_dtypes(q, lse, ctx.coopmat_attention);
  const std::int64_t rows = p.batch * p.heads * p.lq;
  if (rows == 0) return;
  AttentionPush pc = make_push(p, mask);
  pc.qkv_slots = shared_slots({q, k, v});
  pc.out_slots = shared_slots({out});
  const TensorArg ops_in[] = {q, k, v, out, lse};
  for (int b = 0; b < 5; ++b) pc.off[b] = std::int32_t(ops_in[b].layout->offset);
  const TensorArg m = mask.storage ? mask : q;
  Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, true}, {lse, true},
                   {m, false}, {q, false}, {q, false}, {q, false}, {q, false}};
  std::uint32_t gx, gy, gz, d_max, tile;
  const std::uint32_t shared = ctx.properties.limits.maxComputeSharedMemorySize;
  if (q.dtype == DType::f16) {
    coopmat_config(p, kForward, shared, d_max, tile);
    tiled_grid(p.lq, p.batch * p.heads, gx, gy, gz);
    vk.launch(ShaderId::attention_coopmat, {kCoopmatThreads, kForward, d_max, tile, rows_aligned(p, {q, k, v, out}, 8)},
              ops, &pc, sizeof pc, gx, gy, gz);
    return;
  }
  if (const auto grid = grid_forward(ctx, p)) {
    tiled_grid(p.lq, p.batch * p.heads, gx, gy, gz, kGridRows);
    vk.launch(*grid, {kBlockedThreads, kForward, 0, 0, rows_aligned(p, {q, k, v}, 4)}, ops, &pc, sizeof pc, gx, gy, gz);
    return;
  }
  if (const auto blocked = blocked_forward(ctx, p, d_max)) {
    tiled_grid(p.lq, p.batch * p.heads, gx, gy, gz, kBlockedRows);
    vk.launch(*blocked, {kBlockedThreads, kForward, d_max, 0, rows_aligned(p, {q, k, v}, 4)}, ops, &pc, sizeof pc, gx,
              gy, gz);
    return;
  }
  if (tiled_config(p, shared, d_max, tile)) {
    tiled_grid(p.lq, p.batch * p.heads, gx, gy, gz);
    const TiledKernel kernel = tiled_kernel(ctx);
    vk.launch(kernel.shader, {kernel.local, kForward, d_max, tile, rows_aligned(p, {q, k, v}, 4)}, ops, &pc, sizeof pc,
              gx, gy, gz);
    return;
  }
  grid(rows, gx, gy);
  vk.launch(ShaderId::attention, {kLocal, kForward}, ops, &pc, sizeof pc, gx, gy);
}

void attention_backward(Backend& be, const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                        TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse,
                        TensorArg mask) {
  VulkanBackend& vk = device_of(be);
  const Context& ctx = vk.context();
  require_contiguous(lse);
  require_dtypes(q, lse, ctx.coopmat_attention);
  AttentionPush pc = make_push(p, mask);
  pc.qkv_slots = shared_slots({q, k, v});
  pc.out_slots = shared_slots({out, grad_out});
  pc.grad_slots = shared_slots({grad_q, grad_k, grad_v});
  const TensorArg in[] = {q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v};
  for (int b = 0; b < 9; ++b) pc.off[b] = std::int32_t(in[b].layout->offset);
  const TensorArg m = mask.storage ? mask : q;
  std::uint32_t gx, gy, gz, d_max, tile;
  const std::int64_t bh = p.batch * p.heads;
  if (bh == 0) return;
  // Bindings of the grad_q kernel and of the grad_k/grad_v kernel, whichever shader runs them.
  Operand q_ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {grad_q, true}, {q, false}, {q, false}};
  Operand kv_ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                      {m, false}, {grad_out, false}, {q, false}, {grad_k, true}, {grad_v, true}};
  const std::uint32_t shared = ctx.properties.limits.maxComputeSharedMemorySize;
  if (q.dtype == DType::f16) {
    const std::uint32_t aligned = rows_aligned(p, {q, k, v, out, grad_out}, 8);
    if (p.lq > 0) {
      coopmat_config(p, kGradQ, shared, d_max, tile);
      tiled_grid(p.lq, bh, gx, gy, gz);
      vk.launch(ShaderId::attention_coopmat, {kCoopmatThreads, kGradQ, d_max, tile, aligned}, q_ops, &pc, sizeof pc, gx,
                gy, gz);
    }
    if (p.lk > 0) {
      coopmat_config(p, kGradKV, shared, d_max, tile);
      tiled_grid(p.lk, bh, gx, gy, gz);
      vk.launch(ShaderId::attention_coopmat, {kCoopmatThreads, kGradKV, d_max, tile, aligned}, kv_ops, &pc, sizeof pc,
                gx, gy, gz);
    }
    return;
  }
  if (const auto blocked = blocked_backward(ctx, p, d_max)) {
    Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {grad_q, true}, {grad_k, true}, {grad_v, true}};
    fill(vk, grad_q, 0.0);  // the kernel adds into it
    tiled_grid(p.lk, bh, gx, gy, gz, kBlockedBackwardKeys);
    if (p.lk > 0)
      vk.launch(*blocked, {kBlockedThreads, kGradKV, d_max, 0, rows_aligned(p, {q, k, v, out, grad_out}, 4)}, ops, &pc,
                sizeof pc, gx, gy, gz);
    return;
  }
  const bool tiled = tiled_config(p, shared, d_max, tile);
  const TiledKernel kernel = tiled_kernel(ctx);
  const std::uint32_t aligned = rows_aligned(p, {q, k, v, out, grad_out}, 4);
  if (p.lq > 0) {
    if (tiled) {
      tiled_grid(p.lq, bh, gx, gy, gz);
      vk.launch(kernel.shader, {kernel.local, kGradQ, d_max, tile, aligned}, q_ops, &pc, sizeof pc, gx, gy, gz);
    } else {
      grid(bh * p.lq, gx, gy);
      vk.launch(ShaderId::attention, {kLocal, kGradQ}, q_ops, &pc, sizeof pc, gx, gy);
    }
  }
  if (p.lk > 0) {
    if (tiled) {
      tiled_grid(p.lk, bh, gx, gy, gz);
      vk.launch(kernel.shader, {kernel.local, kGradKV, d_max, tile, aligned}, kv_ops, &pc, sizeof pc, gx, gy, gz);
    } else {
      grid(bh * p.lk, gx, gy);
      vk.launch(ShaderId::attention, {kLocal, kGradKV}, kv_ops, &pc, sizeof pc, gx, gy);
    }
  }
}

// f16 runs on the matrix units only.
bool attention_runs(Backend& be, DType dtype) {
  return dtype == DType::f32 || device_of(be).context().coopmat_attention;
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, attention) {
  register_kernel<AttentionForwardKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f16},
                                          &vulkan::attention_forward, &vulkan::attention_runs);
  register_kernel<AttentionBackwardKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f16},
                                           &vulkan::attention_backward, &vulkan::attention_runs);
}

}  // namespace rumus
