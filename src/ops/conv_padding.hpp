#pragma once
// Convolution padding that the kernels' symmetric zero padding cannot express:
// padding_mode "reflect"/"replicate"/"circular" and padding_str "same"/"valid".
#include <optional>

#include "rumus/ops/conv.hpp"

namespace rumus::detail {

struct PaddedConvInput {
  Tensor input;           // padded explicitly with pad()
  Conv2dOptions options;  // the same with no padding left to apply
};

// For input [N, C, H, W] and weight [OC, C/groups, KH, KW]: nullopt when the
// options ask for plain numeric zero padding (the kernels apply it), else the
// padded input and the options to convolve it with.
std::optional<PaddedConvInput> explicit_conv_padding(const char* op, const Tensor& input, const Tensor& weight,
                                                     const Conv2dOptions& options);

}  // namespace rumus::detail
