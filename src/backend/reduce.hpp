#pragma once
// The reduction family: out keeps in's rank with 1 in every reduced dim;
// argmax/argmin write i64 (src/ops/reduction.cpp).
#include "kernel_registry.hpp"

namespace rumus {

struct ReduceKernel {
  static constexpr std::string_view name = "reduce";
  using Fn = void(Backend&, ReduceOp op, TensorArg out, TensorArg in);
};

}  // namespace rumus
