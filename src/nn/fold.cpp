#include "rumus/nn/fold.hpp"

#include <fmt/format.h>

namespace rumus::nn {

namespace {
std::string pair(Size2 s) { return fmt::format("({}, {})", s[0], s[1]); }
std::string window(const FoldOptions& o) {
  return fmt::format("dilation={}, padding={}, stride={}", pair(o.dilation), pair(o.padding), pair(o.stride));
}
}  // namespace

std::string Unfold::extra_repr() const { return "kernel_size=" + pair(kernel_size) + ", " + window(options); }
std::string Fold::extra_repr() const {
  return "output_size=" + pair(output_size) + ", kernel_size=" + pair(kernel_size) + ", " + window(options);
}

}  // namespace rumus::nn
