#pragma once
#include <optional>

#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// softmax(q kᵀ * scale + mask) v, fused: memory linear in the sequence length
// (the scores are computed tile by tile with an online softmax and recomputed
// in backward; only one logsumexp per query row is kept).
//
// q: (..., Lq, D), k: (..., Lk, D), v: (..., Lk, Dv) with the same leading
// dims (PyTorch's (B, H, L, D), or (N, L, D)); the result is (..., Lq, Dv),
// laid out as (B, Lq, H, Dv) as PyTorch's fused kernels lay theirs, so
// `result.transpose(1, 2).reshape({B, Lq, H * Dv})` is a view. q, k and v
// that are such transposed views (or views of one packed projection) are
// read in place; other layouts are copied first.
// attn_mask, broadcastable to (..., Lq, Lk): bool (or u8) where nonzero means
// "attend", as in PyTorch, or a floating tensor added to the scores. A
// floating mask that requires grad gets its gradient, as in PyTorch's math
// path: that call runs the unfused composition (matmul, softmax, dropout,
// matmul), whose memory is quadratic and whose dropout draws differ from the
// fused kernel's. is_causal keeps key j <= query i (top-left
// aligned, as PyTorch) and excludes attn_mask. scale defaults to 1/sqrt(D).
// dropout_p > 0 drops attention weights with the generator's Philox stream;
// the backward regenerates the same mask. A query row with every key masked
// gives zeros (and zero gradients). Under create_graph the backward is the
// math path's formula on the saved inputs (with the same dropout mask), so
// gradients differentiate again, to any order.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* generator = nullptr);

// Self-attention straight from one packed projection: qkv (N, L, 3E) holds
// q, k and v side by side (as x W_inᵀ gives them, W_in = [W_q; W_k; W_v]),
// each E = num_heads * head_dim wide; the result (N, L, E) has its heads
// merged. The same as scaled_dot_product_attention on the heads split from
// qkv, without the copies that splitting and merging cost: the kernels read
// the heads where they lie and write qkv's gradient in one buffer. attn_mask
// broadcasts to (N, num_heads, L, L).
Tensor packed_self_attention(const Tensor& qkv, std::int64_t num_heads, const Tensor& attn_mask = {},
                             double dropout_p = 0.0, bool is_causal = false, std::optional<double> scale = std::nullopt,
                             Generator* generator = nullptr);

}  // namespace rumus

RUMUS_API_END
