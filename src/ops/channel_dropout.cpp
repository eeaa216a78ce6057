// dropout2d and dropout1d: one Bernoulli draw per (sample, channel), broadcast over the positions.
#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

namespace {

Tensor channel_dropout(const char* op, const Tensor& input, double p, bool training, Generator* gen,
                       std::int64_t batched_dims) {
  detail::check_defined(op, input);
  detail::check_floating(op, input);
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError(fmt::format("{}: expected 0 <= p <= 1, got {}", op, p));
  if (input.dim() != batched_dims && input.dim() != batched_dims - 1)
    throw ShapeError(fmt::format("{}: expected input of {} dims (batched) or {} (unbatched), got {}", op,
                                 batched_dims, batched_dims - 1, shape_str(input.shape())));
  if (!training || p == 0.0) return input;
  if (p == 1.0) return mul(input, 0.0);
  // [N, C, 1, ...] or [C, 1, ...]: the channel dims kept, the positions broadcast.
  const std::int64_t channel_dims = input.dim() == batched_dims ? 2 : 1;
  Shape mask_shape(std::size_t(input.dim()), 1);
  for (std::int64_t d = 0; d < channel_dims; ++d) mask_shape[std::size_t(d)] = input.shape()[std::size_t(d)];
  const Tensor keep = bernoulli(mask_shape, 1.0 - p, {.dtype = input.dtype(), .device = input.device()}, gen);
  return mul(input, mul(keep, 1.0 / (1.0 - p)));
}

}  // namespace

Tensor dropout2d(const Tensor& input, double p, bool training, Generator* gen) {
  return channel_dropout("dropout2d", input, p, training, gen, 4);
}

Tensor dropout1d(const Tensor& input, double p, bool training, Generator* gen) {
  return channel_dropout("dropout1d", input, p, training, gen, 3);
}

}  // namespace rumus
