#include "rumus/nn/init.hpp"
#include "rumus/nn/deferred_init.hpp"

#include <fmt/format.h>

#include <cmath>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::nn::init {

namespace {
void fill_from(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}
double fan(const Tensor& t, FanMode mode) {
  auto [in, out] = fans(t);
  return mode == FanMode::fan_in ? in : out;
}
}  // namespace

std::pair<double, double> fans(const Tensor& w) {
  if (w.dim() < 2)
    throw ShapeError(fmt::format("init: fan in/out needs a tensor of at least 2 dims, got shape {}",
                                 shape_str(w.shape())));
  double receptive = 1;
  for (std::int64_t d = 2; d < w.dim(); ++d) receptive *= double(w.size(d));
  return {double(w.size(1)) * receptive, double(w.size(0)) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 0.75;
  throw Error(fmt::format("calculate_gain: unknown nonlinearity '{}' (expected linear, conv2d, sigmoid, tanh, relu, "
                          "leaky_relu or selu)",
                          nl));
}

void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }
void constant_(Tensor& t, double value) {
  if (rumus::nn::detail::defer_constant(t, value)) return;  // a deferred parameter records it (deferred_init.hpp)
  NoGradGuard no_grad;
  t.fill_(value);
}
void uniform_(Tensor& t, double low, double high, Generator* gen) {
  if (is_floating(t.dtype()) && rumus::nn::detail::defer_draw(t, 0, low, high, gen)) return;
  fill_from(t, uniform(t.shape(), low, high, {.dtype = t.dtype(), .device = t.device()}, gen));
}
void normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (is_floating(t.dtype()) && std >= 0 && rumus::nn::detail::defer_draw(t, 1, mean, std, gen)) return;
  fill_from(t, normal(t.shape(), mean, std, {.dtype = t.dtype(), .device = t.device()}, gen));
}
void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [in, out] = fans(t);
  double bound = gain * std::sqrt(6.0 / (in + out));
  uniform_(t, -bound, bound, gen);
}
void xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [in, out] = fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / (in + out)), gen);
}
void kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nl, Generator* gen) {
  double bound = std::sqrt(3.0) * calculate_gain(nl, a) / std::sqrt(fan(t, mode));
  uniform_(t, -bound, bound, gen);
}
void kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nl, Generator* gen) {
  normal_(t, 0.0, calculate_gain(nl, a) / std::sqrt(fan(t, mode)), gen);
}

void default_linear_(Tensor& weight, Tensor& bias, Generator* gen) {
  kaiming_uniform_(weight, std::sqrt(5.0), FanMode::fan_in, "leaky_relu", gen);
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(fans(weight).first);
    uniform_(bias, -bound, bound, gen);
  }
}

}  // namespace rumus::nn::init
