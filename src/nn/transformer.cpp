#include "rumus/nn/transformer.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/nn/init.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/attention.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus::nn {

namespace {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// A large finite penalty: masks combined into one additive mask stay free of
// inf - inf (a row with every key masked then averages instead of giving zeros).
constexpr double kMaskedScore = -1e30;

// A boolean mask (True where attention is not allowed, as nn.MultiheadAttention
// reads it); u8 is read as bool, as before bool existed.
bool is_mask(const Tensor& t) { return t.dtype() == DType::boolean || t.dtype() == DType::u8; }
Tensor additive(const Tensor& keep, DType dtype) { return (keep.to(dtype) - 1.0) * -kMaskedScore; }

}  // namespace

MultiheadAttention::MultiheadAttention(std::int64_t e, std::int64_t h, double p, bool bias)
    : embed_dim(e), num_heads(h), head_dim(h > 0 ? e / h : 0), dropout(p), out_proj(e, e, bias) {
  if (e < 1 || h < 1 || e % h != 0)
    throw Error(fmt::format("MultiheadAttention: expected embed_dim divisible by num_heads (both >= 1), got {} and {}",
                            e, h));
  if (!(p >= 0.0 && p <= 1.0)) throw Error(fmt::format("MultiheadAttention: expected 0 <= dropout <= 1, got {}", p));
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * e, e}));
  init::xavier_uniform_(in_proj_weight);
  if (bias) {
    in_proj_bias = register_parameter("in_proj_bias", zeros({3 * e}));
    init::zeros_(out_proj.bias);
  }
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask, const Tensor& attn_mask, bool is_causal) {
  for (const Tensor* t : {&query, &key, &value})
    if (!t->defined() || t->dim() != 3 || t->shape()[2] != embed_dim)
      throw ShapeError(fmt::format("MultiheadAttention: expected (N, L, {}) query, key and value (batch_first), got {}",
                                   embed_dim, t->defined() ? shape_str(t->shape()) : "an undefined tensor"));
  const std::int64_t n = query.shape()[0], l = query.shape()[1], s = key.shape()[1], e = embed_dim, h = num_heads;
  if (key.shape()[0] != n || value.shape()[0] != n || value.shape()[1] != s)
    throw ShapeError(fmt::format("MultiheadAttention: key and value must share the batch and length, got {}, {} and {}",
                                 shape_str(query.shape()), shape_str(key.shape()), shape_str(value.shape())));
  // PyTorch's MultiheadAttention masks mark what is *not* attended; SDPA's mark what is.
  Tensor mask;
  if (attn_mask.defined()) {
    Tensor m = attn_mask;
    if (m.dim() == 3) {
      if (m.shape()[0] != n * h)
        throw ShapeError(fmt::format("MultiheadAttention: expected a 3-D attn_mask of ({}, {}, {}), got {}", n * h, l,
                                     s, shape_str(m.shape())));
      m = m.reshape({n, h, l, s});
    }
    mask = is_mask(m) ? eq(m, 0.0) : m;
  }
  if (key_padding_mask.defined()) {
    if (key_padding_mask.shape() != Shape{n, s})
      throw ShapeError(fmt::format("MultiheadAttention: expected key_padding_mask of shape [{}, {}], got {}", n, s,
                                   shape_str(key_padding_mask.shape())));
    Tensor kp = key_padding_mask.reshape({n, 1, 1, s});
    kp = is_mask(kp) ? eq(kp, 0.0) : kp;
    if (!mask.defined()) {
      mask = kp;
    } else if (mask.dtype() == DType::boolean && kp.dtype() == DType::boolean) {
      mask = gt(mask.to(query.dtype()) * kp.to(query.dtype()), 0.5);
    } else {
      auto as_additive = [&](const Tensor& t) { return t.dtype() == DType::boolean ? additive(t, query.dtype()) : t; };
      mask = as_additive(mask) + as_additive(kp);
    }
  }
  if (is_causal && mask.defined()) {
    // Causal and explicit masks together: fold the causal rule into the mask (SDPA takes one or the other).
    std::vector<std::uint8_t> tril(std::size_t(l * s));
    for (std::int64_t i = 0; i < l; ++i)
      for (std::int64_t j = 0; j < s; ++j) tril[std::size_t(i * s + j)] = j <= i;
    Tensor causal = tensor(tril, {l, s}).to(query.device());
    mask = mask.dtype() == DType::boolean ? gt(mask.to(query.dtype()) * causal.to(query.dtype()), 0.5)
                                     : mask + additive(causal, query.dtype());
  }
  const double p = is_training() ? dropout : 0.0;
  const bool causal = is_causal && !mask.defined();
  if (&query == &key && &key == &value) {
    // Self-attention: one projection, whose heads the kernels read in place.
    return out_proj(packed_self_attention(linear(query, in_proj_weight, in_proj_bias), h, mask, p, causal));
  }
  auto project = [&](const Tensor& x, std::int64_t i) {
    Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, i * e, e) : Tensor();
    return linear(x, in_proj_weight.narrow(0, i * e, e), b).reshape({n, x.shape()[1], h, head_dim}).transpose(1, 2);
  };
  // The output lies as [n, l, h, head_dim]: merging its heads is a view.
  Tensor out = scaled_dot_product_attention(project(query, 0), project(key, 1), project(value, 2), mask, p, causal);
  return out_proj(out.transpose(1, 2).reshape({n, l, e}));
}

TransformerEncoderLayer::TransformerEncoderLayer(std::int64_t d_model, std::int64_t nhead,
                                                 TransformerEncoderLayerOptions o)
    : options(o),
      self_attn(d_model, nhead, o.dropout, o.bias),
      linear1(d_model, o.dim_feedforward, o.bias),
      dropout(o.dropout),
      linear2(o.dim_feedforward, d_model, o.bias),
      norm1({d_model}, o.layer_norm_eps),
      norm2({d_model}, o.layer_norm_eps),
      dropout1(o.dropout),
      dropout2(o.dropout) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw Error(fmt::format("TransformerEncoderLayer: expected activation \"relu\" or \"gelu\", got \"{}\"",
                            o.activation));
  register_modules({{"self_attn", self_attn},
                    {"linear1", linear1},
                    {"dropout", dropout},
                    {"linear2", linear2},
                    {"norm1", norm1},
                    {"norm2", norm2},
                    {"dropout1", dropout1},
                    {"dropout2", dropout2}});
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding,
                                                     bool is_causal) {
  return dropout1(self_attn.forward(x, x, x, padding, mask, is_causal));
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  Tensor hidden = linear1(x);
  hidden = options.activation == "gelu" ? gelu(hidden) : relu(hidden);
  return dropout2(linear2(dropout(hidden)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal) {
  Tensor x = src;
  if (options.norm_first) {
    x = x + self_attention_block(norm1(x), src_mask, src_key_padding_mask, is_causal);
    return x + feed_forward_block(norm2(x));
  }
  x = norm1(x + self_attention_block(x, src_mask, src_key_padding_mask, is_causal));
  return norm2(x + feed_forward_block(x));
}

DecoderOnlyBlock::DecoderOnlyBlock(std::int64_t d_model, std::int64_t nhead, std::int64_t dim_feedforward,
                                   double dropout)
    : TransformerEncoderLayer(d_model, nhead,
                              {.dim_feedforward = dim_feedforward, .dropout = dropout, .activation = "gelu",
                               .norm_first = true}) {}

LearnedPositionalEmbedding::LearnedPositionalEmbedding(std::int64_t max_len_, std::int64_t dim) : max_len(max_len_) {
  if (max_len_ < 1 || dim < 1)
    throw Error(fmt::format("LearnedPositionalEmbedding: expected max_len and embedding_dim >= 1, got {} and {}",
                            max_len_, dim));
  weight = register_parameter("weight", empty({max_len_, dim}));
  init::normal_(weight, 0.0, 0.02);
}

namespace {
void check_positions(const char* layer, const Tensor& x, const Tensor& table, std::int64_t max_len) {
  if (!x.defined() || x.dim() != 3 || x.shape()[2] != table.shape()[1])
    throw ShapeError(fmt::format("{}: expected input (N, L, {}), got {}", layer, table.shape()[1],
                                 x.defined() ? shape_str(x.shape()) : "an undefined tensor"));
  if (x.shape()[1] > max_len)
    throw ShapeError(fmt::format("{}: sequence length {} exceeds max_len {}", layer, x.shape()[1], max_len));
}
}  // namespace

Tensor LearnedPositionalEmbedding::forward(const Tensor& x) {
  check_positions("LearnedPositionalEmbedding", x, weight, max_len);
  return x + weight.narrow(0, 0, x.shape()[1]);
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(std::int64_t max_len_, std::int64_t dim)
    : max_len(max_len_) {
  if (max_len_ < 1 || dim < 1)
    throw Error(fmt::format("SinusoidalPositionalEncoding: expected max_len and embedding_dim >= 1, got {} and {}",
                            max_len_, dim));
  std::vector<float> table(std::size_t(max_len_ * dim));
  for (std::int64_t p = 0; p < max_len_; ++p)
    for (std::int64_t i = 0; i < dim; ++i) {
      const double angle = double(p) / std::pow(10000.0, double(i - i % 2) / double(dim));
      table[std::size_t(p * dim + i)] = float(i % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  pe = register_buffer("pe", tensor(table, {max_len_, dim}), /*persistent=*/false);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x) {
  check_positions("SinusoidalPositionalEncoding", x, pe, max_len);
  Tensor rows = pe.narrow(0, 0, x.shape()[1]);
  return x + (rows.dtype() == x.dtype() ? rows : rows.to(x.dtype()));
}

GPT::GPT(const GPTConfig& c)
    : config(c),
      token_embedding(c.vocab_size, c.d_model),
      dropout(c.dropout),
      norm({c.d_model}) {
  if (c.context < 1 || c.num_layers < 0)
    throw Error(fmt::format("GPT: expected context >= 1 and num_layers >= 0, got {} and {}", c.context, c.num_layers));
  register_module("token_embedding", token_embedding);
  if (c.sinusoidal_positions) {
    position_encoding = std::make_unique<SinusoidalPositionalEncoding>(c.context, c.d_model);
    register_module("position_encoding", *position_encoding);
  } else {
    position_embedding = std::make_unique<LearnedPositionalEmbedding>(c.context, c.d_model);
    register_module("position_embedding", *position_embedding);
  }
  register_module("dropout", dropout);
  const std::int64_t ff = c.dim_feedforward > 0 ? c.dim_feedforward : 4 * c.d_model;
  for (std::int64_t i = 0; i < c.num_layers; ++i)
    blocks.push_back(std::make_shared<DecoderOnlyBlock>(c.d_model, c.num_heads, ff, c.dropout));
  register_module("blocks", blocks);
  register_module("norm", norm);
  if (!c.tie_weights) {
    head = std::make_unique<Linear>(c.d_model, c.vocab_size, false);
    register_module("head", *head);
  }
  // GPT-2's initialisation: matrices N(0, 0.02²), biases 0, LayerNorms at identity.
  for (auto& [name, p] : named_parameters()) {
    if (name.find("norm") != std::string::npos) continue;
    if (p.dim() >= 2)
      init::normal_(p, 0.0, 0.02);
    else
      init::zeros_(p);
  }
}

Tensor GPT::forward(const Tensor& tokens) {
  if (!tokens.defined() || tokens.dim() != 2)
    throw ShapeError(fmt::format("GPT: expected tokens (N, L), got {}",
                                 tokens.defined() ? shape_str(tokens.shape()) : "an undefined tensor"));
  if (tokens.shape()[1] > config.context)
    throw ShapeError(fmt::format("GPT: sequence length {} exceeds the context {}", tokens.shape()[1], config.context));
  Tensor x = token_embedding(tokens);
  x = position_embedding ? (*position_embedding)(x) : (*position_encoding)(x);
  x = blocks(dropout(x));
  x = norm(x);
  return head ? (*head)(x) : linear(x, token_embedding.weight);
}

}  // namespace rumus::nn
