#include "rumus/nn/conv.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "rumus/nn/init.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn {
namespace {
void check_positive(const char* layer, const char* what, std::int64_t v) {
  if (v < 1) throw Error(fmt::format("{}: expected {} >= 1, got {}", layer, what, v));
}
}  // namespace

Conv2d::Conv2d(std::int64_t in, std::int64_t out, Size2 k, Conv2dOptions o, bool with_bias)
    : options(o) {
  check_positive("Conv2d", "in_channels", in);
  check_positive("Conv2d", "out_channels", out);
  check_positive("Conv2d", "kernel height", k[0]);
  check_positive("Conv2d", "kernel width", k[1]);
  check_positive("Conv2d", "groups", o.groups);
  if (in % o.groups || out % o.groups)
    throw Error(fmt::format("Conv2d: in_channels {} and out_channels {} must be divisible by groups {}", in, out,
                            o.groups));
  weight = register_parameter("weight", empty({out, in / o.groups, k[0], k[1]}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  init::default_linear_(weight, bias);
}

Conv1d::Conv1d(std::int64_t in, std::int64_t out, std::int64_t k, Conv1dOptions o, bool with_bias) : options(o) {
  check_positive("Conv1d", "in_channels", in);
  check_positive("Conv1d", "out_channels", out);
  check_positive("Conv1d", "kernel_size", k);
  check_positive("Conv1d", "groups", o.groups);
  if (in % o.groups || out % o.groups)
    throw Error(fmt::format("Conv1d: in_channels {} and out_channels {} must be divisible by groups {}", in, out,
                            o.groups));
  weight = register_parameter("weight", empty({out, in / o.groups, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  init::default_linear_(weight, bias);
}

ConvTranspose2d::ConvTranspose2d(std::int64_t in, std::int64_t out, Size2 k, ConvTranspose2dOptions o,
                                 bool with_bias)
    : options(o) {
  check_positive("ConvTranspose2d", "in_channels", in);
  check_positive("ConvTranspose2d", "out_channels", out);
  check_positive("ConvTranspose2d", "kernel height", k[0]);
  check_positive("ConvTranspose2d", "kernel width", k[1]);
  check_positive("ConvTranspose2d", "groups", o.groups);
  if (in % o.groups || out % o.groups)
    throw Error(fmt::format("ConvTranspose2d: in_channels {} and out_channels {} must be divisible by groups {}", in,
                            out, o.groups));
  weight = register_parameter("weight", empty({in, out / o.groups, k[0], k[1]}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  init::default_linear_(weight, bias);  // fan_in from dim 1 (out / groups), as PyTorch
}

Tensor ConvTranspose2d::forward(const Tensor& x, Size2 output_size) {
  if (x.dim() < 2) return forward(x);  // conv_transpose2d reports the shape
  std::array<std::int64_t, 2> smallest{}, largest{};
  for (std::size_t d = 0; d < 2; ++d) {
    const std::int64_t in = x.shape()[std::size_t(x.dim()) - 2 + d], k = weight.shape()[2 + d];
    smallest[d] = (in - 1) * options.stride[d] - 2 * options.padding[d] + options.dilation[d] * (k - 1) + 1;
    largest[d] = smallest[d] + std::max(options.stride[d], options.dilation[d]) - 1;
  }
  for (std::size_t d = 0; d < 2; ++d)
    if (output_size[d] < smallest[d] || output_size[d] > largest[d])
      throw ShapeError(fmt::format("ConvTranspose2d: requested output size {}x{} is not between {}x{} and {}x{} for "
                                   "input {}",
                                   output_size[0], output_size[1], smallest[0], smallest[1], largest[0], largest[1],
                                   shape_str(x.shape())));
  ConvTranspose2dOptions o = options;
  o.output_padding = {output_size[0] - smallest[0], output_size[1] - smallest[1]};
  return conv_transpose2d(x, weight, bias, o);
}

ConvTranspose1d::ConvTranspose1d(std::int64_t in, std::int64_t out, std::int64_t k, ConvTranspose1dOptions o,
                                 bool with_bias)
    : options(o) {
  check_positive("ConvTranspose1d", "in_channels", in);
  check_positive("ConvTranspose1d", "out_channels", out);
  check_positive("ConvTranspose1d", "kernel_size", k);
  check_positive("ConvTranspose1d", "groups", o.groups);
  if (in % o.groups || out % o.groups)
    throw Error(fmt::format("ConvTranspose1d: in_channels {} and out_channels {} must be divisible by groups {}", in,
                            out, o.groups));
  weight = register_parameter("weight", empty({in, out / o.groups, k}));
  if (with_bias) bias = register_parameter("bias", empty({out}));
  init::default_linear_(weight, bias);
}

}  // namespace rumus::nn
