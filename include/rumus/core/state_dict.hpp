#pragma once
#include <map>
#include <string>

#include "rumus/core/tensor.hpp"

namespace rumus {

// Named tensors (parameters, buffers, optimizer state), sorted by name.
using StateDict = std::map<std::string, Tensor>;

}  // namespace rumus
