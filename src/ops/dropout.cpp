// Inverted dropout: out = x * mask, mask = bernoulli(1 - p) / (1 - p), drawn fresh from the generator.
#include "rumus/ops/dropout.hpp"

#include "op_util.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus {

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  detail::check_floating("dropout", input);
  if (!(p >= 0.0 && p <= 1.0)) throw Error(fmt::format("dropout: expected 0 <= p <= 1, got {}", p));
  if (!training || p == 0.0) return input;
  Tensor mask = bernoulli(input.shape(), 1.0 - p, {.dtype = input.dtype(), .device = input.device()}, generator);
  // p == 1 drops everything (PyTorch returns zeros), without 0 * inf.
  mask = detail::unary_kernel(UnaryOp::mul_scalar, mask, p == 1.0 ? 0.0 : 1.0 / (1.0 - p));
  Tensor out = detail::binary_kernel(BinaryOp::mul, "dropout", input.detach(), mask, input.dtype());
  if (autograd::needs_grad({&input}))
    autograd::record("dropout", {input}, out, [sm = autograd::SavedTensor(mask)](const Tensor& g) {
      return std::vector<Tensor>{detail::binary_kernel(BinaryOp::mul, "dropout", g, sm.get(), g.dtype())};
    });
  return out;
}

}  // namespace rumus
