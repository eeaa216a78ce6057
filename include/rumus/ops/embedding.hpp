#pragma once
#include <optional>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// weight [num, dim], indices integer of any shape -> [indices..., dim].
// Rows at padding_idx receive no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<std::int64_t> padding_idx = {});

}  // namespace rumus

RUMUS_API_END
