#pragma once
// A (height, width) pair that a single number fills on both sides, as libtorch's
// ExpandingArray<2>: `{.padding = 1}` means {1, 1}, `{.stride = {2, 1}}` is per dim.
#include <array>
#include <cstddef>
#include <cstdint>

#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct Size2 {
  constexpr Size2(std::int64_t both) : v{both, both} {}  // NOLINT: implicit, as ExpandingArray
  constexpr Size2(std::int64_t h, std::int64_t w) : v{h, w} {}
  constexpr Size2(std::array<std::int64_t, 2> hw) : v(hw) {}  // NOLINT
  constexpr std::int64_t operator[](std::size_t i) const { return v[i]; }
  constexpr operator std::array<std::int64_t, 2>() const { return v; }  // NOLINT
  friend constexpr bool operator==(const Size2&, const Size2&) = default;

  std::array<std::int64_t, 2> v;
};

}  // namespace rumus

RUMUS_API_END
