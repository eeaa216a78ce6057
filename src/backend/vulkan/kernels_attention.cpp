// Host side of fused attention (shaders/attention.comp): one invocation per
// query row (forward, grad_q) or key row (grad_k, grad_v).
#include <algorithm>

#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::AttentionPush;
constexpr std::uint32_t kLocal = 64;
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
  std::uint32_t gx, gy;
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
  std::uint32_t gx, gy;
  if (p.lq > 0) {
    Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {grad_q, true}, {q, false}, {q, false}};
    grid(p.batch * p.heads * p.lq, gx, gy);
    launch("attention", {kLocal, kGradQ}, ops, &pc, sizeof pc, gx, gy);
  }
  if (p.lk > 0) {
    Operand ops[] = {{q, false}, {k, false}, {v, false}, {out, false}, {lse, false},
                     {m, false}, {grad_out, false}, {q, false}, {grad_k, true}, {grad_v, true}};
    grid(p.batch * p.heads * p.lk, gx, gy);
    launch("attention", {kLocal, kGradKV}, ops, &pc, sizeof pc, gx, gy);
  }
}

}  // namespace rumus::vulkan
