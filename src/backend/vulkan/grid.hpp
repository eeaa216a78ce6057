#pragma once
// Launch shapes and operand checks shared by the Vulkan kernel families.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

#include "../backend.hpp"
#include "rumus/core/error.hpp"

namespace rumus::vulkan {

inline void require_contiguous(const char* op, TensorArg t) {
  if (!t.layout->is_contiguous()) throw Error(std::string(op) + ": the Vulkan kernel needs contiguous operands");
}

// One workgroup per row (softmax, layer norm): rows along x, and along y past
// the 65535 workgroups one dimension allows.
inline void row_grid(std::int64_t rows, std::uint32_t& gx, std::uint32_t& gy) {
  gx = std::uint32_t(std::min<std::int64_t>(rows, 65535));
  gy = std::uint32_t((rows + gx - 1) / gx);
}

// Workgroup size for one row of `cols`: a power of two in [32, 256].
inline std::uint32_t row_group(std::int64_t cols) {
  const auto pow2 = std::int64_t(std::bit_ceil(std::uint64_t(std::max<std::int64_t>(cols, 1))));
  return std::uint32_t(std::clamp<std::int64_t>(pow2, 32, 256));
}

}  // namespace rumus::vulkan
