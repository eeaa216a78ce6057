#include "rumus/nn/embedding.hpp"
#include "rumus/nn/deferred_init.hpp"

#include <fmt/format.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/nn/init.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn {
namespace {
void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 1) throw Error(fmt::format("{}: expected {} >= 1, got {}", layer, what, v));
}
}  // namespace

Embedding::Embedding(std::int64_t num, std::int64_t dim, std::optional<std::int64_t> pad) {
  check_positive("Embedding", "num_embeddings", num);
  check_positive("Embedding", "embedding_dim", dim);
  if (pad && *pad < 0) *pad += num;
  if (pad && (*pad < 0 || *pad >= num))
    throw Error(fmt::format("Embedding: padding_idx must lie in [-{}, {}), got {}", num, num, *pad));
  padding_idx = pad;
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight);
  if (pad) {
    materialize(weight);  // under a DeferredInit the padding row needs the bytes
    NoGradGuard no_grad;
    weight.select(0, *pad).zero_();
  }
}

}  // namespace rumus::nn
