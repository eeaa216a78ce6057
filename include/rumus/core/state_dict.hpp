#pragma once
#include <map>
#include <string>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Named tensors (parameters, buffers, optimizer state), sorted by name.
using StateDict = std::map<std::string, Tensor>;

}  // namespace rumus

RUMUS_API_END
