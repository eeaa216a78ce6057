#pragma once
// fmt::format("{}", tensor) support.
#include <fmt/format.h>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

template <>
struct fmt::formatter<rumus::Tensor> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(const rumus::Tensor& t, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(rumus::to_string(t), ctx);
  }
};
template <>
struct fmt::formatter<rumus::DType> : fmt::formatter<std::string_view> {
  template <class Ctx>
  auto format(rumus::DType t, Ctx& ctx) const {
    return fmt::formatter<std::string_view>::format(rumus::dtype_name(t), ctx);
  }
};

RUMUS_API_END
