#include "rumus/ops/loss.hpp"

#include "op_util.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  detail::check_same_device("mse_loss", input, target);
  detail::check_floating("mse_loss", input);
  if (input.shape() != target.shape())
    throw ShapeError(fmt::format("mse_loss: input shape {} differs from target shape {}", shape_str(input.shape()),
                                 shape_str(target.shape())));
  Tensor sq = square(sub(input, target));
  switch (reduction) {
    case Reduction::none: return sq;
    case Reduction::sum: return sum(sq);
    case Reduction::mean: return mean(sq);
  }
  return sq;
}

}  // namespace rumus
