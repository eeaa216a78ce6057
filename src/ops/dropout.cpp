// Inverted dropout: out = x * mask, mask = bernoulli(1 - p) / (1 - p), drawn fresh from the generator.
#include "rumus/ops/dropout.hpp"

#include "op_util.hpp"
#include "../backend/random.hpp"
#include "rumus/core/capture.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  detail::check_floating("dropout", input);
  if (!(p >= 0.0 && p <= 1.0)) throw Error(fmt::format("dropout: expected 0 <= p <= 1, got {}", p));
  if (!training || p == 0.0) return input;
  // The mask holds 1 / (1 - p) where kept, drawn in one pass; p == 1 drops
  // everything (PyTorch returns zeros), without 0 * inf.
  Tensor mask = detail::alloc(input.shape(), input.dtype(), input.device(), "dropout");
  const double keep = 1.0 - p, scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Generator& gen = generator ? *generator : default_generator();
  Backend& be = backend(input.device());
  Tensor out;
  if (supports<DropoutForwardKernel>(be, input.dtype()) && !(is_capturing() && be.can_capture())) {
    // Draw and multiply in one pass (the CPU), from the numbers random_kernel would take.
    Tensor x = input.detach().contiguous();
    out = detail::alloc(input.shape(), input.dtype(), input.device(), "dropout");
    const std::uint64_t seed = gen.seed(), offset = gen.advance(std::uint64_t(input.numel()));
    if (input.numel() > 0)
      detail::kernel<DropoutForwardKernel>("dropout", x)(detail::arg(out), detail::arg(mask), detail::arg(x), seed,
                                                         offset, keep, scale);
  } else {
    detail::random_kernel("dropout", RandomKind::bernoulli, mask, keep, scale, gen);
    out = detail::binary_kernel(BinaryOp::mul, "dropout", input.detach(), mask, input.dtype());
  }
  if (autograd::needs_grad({&input}))
    autograd::record("dropout", {input}, out, [sm = autograd::SavedTensor(mask)](const Tensor& g) {
      // Under create_graph the same product, recorded: linear in g, so differentiable to any order.
      if (grad_enabled()) return std::vector<Tensor>{mul(g, sm.get())};
      return std::vector<Tensor>{detail::binary_kernel(BinaryOp::mul, "dropout", g, sm.get(), g.dtype())};
    }, {}, autograd::Backward::differentiable);
  return out;
}

}  // namespace rumus
