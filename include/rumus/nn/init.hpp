#pragma once
// Weight initialisation in place, drawing from a Generator (the default one
// unless given), so manual_seed reproduces a model. Formulas follow torch.nn.init.
#include <string>
#include <utility>

#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn::init {

enum class FanMode { fan_in, fan_out };

// (fan_in, fan_out) of a weight [out, in, k...]; at least 2-D.
std::pair<double, double> fans(const Tensor& weight);
// Recommended gain: "linear", "conv2d", "sigmoid", "tanh", "relu", "leaky_relu" (param = slope), "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

void zeros_(Tensor& t);
void ones_(Tensor& t);
void constant_(Tensor& t, double value);
void uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
void normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
void kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                      const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
void kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                     const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);

// A (semi-)orthogonal matrix times gain, from the QR decomposition of a normal
// draw (Saxe et al.); a weight of more than 2 dims is flattened to [size(0), -1].
void orthogonal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// The identity (ones on the diagonal of a 2-D tensor, zeros elsewhere).
void eye_(Tensor& t);
// A 3-, 4- or 5-D convolution weight that passes its input through: in each
// of `groups` groups, output channel i reads input channel i at the kernel's centre.
void dirac_(Tensor& t, std::int64_t groups = 1);
// N(mean, std^2) truncated to [a, b], by inverting the normal CDF (PyTorch's method).
void trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0,
                   Generator* gen = nullptr);

// PyTorch's default for Linear and Conv2d: kaiming_uniform_(a = sqrt(5)) on the
// weight (a bound of 1/sqrt(fan_in)) and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) on the bias.
void default_linear_(Tensor& weight, Tensor& bias, Generator* gen = nullptr);

}  // namespace rumus::nn::init

RUMUS_API_END
