#include <fmt/format.h>

#include "rumus/nn/pooling.hpp"

namespace rumus::nn {

std::string AdaptiveMaxPool2d::extra_repr() const {
  return fmt::format("output_size=({}, {})", output_size[0], output_size[1]);
}
std::string AdaptiveMaxPool1d::extra_repr() const { return fmt::format("output_size={}", output_size); }
std::string MaxUnpool2d::extra_repr() const {
  const Size2 stride{options.stride[0] ? options.stride[0] : options.kernel[0],
                     options.stride[1] ? options.stride[1] : options.kernel[1]};
  return fmt::format("kernel_size=({}, {}), stride=({}, {}), padding=({}, {})", options.kernel[0], options.kernel[1],
                     stride[0], stride[1], options.padding[0], options.padding[1]);
}

}  // namespace rumus::nn
