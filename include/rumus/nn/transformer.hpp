#pragma once
// Transformer building blocks on the fused scaled_dot_product_attention, with
// PyTorch's parameter names so that state dicts map one to one.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rumus/nn/activation.hpp"
#include "rumus/nn/embedding.hpp"
#include "rumus/nn/linear.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/nn/normalization.hpp"
#include "rumus/nn/sequential.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// torch.nn.MultiheadAttention with batch_first = true: inputs (N, L, E),
// parameters in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight,
// out_proj.bias. Masks follow PyTorch's MultiheadAttention (not SDPA's):
// key_padding_mask (N, S) bool (or u8) true = padding, ignored; attn_mask (L, S) or
// (N * num_heads, L, S): bool (or u8) true = not allowed, or floating, added to the
// scores. Returns the attention output only (need_weights = false): the
// weights are never materialised.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0.0, bool bias = true);
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask = {},
                 const Tensor& attn_mask = {}, bool is_causal = false);
  // Self-attention.
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  std::string type_name() const override { return "MultiheadAttention"; }

  std::int64_t embed_dim, num_heads, head_dim;
  double dropout;
  Tensor in_proj_weight, in_proj_bias;  // bias undefined without bias
  Linear out_proj;
};

// torch.nn.TransformerEncoderLayer with batch_first = true: self_attn,
// linear1, dropout, linear2, norm1, norm2, dropout1, dropout2; post-norm
// (norm_first = false, PyTorch's default) or pre-norm; "relu" or "gelu".
struct TransformerEncoderLayerOptions {
  std::int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";
  double layer_norm_eps = 1e-5;
  bool norm_first = false;
  bool bias = true;
};

class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask = {},
                 bool is_causal = false);
  Tensor forward(const Tensor& src) override { return forward(src, {}); }
  std::string type_name() const override { return "TransformerEncoderLayer"; }

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;

 private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal);
  Tensor feed_forward_block(const Tensor& x);
};

// A decoder-only (GPT) block: pre-norm causal self-attention and a GELU MLP,
// x + attn(norm1(x)), then x + mlp(norm2(x)). The same parameters and names
// as a TransformerEncoderLayer with norm_first = true, activation "gelu".
class DecoderOnlyBlock : public TransformerEncoderLayer {
 public:
  DecoderOnlyBlock(std::int64_t d_model, std::int64_t nhead, std::int64_t dim_feedforward, double dropout = 0.1);
  Tensor forward(const Tensor& x) override { return TransformerEncoderLayer::forward(x, {}, {}, true); }
  std::string type_name() const override { return "DecoderOnlyBlock"; }
};

// Learned positions: x (N, L, E) + weight[:L], weight [max_len, E] ~ N(0, 0.02²).
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(std::int64_t max_len, std::int64_t embedding_dim);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LearnedPositionalEmbedding"; }
  std::int64_t max_len;
  Tensor weight;
};

// Fixed sinusoids (Vaswani et al.): pe[p, 2i] = sin(p / 10000^(2i/E)),
// pe[p, 2i + 1] = cos(same); x (N, L, E) + pe[:L]. pe is a non-persistent
// buffer, so it is not in the state dict.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(std::int64_t max_len, std::int64_t embedding_dim);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SinusoidalPositionalEncoding"; }
  std::int64_t max_len;
  Tensor pe;
};

// A small GPT: token embedding, learned or sinusoidal positions, a stack of
// DecoderOnlyBlocks, a final LayerNorm and a head to vocabulary logits.
// With tie_weights the head is the token embedding's weight (one parameter,
// "token_embedding.weight"; no "head.weight" in the state dict).
struct GPTConfig {
  std::int64_t vocab_size = 256;
  std::int64_t context = 128;
  std::int64_t d_model = 256;
  std::int64_t num_heads = 4;
  std::int64_t num_layers = 4;
  std::int64_t dim_feedforward = 0;  // 0 = 4 * d_model
  double dropout = 0.1;
  bool sinusoidal_positions = false;
  bool tie_weights = true;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config);
  // tokens (N, L) integer, L <= context -> logits (N, L, vocab_size).
  Tensor forward(const Tensor& tokens) override;
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  Embedding token_embedding;
  std::unique_ptr<LearnedPositionalEmbedding> position_embedding;  // "position_embedding"
  std::unique_ptr<SinusoidalPositionalEncoding> position_encoding;  // "position_encoding"
  Dropout dropout;
  Sequential blocks;  // DecoderOnlyBlocks: "blocks.0", ...
  LayerNorm norm;
  std::unique_ptr<Linear> head;  // only without tie_weights
};

}  // namespace rumus::nn

RUMUS_API_END
