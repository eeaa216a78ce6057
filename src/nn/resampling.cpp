#include "rumus/nn/resampling.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rumus::nn {

namespace {
// Python's repr of one value or of a tuple: 2.0, (2.0, 1.5), 4, (4, 6).
template <class T>
std::string python_repr(const std::vector<T>& v) {
  auto one = [](T x) {
    if constexpr (std::is_floating_point_v<T>) {
      std::string s = fmt::format("{}", x);
      return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
    } else {
      return fmt::format("{}", x);
    }
  };
  if (v.size() == 1) return one(v[0]);
  std::vector<std::string> parts;
  for (T x : v) parts.push_back(one(x));
  return fmt::format("({})", fmt::join(parts, ", "));
}
}  // namespace

std::string Upsample::extra_repr() const {
  const std::string what = options.scale_factor.empty() ? "size=" + python_repr(options.size)
                                                        : "scale_factor=" + python_repr(options.scale_factor);
  return fmt::format("{}, mode='{}'", what, options.mode);
}

std::string PixelShuffle::extra_repr() const { return fmt::format("upscale_factor={}", upscale_factor); }
std::string PixelUnshuffle::extra_repr() const { return fmt::format("downscale_factor={}", downscale_factor); }

}  // namespace rumus::nn
