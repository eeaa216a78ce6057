// Inverted dropout: out = x * mask, mask = bernoulli(1 - p) / (1 - p), drawn fresh from the generator.
#include "rumus/ops/dropout.hpp"

#include "op_util.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus {

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  detail::check_floating("dropout", input);
  if (!(p >= 0.0 && p <= 1.0)) throw Error(fmt::format("dropout: expected 0 <= p <= 1, got {}", p));
  if (!training || p == 0.0) return input;
  // The mask holds 1 / (1 - p) where kept, drawn in one pass; p == 1 drops
  // everything (PyTorch returns zeros), without 0 * inf.
  Tensor mask = detail::alloc(input.shape(), input.dtype(), input.device(), "dropout");
  detail::random_kernel("dropout", RandomKind::bernoulli, mask, 1.0 - p, p == 1.0 ? 0.0 : 1.0 / (1.0 - p),
                        generator ? *generator : default_generator());
  Tensor out = detail::binary_kernel(BinaryOp::mul, "dropout", input.detach(), mask, input.dtype());
  if (autograd::needs_grad({&input}))
    autograd::record("dropout", {input}, out, [sm = autograd::SavedTensor(mask)](const Tensor& g) {
      return std::vector<Tensor>{detail::binary_kernel(BinaryOp::mul, "dropout", g, sm.get(), g.dtype())};
    });
  return out;
}

}  // namespace rumus
