#pragma once
// Activation layers (PReLU's slope is its one parameter), dropout and
// flatten, for use in Sequential.
#include "rumus/nn/module.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/softmax.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  Tensor forward_owned(Tensor&& x) override { return relu(std::move(x)); }
  std::string type_name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  std::string approximate;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return rumus::tanh(x); }
  Tensor forward_owned(Tensor&& x) override { return rumus::tanh(std::move(x)); }
  std::string type_name() const override { return "Tanh"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  Tensor forward_owned(Tensor&& x) override { return sigmoid(std::move(x)); }
  std::string type_name() const override { return "Sigmoid"; }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string type_name() const override { return "SiLU"; }
};
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
  std::string type_name() const override { return "Hardswish"; }
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha); }
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;
  double alpha;
};
class SELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return selu(x); }
  std::string type_name() const override { return "SELU"; }
};
class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) override { return celu(x, alpha); }
  std::string type_name() const override { return "CELU"; }
  std::string extra_repr() const override;
  double alpha;
};
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta(beta), threshold(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta, threshold); }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  double beta, threshold;
};
class Softsign : public Module {
 public:
  Tensor forward(const Tensor& x) override { return softsign(x); }
  std::string type_name() const override { return "Softsign"; }
};
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return mish(x); }
  std::string type_name() const override { return "Mish"; }
};
class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0) : min_val(min_val), max_val(max_val) {}
  Tensor forward(const Tensor& x) override { return hardtanh(x, min_val, max_val); }
  std::string type_name() const override { return "Hardtanh"; }
  std::string extra_repr() const override;
  double min_val, max_val;
};
class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu6(x); }
  std::string type_name() const override { return "ReLU6"; }
};
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
  std::string type_name() const override { return "Hardsigmoid"; }
};
// A learnable negative slope: one (num_parameters = 1) or one per channel
// (dim 1 of the input), all starting at `init`; state-dict key "weight".
class PReLU : public Module {
 public:
  explicit PReLU(std::int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override { return prelu(x, weight); }
  std::string type_name() const override { return "PReLU"; }
  std::string extra_repr() const override;
  Tensor weight;
};
class GLU : public Module {
 public:
  explicit GLU(std::int64_t dim = -1) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return glu(x, dim); }
  std::string type_name() const override { return "GLU"; }
  std::string extra_repr() const override;
  std::int64_t dim;
};
class LogSigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return logsigmoid(x); }
  std::string type_name() const override { return "LogSigmoid"; }
};
class Tanhshrink : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanhshrink(x); }
  std::string type_name() const override { return "Tanhshrink"; }
};
class Threshold : public Module {
 public:
  Threshold(double threshold, double value) : threshold(threshold), value(value) {}
  Tensor forward(const Tensor& x) override { return rumus::threshold(x, threshold, value); }
  std::string type_name() const override { return "Threshold"; }
  std::string extra_repr() const override;
  double threshold, value;
};
class Hardshrink : public Module {
 public:
  explicit Hardshrink(double lambd = 0.5) : lambd(lambd) {}
  Tensor forward(const Tensor& x) override { return hardshrink(x, lambd); }
  std::string type_name() const override { return "Hardshrink"; }
  std::string extra_repr() const override;
  double lambd;
};
class Softshrink : public Module {
 public:
  explicit Softshrink(double lambd = 0.5) : lambd(lambd) {}
  Tensor forward(const Tensor& x) override { return softshrink(x, lambd); }
  std::string type_name() const override { return "Softshrink"; }
  std::string extra_repr() const override;
  double lambd;
};
// dim is required, as in libtorch's SoftmaxOptions(dim).
class Softmax : public Module {
 public:
  explicit Softmax(std::int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmax(x, dim); }
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;
  std::int64_t dim;
};
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(std::int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, dim); }
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;
  std::int64_t dim;
};
class Softmin : public Module {
 public:
  explicit Softmin(std::int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmin(x, dim); }
  std::string type_name() const override { return "Softmin"; }
  std::string extra_repr() const override;
  std::int64_t dim;
};

// Active only in training mode; draws its masks from the default generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;
};

// Flattens dims start_dim..end_dim into one (a view when possible).
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  std::int64_t start_dim, end_dim;
};

}  // namespace rumus::nn

RUMUS_API_END
