#pragma once
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch.matmul semantics: 1-D (dot / vector-matrix), 2-D, batched with broadcasting.
Tensor matmul(const Tensor& a, const Tensor& b);
// [B, M, K] x [B, K, N] -> [B, M, N]; no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);

}  // namespace rumus

RUMUS_API_END
