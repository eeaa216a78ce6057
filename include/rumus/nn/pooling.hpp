#pragma once
#include "rumus/nn/module.hpp"
#include "rumus/ops/pooling.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel) : options{.kernel = kernel} {}
  explicit MaxPool2d(Pool2dOptions o) : options(o) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel) : options{.kernel = kernel} {}
  explicit AvgPool2d(Pool2dOptions o) : options(o) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Size2 output_size;
};

// The 1-D poolings (torch::nn::MaxPool1d, AvgPool1d, AdaptiveAvgPool1d) on [N, C, L] or [C, L].
class MaxPool1d : public Module {
 public:
  explicit MaxPool1d(std::int64_t kernel) : options{.kernel = kernel} {}
  explicit MaxPool1d(Pool1dOptions o) : options(o) {}
  Tensor forward(const Tensor& x) override { return max_pool1d(x, options); }
  std::string type_name() const override { return "MaxPool1d"; }
  Pool1dOptions options;
};
class AvgPool1d : public Module {
 public:
  explicit AvgPool1d(std::int64_t kernel) : options{.kernel = kernel} {}
  explicit AvgPool1d(Pool1dOptions o) : options(o) {}
  Tensor forward(const Tensor& x) override { return avg_pool1d(x, options); }
  std::string type_name() const override { return "AvgPool1d"; }
  Pool1dOptions options;
};
class AdaptiveAvgPool1d : public Module {
 public:
  explicit AdaptiveAvgPool1d(std::int64_t output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool1d(x, output_size); }
  std::string type_name() const override { return "AdaptiveAvgPool1d"; }
  std::int64_t output_size;
};

}  // namespace rumus::nn

RUMUS_API_END
