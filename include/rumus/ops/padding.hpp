#pragma once
// torch.nn.functional.pad.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Pads (or, with negative sizes in "constant" mode, crops) the trailing dims:
// `pad` holds (before, after) pairs, last dim first, as PyTorch's
// {left, right, top, bottom, front, back}. Modes:
//   "constant"  fills with `value` (0 when not given), any number of dims;
//   "reflect"   mirrors without repeating the edge (each size < the dim's size);
//   "replicate" repeats the edge;
//   "circular"  wraps around (each size <= the dim's size).
// The last three pad the last 1 to 3 dims of an input with one or two more
// dims than that (batched or unbatched), and take no `value`. Composed of
// views, cat and gather: differentiable to any order on every device.
Tensor pad(const Tensor& input, const std::vector<std::int64_t>& pad, const std::string& mode = "constant",
           std::optional<double> value = std::nullopt);

}  // namespace rumus

RUMUS_API_END
