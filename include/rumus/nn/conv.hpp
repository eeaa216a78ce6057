#pragma once
#include "rumus/nn/module.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/ops/conv_transpose.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// 2-D convolution over NCHW input; weight [out, in/groups, k, k], PyTorch's default initialisation.
class Conv2d : public Module {
 public:
  // kernel_size: one number for a square kernel, or {kh, kw}.
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         bool bias = true);
  Tensor forward(const Tensor& x) override { return conv2d(x, weight, bias, options); }
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Conv2dOptions options;
  Tensor weight, bias;
};

// torch::nn::Conv1d: weight [out, in/groups, k], bias [out]; PyTorch's initialisation and names.
class Conv1d : public Module {
 public:
  Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv1dOptions options = {},
         bool bias = true);
  Tensor forward(const Tensor& x) override { return conv1d(x, weight, bias, options); }
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Conv1dOptions options;
  Tensor weight, bias;
};

// torch::nn::ConvTranspose2d: weight [in, out/groups, kh, kw] (input channels
// first, as PyTorch), bias [out]; PyTorch's initialisation and names.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) override { return conv_transpose2d(x, weight, bias, options); }
  // PyTorch's forward(input, output_size): the output_padding that gives this
  // output height and width (each at most stride or dilation - 1 beyond the smallest).
  Tensor forward(const Tensor& x, Size2 output_size);
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

// torch::nn::ConvTranspose1d: weight [in, out/groups, k], bias [out].
class ConvTranspose1d : public Module {
 public:
  ConvTranspose1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
                  ConvTranspose1dOptions options = {}, bool bias = true);
  Tensor forward(const Tensor& x) override { return conv_transpose1d(x, weight, bias, options); }
  std::string type_name() const override { return "ConvTranspose1d"; }
  std::string extra_repr() const override;
  ConvTranspose1dOptions options;
  Tensor weight, bias;
};

// Conv2d followed by ReLU as one op (conv2d_relu; torch.ao.nn.intrinsic.ConvReLU2d).
// Same parameters under the same names as Conv2d, so state dicts carry over.
class ConvReLU2d : public Conv2d {
 public:
  using Conv2d::Conv2d;
  Tensor forward(const Tensor& x) override { return conv2d_relu(x, weight, bias, options); }
  std::string type_name() const override { return "ConvReLU2d"; }
};

}  // namespace rumus::nn

RUMUS_API_END
