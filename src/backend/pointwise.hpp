#pragma once
// The pointwise family: every operand has out's shape (broadcast inputs arrive
// expanded, with stride 0), the kernels of the elementwise ops, copies and
// fills (src/ops/elementwise.cpp, copy.cpp, creation.cpp, compare.cpp, ...).
// They compute in the input's dtype (fill and copy: the output's).
#include "kernel_registry.hpp"

namespace rumus {

struct FillKernel {
  static constexpr std::string_view name = "fill";
  using Fn = void(Backend&, TensorArg out, double value);
};

// Converts dtype.
struct CopyKernel {
  static constexpr std::string_view name = "copy";
  using Fn = void(Backend&, TensorArg out, TensorArg in);
};

struct UnaryKernel {
  static constexpr std::string_view name = "unary";
  using Fn = void(Backend&, UnaryOp op, TensorArg out, TensorArg in, double p0, double p1);
};

struct BinaryKernel {
  static constexpr std::string_view name = "binary";
  using Fn = void(Backend&, BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1);
};

struct WhereKernel {
  static constexpr std::string_view name = "where";
  using Fn = void(Backend&, TensorArg out, TensorArg cond, TensorArg a, TensorArg b);
};

}  // namespace rumus
