#pragma once
// One strided walk for every backend: the dims of a loop over `shape` that N
// operands read or write with their own strides. Size-1 dims are dropped and
// neighbouring dims merge wherever every operand walks them as one, so a
// contiguous or simply broadcast operand set becomes one or two dims.
// The CPU loops iterate the result; the Vulkan hosts pack it into push constants.
#include <array>
#include <cstdint>
#include <string>

#include "rumus/core/error.hpp"
#include "rumus/core/layout.hpp"

namespace rumus {

constexpr int kMaxStridedDims = 16;

template <std::size_t N>
struct StridedDims {
  int nd = 0;                                      // at least 1; outer to inner
  std::int64_t size[kMaxStridedDims];
  std::int64_t stride[N][kMaxStridedDims];         // per operand, in elements
  std::array<std::int64_t, N> offset{};            // per operand, in elements
};

// `layouts` must all have `shape` (broadcast operands arrive expanded).
template <std::size_t N>
StridedDims<N> coalesce(const Shape& shape, const std::array<const Layout*, N>& layouts, const char* kernel) {
  if (shape.size() > std::size_t(kMaxStridedDims))
    throw DeviceError(std::string(kernel) + ": at most 16 dims are supported, got " + std::to_string(shape.size()));
  StridedDims<N> it;
  for (std::size_t k = 0; k < N; ++k) it.offset[k] = layouts[k]->offset;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;  // changes no offset
    if (it.nd > 0) {              // merge into the previous (outer) dim when every operand allows it
      bool merge = true;
      for (std::size_t k = 0; k < N && merge; ++k)
        merge = it.stride[k][it.nd - 1] == layouts[k]->strides[d] * shape[d];
      if (merge) {
        it.size[it.nd - 1] *= shape[d];
        for (std::size_t k = 0; k < N; ++k) it.stride[k][it.nd - 1] = layouts[k]->strides[d];
        continue;
      }
    }
    it.size[it.nd] = shape[d];
    for (std::size_t k = 0; k < N; ++k) it.stride[k][it.nd] = layouts[k]->strides[d];
    ++it.nd;
  }
  if (it.nd == 0) {  // a single element
    it.nd = 1;
    it.size[0] = 1;
    for (std::size_t k = 0; k < N; ++k) it.stride[k][0] = 0;
  }
  return it;
}

}  // namespace rumus
