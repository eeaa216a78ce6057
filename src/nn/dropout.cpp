#include "rumus/nn/activation.hpp"

#include <fmt/format.h>

namespace rumus::nn {

Dropout::Dropout(double p) : p(p) {
  if (!(p >= 0 && p < 1)) throw Error(fmt::format("Dropout: expected 0 <= p < 1, got {}", p));
}

}  // namespace rumus::nn
