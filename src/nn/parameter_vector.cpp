#include "rumus/nn/parameter_vector.hpp"

#include <fmt/format.h>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/join.hpp"

namespace rumus::nn {

Tensor parameters_to_vector(const std::vector<Tensor>& parameters) {
  if (parameters.empty()) throw ValueError("parameters_to_vector: expected at least one parameter, got none");
  std::vector<Tensor> flat;
  for (const Tensor& p : parameters) {
    if (p.device() != parameters.front().device())
      throw DeviceError(fmt::format("parameters_to_vector: expected every parameter on {}, got one on {}",
                                    parameters.front().device().str(), p.device().str()));
    flat.push_back(p.reshape({-1}));
  }
  return cat(flat, 0);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters) {
  std::int64_t total = 0;
  for (const Tensor& p : parameters) total += p.numel();
  if (vec.dim() != 1 || vec.numel() != total)
    throw ShapeError(fmt::format("vector_to_parameters: expected a 1-D vector of {} elements (the parameters' "
                                 "total), got shape {}",
                                 total, shape_str(vec.shape())));
  NoGradGuard no_grad;
  std::int64_t at = 0;
  for (const Tensor& p : parameters) {
    Tensor(p).copy_(vec.narrow(0, at, p.numel()).reshape(p.shape()));
    at += p.numel();
  }
}

}  // namespace rumus::nn
