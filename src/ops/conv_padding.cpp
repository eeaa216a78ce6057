#include "conv_padding.hpp"

#include "op_util.hpp"
#include "rumus/ops/padding.hpp"

namespace rumus::detail {

std::optional<PaddedConvInput> explicit_conv_padding(const char* op, const Tensor& input, const Tensor& weight,
                                                     const Conv2dOptions& o) {
  if (o.padding_mode == "zeros" && o.padding_str.empty()) return std::nullopt;
  if (o.padding_mode != "zeros" && o.padding_mode != "reflect" && o.padding_mode != "replicate" &&
      o.padding_mode != "circular")
    throw ValueError(fmt::format(
        "{}: expected padding_mode \"zeros\", \"reflect\", \"replicate\" or \"circular\", got \"{}\"", op,
        o.padding_mode));
  if (!o.padding_str.empty() && o.padding_str != "same" && o.padding_str != "valid")
    throw ValueError(fmt::format("{}: expected padding \"same\" or \"valid\", got \"{}\"", op, o.padding_str));
  if (!o.padding_str.empty() && o.padding != Size2(0))
    throw ValueError(fmt::format("{}: padding \"{}\" and padding [{}, {}] given together; give one", op,
                                 o.padding_str, o.padding[0], o.padding[1]));
  if (!input.defined() || !weight.defined() || input.dim() != 4 || weight.dim() != 4)
    return std::nullopt;  // the convolution reports the shapes
  // Per dim (height, width): padding before and after.
  std::array<std::int64_t, 2> before{o.padding[0], o.padding[1]}, after = before;
  if (o.padding_str == "valid") before = after = {0, 0};
  if (o.padding_str == "same") {
    if (o.stride != Size2(1))
      throw ValueError(fmt::format("{}: padding \"same\" needs stride 1, got [{}, {}]", op, o.stride[0], o.stride[1]));
    for (std::size_t i = 0; i < 2; ++i) {
      const std::int64_t total = o.dilation[i] * (weight.shape()[2 + i] - 1);
      before[i] = total / 2;
      after[i] = total - before[i];
    }
  }
  Conv2dOptions unpadded = o;
  unpadded.padding = {0, 0};
  unpadded.padding_str.clear();
  unpadded.padding_mode = "zeros";
  if (o.padding_mode == "zeros" && before == after) {  // symmetric zeros: the kernels pad
    unpadded.padding = {before[0], before[1]};
    return PaddedConvInput{input, unpadded};
  }
  const std::string mode = o.padding_mode == "zeros" ? "constant" : o.padding_mode;
  return PaddedConvInput{pad(input, {before[1], after[1], before[0], after[0]}, mode), unpadded};
}

}  // namespace rumus::detail
