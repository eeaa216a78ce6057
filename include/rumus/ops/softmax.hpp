#pragma once
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor softmax(const Tensor& input, std::int64_t dim);
Tensor log_softmax(const Tensor& input, std::int64_t dim);
Tensor softmin(const Tensor& input, std::int64_t dim);  // softmax(-input, dim)

}  // namespace rumus

RUMUS_API_END
