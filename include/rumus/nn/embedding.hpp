#pragma once
#include <optional>

#include "rumus/nn/module.hpp"
#include "rumus/ops/embedding.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// A lookup table [num_embeddings, dim] initialised N(0, 1) (padding row zeroed), as PyTorch.
class Embedding : public Module {
 public:
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::optional<std::int64_t> padding_idx = {});
  Tensor forward(const Tensor& indices) override { return embedding(indices, weight, padding_idx); }
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  std::optional<std::int64_t> padding_idx;
  Tensor weight;
};

}  // namespace rumus::nn

RUMUS_API_END
