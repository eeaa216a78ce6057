#include "rumus/nn/activation.hpp"

#include <fmt/format.h>

#include "rumus/ops/creation.hpp"

namespace rumus::nn {

PReLU::PReLU(std::int64_t num_parameters, double init) {
  if (num_parameters < 1) throw ValueError(fmt::format("PReLU: expected num_parameters >= 1, got {}", num_parameters));
  weight = register_parameter("weight", full({num_parameters}, init));
}

}  // namespace rumus::nn
