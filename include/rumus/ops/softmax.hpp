#pragma once
#include "rumus/core/tensor.hpp"

namespace rumus {

Tensor softmax(const Tensor& input, std::int64_t dim);
Tensor log_softmax(const Tensor& input, std::int64_t dim);

}  // namespace rumus
