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
  // libtorch's return_indices: the maxima and their flat indices (for MaxUnpool2d).
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) { return max_pool2d_with_indices(x, options); }
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

// torch::nn::MaxUnpool2d: max_unpool2d with the pooling's kernel, stride and padding.
class MaxUnpool2d : public Module {
 public:
  explicit MaxUnpool2d(Size2 kernel) : options{.kernel = kernel} {}
  explicit MaxUnpool2d(Pool2dOptions o) : options(o) {}
  Tensor forward(const Tensor& x, const Tensor& indices, std::optional<Size2> output_size = std::nullopt) {
    return max_unpool2d(x, indices, options, output_size);
  }
  std::string type_name() const override { return "MaxUnpool2d"; }
  std::string extra_repr() const override;
  Pool2dOptions options;
};

// torch::nn::AdaptiveMaxPool2d / AdaptiveMaxPool1d: forward gives the maxima,
// forward_with_indices also their flat indices (libtorch's return_indices).
class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool2d(x, output_size); }
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {
    return adaptive_max_pool2d_with_indices(x, output_size);
  }
  std::string type_name() const override { return "AdaptiveMaxPool2d"; }
  std::string extra_repr() const override;
  Size2 output_size;
};
class AdaptiveMaxPool1d : public Module {
 public:
  explicit AdaptiveMaxPool1d(std::int64_t output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_max_pool1d(x, output_size); }
  std::tuple<Tensor, Tensor> forward_with_indices(const Tensor& x) {
    return adaptive_max_pool1d_with_indices(x, output_size);
  }
  std::string type_name() const override { return "AdaptiveMaxPool1d"; }
  std::string extra_repr() const override;
  std::int64_t output_size;
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
