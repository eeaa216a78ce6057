// Module printouts in PyTorch's shape: each module's own line is its type name
// and extra_repr(); children follow indented as "(name): ...".
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ostream>
#include <sstream>

#include "rumus/nn/activation.hpp"
#include "rumus/nn/conv.hpp"
#include "rumus/nn/embedding.hpp"
#include "rumus/nn/linear.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/nn/normalization.hpp"
#include "rumus/nn/pooling.hpp"

namespace rumus::nn {

namespace {
const char* flag(bool on) { return on ? "true" : "false"; }
std::string pair(Size2 s) { return fmt::format("({}, {})", s[0], s[1]); }
// Indents every line after the first: a child's printout nests under its "(name): ".
std::string indent_tail(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}
}  // namespace

std::string Module::pretty_print() const {
  std::string out = type_name() + "(";
  const std::string extra = extra_repr();
  const auto children = named_children();
  if (children.empty()) return out + extra + ")";
  out += "\n";
  if (!extra.empty()) out += "  " + indent_tail(extra) + "\n";
  for (const auto& [name, child] : children) out += fmt::format("  ({}): {}\n", name, indent_tail(child->pretty_print()));
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.pretty_print(); }

std::string GELU::extra_repr() const { return fmt::format("approximate='{}'", approximate); }
std::string LeakyReLU::extra_repr() const { return fmt::format("negative_slope={}", negative_slope); }
std::string Dropout::extra_repr() const { return fmt::format("p={}", p); }
std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }
std::string ELU::extra_repr() const { return fmt::format("alpha={}", alpha); }
std::string CELU::extra_repr() const { return fmt::format("alpha={}", alpha); }
std::string Softplus::extra_repr() const { return fmt::format("beta={}, threshold={}", beta, threshold); }
std::string Hardtanh::extra_repr() const { return fmt::format("min_val={}, max_val={}", min_val, max_val); }
std::string PReLU::extra_repr() const { return fmt::format("num_parameters={}", weight.numel()); }
std::string GLU::extra_repr() const { return fmt::format("dim={}", dim); }
std::string Threshold::extra_repr() const { return fmt::format("threshold={}, value={}", threshold, value); }
std::string Hardshrink::extra_repr() const { return fmt::format("{}", lambd); }
std::string Softshrink::extra_repr() const { return fmt::format("{}", lambd); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim); }
std::string LogSoftmax::extra_repr() const { return fmt::format("dim={}", dim); }
std::string Softmin::extra_repr() const { return fmt::format("dim={}", dim); }

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", weight.shape()[1], weight.shape()[0],
                     flag(bias.defined()));
}

std::string Conv1d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size=({},), stride=({},)", weight.shape()[1] * options.groups,
                                weight.shape()[0], weight.shape()[2], options.stride);
  if (!options.padding_str.empty()) out += ", padding=" + options.padding_str;
  if (options.padding != 0) out += fmt::format(", padding=({},)", options.padding);
  if (options.dilation != 1) out += fmt::format(", dilation=({},)", options.dilation);
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) out += ", bias=false";
  if (options.padding_mode != "zeros") out += ", padding_mode=" + options.padding_mode;
  return out;
}

std::string Conv2d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size={}, stride={}", weight.shape()[1] * options.groups,
                                weight.shape()[0], pair({weight.shape()[2], weight.shape()[3]}), pair(options.stride));
  if (!options.padding_str.empty()) out += ", padding=" + options.padding_str;
  if (options.padding != Size2(0)) out += ", padding=" + pair(options.padding);
  if (options.dilation != Size2(1)) out += ", dilation=" + pair(options.dilation);
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) out += ", bias=false";
  if (options.padding_mode != "zeros") out += ", padding_mode=" + options.padding_mode;
  return out;
}

std::string ConvTranspose2d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size={}, stride={}", weight.shape()[0],
                                weight.shape()[1] * options.groups, pair({weight.shape()[2], weight.shape()[3]}),
                                pair(options.stride));
  if (options.padding != Size2(0)) out += ", padding=" + pair(options.padding);
  if (options.output_padding != Size2(0)) out += ", output_padding=" + pair(options.output_padding);
  if (options.dilation != Size2(1)) out += ", dilation=" + pair(options.dilation);
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) out += ", bias=false";
  return out;
}

std::string ConvTranspose1d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size=({},), stride=({},)", weight.shape()[0],
                                weight.shape()[1] * options.groups, weight.shape()[2], options.stride);
  if (options.padding != 0) out += fmt::format(", padding=({},)", options.padding);
  if (options.output_padding != 0) out += fmt::format(", output_padding=({},)", options.output_padding);
  if (options.dilation != 1) out += fmt::format(", dilation=({},)", options.dilation);
  if (options.groups != 1) out += fmt::format(", groups={}", options.groups);
  if (!bias.defined()) out += ", bias=false";
  return out;
}

namespace {
Size2 pool_stride(const Pool2dOptions& o) { return {o.stride[0] ? o.stride[0] : o.kernel[0], o.stride[1] ? o.stride[1] : o.kernel[1]}; }
}  // namespace

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation={}, ceil_mode={}", pair(options.kernel),
                     pair(pool_stride(options)), pair(options.padding), pair(options.dilation), flag(options.ceil_mode));
}
std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, ceil_mode={}, count_include_pad={}", pair(options.kernel),
                     pair(pool_stride(options)), pair(options.padding), flag(options.ceil_mode),
                     flag(options.count_include_pad));
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + pair(output_size); }

std::string BatchNorm2d::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}", running_mean.shape()[0], eps, momentum,
                     flag(weight.defined()));
}
std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, eps, weight.defined() ? "True" : "False");
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("({}), eps={}, elementwise_affine={}",
                     normalized_shape.size() == 1 ? fmt::format("{},", normalized_shape[0])
                                                  : fmt::format("{}", fmt::join(normalized_shape, ", ")),
                     eps, flag(weight.defined()));
}
std::string Embedding::extra_repr() const {
  std::string out = fmt::format("{}, {}", weight.shape()[0], weight.shape()[1]);
  if (padding_idx) out += fmt::format(", padding_idx={}", *padding_idx);
  return out;
}

}  // namespace rumus::nn
