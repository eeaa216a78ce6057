#pragma once
// Custom differentiable functions: the user supplies forward and backward,
// written with rumus ops so they run on any device.
#include <functional>
#include <vector>

#include "rumus/autograd/tape.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::autograd {

struct CustomFunction {
  const char* name;
  // Runs with recording off.
  std::function<Tensor(const std::vector<Tensor>& inputs)> forward;
  // (grad_output, inputs, output) -> one gradient per input, undefined for none.
  std::function<std::vector<Tensor>(const Tensor& grad_output, const std::vector<Tensor>& inputs,
                                    const Tensor& output)>
      backward;
};

Tensor apply(const CustomFunction& fn, const std::vector<Tensor>& inputs);

}  // namespace rumus::autograd

RUMUS_API_END
