#pragma once
// A number as an operand (libtorch's c10::Scalar): it remembers whether it
// was written as an integer (2) or a floating value (2.5), which decides the
// result's dtype with an integer tensor, as in PyTorch: add(i, 2) stays an
// integer tensor, add(i, 2.5) gives f32.
#include <cstdint>
#include <type_traits>

#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

class Scalar {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T value)  // implicit, as libtorch's: every number is a Scalar
      : integral_(std::is_integral_v<T>),
        i_(std::is_integral_v<T> ? static_cast<std::int64_t>(value) : 0),
        d_(static_cast<double>(value)) {}

  bool is_integral() const { return integral_; }
  double to_double() const { return d_; }
  std::int64_t to_int() const { return integral_ ? i_ : static_cast<std::int64_t>(d_); }
  // -x, of the same kind (integers wrap, as in PyTorch).
  Scalar operator-() const {
    if (integral_) return Scalar(static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(i_)));
    return Scalar(-d_);
  }

 private:
  bool integral_;
  std::int64_t i_;
  double d_;
};

}  // namespace rumus

RUMUS_API_END
