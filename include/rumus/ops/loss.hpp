#pragma once
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

enum class Reduction { none, mean, sum };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};
// logits [N, C] or [N, C, d...], target i64 [N] or [N, d...].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// log_probs [N, C] or [N, C, d...], target i64.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                std::int64_t ignore_index = -100);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

}  // namespace rumus

RUMUS_API_END
