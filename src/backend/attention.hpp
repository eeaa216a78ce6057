#pragma once
// The attention family (src/ops/attention.cpp): fused scaled dot-product
// attention over [batch, heads, L, W] operands.
#include "random.hpp"  // dropout_threshold
#include "kernel_registry.hpp"

namespace rumus {

// q [B, H, lq, d], k [B, H, lk, d], v [B, H, lk, dv], out [B, H, lq, dv] and
// their gradients, each laid out as head_slots() describes (q, k and v alike;
// out and grad_out alike; the three gradients alike), and a contiguous
// lse [B * H, lq] (the row logsumexp of the scaled, masked scores; -inf for
// a row with every key masked). `mask`, when its storage is
// not null, is a 4-D view [batch, heads, lq, lk] (stride 0 on broadcast dims):
// u8 = keep where nonzero, floating = added to the scores. causal keeps
// key j <= query i. With dropout_p > 0, weight e = (bh * lq + i) * lk + j is
// kept when the top 24 bits of word e % 4 of philox(seed, offset + e / 4) are
// >= dropout_threshold(dropout_p) (four weights per draw, as bernoulli), and
// scaled by 1 / (1 - dropout_p); backward regenerates the same mask. An
// integer test, so devices agree exactly.
struct AttentionParams {
  std::int64_t batch = 1, heads = 1, lq = 0, lk = 0, d = 0, dv = 0;
  double scale = 1.0;
  bool causal = false;
  double dropout_p = 0.0;
  std::uint64_t seed = 0, offset = 0;
};

// How an attention operand [B, H, L, W] lies in memory: its heads one after
// another, each [L, W] row-major (0); or its heads side by side along rows
// that lie `slots` head widths apart, as in a [B, L, H, W] tensor (slots = H)
// or in one packed q/k/v projection (slots = 3H), returning slots; -1 for
// any other layout.
std::int64_t head_slots(const Layout& l);

// Writes out and lse.
struct AttentionForwardKernel {
  static constexpr std::string_view name = "attention_forward";
  using Fn = void(Backend&, const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q,
                  TensorArg k, TensorArg v, TensorArg mask);
};

// Overwrites grad_q, grad_k, grad_v from grad_out and the forward's operands,
// recomputing the scores tile by tile (no [lq, lk] buffer).
struct AttentionBackwardKernel {
  static constexpr std::string_view name = "attention_backward";
  using Fn = void(Backend&, const AttentionParams& p, TensorArg grad_q, TensorArg grad_k,
                  TensorArg grad_v, TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out,
                  TensorArg lse, TensorArg mask);
};

}  // namespace rumus
