#pragma once
// Pointwise math beyond arithmetic, as torch's: trigonometric, hyperbolic,
// error functions, logarithms and exponentials of other bases, and the binary
// functions atan2, fmod, remainder, lerp, hypot, xlogy, copysign and clamp
// with tensor bounds. Integer inputs compute in f32, as PyTorch promotes.
// Every gradient is written with differentiable ops (twice differentiable).
#include <optional>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor asin(const Tensor& x);
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor sinh(const Tensor& x);
Tensor cosh(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor erfc(const Tensor& x);
Tensor erfinv(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log10(const Tensor& x);
Tensor exp2(const Tensor& x);
// -1, 0 or 1 (0 for NaN's sign is NaN, as torch.sign); integers keep their dtype. Zero gradient.
Tensor sign(const Tensor& x);
Tensor reciprocal(const Tensor& x);  // 1 / x
Tensor rsqrt(const Tensor& x);       // 1 / sqrt(x)
// log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given (its gradient is 0 outside).
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt);
Tensor frac(const Tensor& x);  // x - trunc(x), the sign of x

}  // namespace rumus

RUMUS_API_END
