#pragma once
// The random family: counter-based draws (philox.hpp), so every device
// draws the same numbers for a seed and an offset (src/ops/creation.cpp,
// dropout.cpp).
#include <cmath>

#include "kernel_registry.hpp"

namespace rumus {

// `state`, when its storage is not null: a dense 4-element i32 tensor at
// offset 0 holding (seed lo, seed hi, offset lo, offset hi), which a device
// may read at run time instead of seed/offset (which hold the same values),
// so a captured draw takes the numbers each replay writes there.
struct RandomKernel {
  static constexpr std::string_view name = "random";
  using Fn = void(Backend&, RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
                  TensorArg state);
};

// Dropout's forward in one pass over contiguous operands: mask as
// random(bernoulli, keep, scale, seed, offset) draws it, and out = in * mask.
// Optional: where a device has none, ops draw the mask and multiply.
struct DropoutForwardKernel {
  static constexpr std::string_view name = "dropout_forward";
  using Fn = void(Backend&, TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed,
                  std::uint64_t offset, double keep, double scale);
};

// The 24-bit threshold a draw must reach to keep an element dropped with
// probability p (bernoulli draws, attention's dropout).
inline std::uint32_t dropout_threshold(double p) {
  const double t = std::ceil(p * 16777216.0);
  return t <= 0 ? 0u : t >= 16777216.0 ? 16777216u : std::uint32_t(t);
}

}  // namespace rumus
