#include "rumus/nn/activation.hpp"

#include <fmt/format.h>

namespace rumus::nn {

Dropout::Dropout(double p) : p(p) {
  // As torch.nn.Dropout: p = 1 is allowed (all zeros in training).
  if (!(p >= 0 && p <= 1)) throw ValueError(fmt::format("Dropout: expected 0 <= p <= 1, got {}", p));
}

}  // namespace rumus::nn
