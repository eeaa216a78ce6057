#pragma once
// torch::nn::Unfold and Fold: sliding blocks to columns (im2col) and back,
// summing overlaps (col2im).
#include "rumus/nn/module.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

struct FoldOptions {
  Size2 dilation{1, 1};
  Size2 padding{0, 0};
  Size2 stride{1, 1};
};

// [N, C, H, W] -> [N, C * kH * kW, L]; no parameters.
class Unfold : public Module {
 public:
  explicit Unfold(Size2 kernel_size, FoldOptions options = {}) : kernel_size(kernel_size), options(options) {}
  Tensor forward(const Tensor& x) override {
    return im2col(x, kernel_size, {.stride = options.stride, .padding = options.padding, .dilation = options.dilation});
  }
  std::string type_name() const override { return "Unfold"; }
  std::string extra_repr() const override;
  Size2 kernel_size;
  FoldOptions options;
};

// [N, C * kH * kW, L] -> [N, C, output_size...]; no parameters.
class Fold : public Module {
 public:
  Fold(Size2 output_size, Size2 kernel_size, FoldOptions options = {})
      : output_size(output_size), kernel_size(kernel_size), options(options) {}
  Tensor forward(const Tensor& x) override {
    return col2im(x, output_size, kernel_size,
                  {.stride = options.stride, .padding = options.padding, .dilation = options.dilation});
  }
  std::string type_name() const override { return "Fold"; }
  std::string extra_repr() const override;
  Size2 output_size, kernel_size;
  FoldOptions options;
};

}  // namespace rumus::nn

RUMUS_API_END
