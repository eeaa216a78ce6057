#pragma once
// Floating point to integer conversion with a defined result for every input.
// C++ leaves float -> int undefined when the value does not fit (1e20, inf,
// NaN), and PyTorch inherits whatever the platform does. rumus saturates
// instead, on every device: values past the range become the nearest end of
// it, NaN becomes 0, and everything in range truncates toward zero as usual.
#include <limits>
#include <type_traits>

namespace rumus {

template <class To, class From>
constexpr To saturate_cast(From v) {
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && std::is_floating_point_v<From>) {
    using lim = std::numeric_limits<To>;
    // Both ends are powers of two (or 0), so exactly representable in From:
    // [lo, hi) is the range whose truncation fits.
    constexpr From hi = From(To(1) << (lim::digits - 1)) * From(2);
    constexpr From lo = From(lim::min());
    if (v != v) return To(0);
    if (v >= hi) return lim::max();
    if (v < lo) return lim::min();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace rumus
