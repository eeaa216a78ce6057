#pragma once
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);

// The inverses, as views of the input (gradients flow back to it):
// pieces of `split_size` along dim (the last may be shorter);
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim = 0);
// `chunks` pieces of ceil(size / chunks) (fewer when that covers the dim, as torch.chunk);
std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim = 0);
// every index of dim, with dim removed.
std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim = 0);

}  // namespace rumus

RUMUS_API_END
