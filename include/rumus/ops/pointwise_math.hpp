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

// Binary math with broadcasting; floating results promote integers to f32
// except fmod and remainder, which keep integers integer (a zero integer divisor is a ValueError).
Tensor atan2(const Tensor& y, const Tensor& x);  // the angle of (x, y) in [-pi, pi]; atan2(0, 0) = 0
// a - trunc(a / b) * b: the sign of a, as C's fmod. Composed of floating division,
// so where a / b rounds to an integer it may differ from C's exact fmod.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, double b);
// a - floor(a / b) * b: the sign of b, as Python's %.
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double b);
// start + weight * (end - start), as PyTorch's (end - (end - start) * (1 - weight) from weight 0.5 on).
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, double weight);
// Bounds as tensors, each optional (at least one), broadcast with x; min > max gives max, as PyTorch.
Tensor clamp(const Tensor& x, const std::optional<Tensor>& min, const std::optional<Tensor>& max);
Tensor hypot(const Tensor& a, const Tensor& b);     // sqrt(a^2 + b^2)
Tensor xlogy(const Tensor& x, const Tensor& y);     // x * log(y), 0 where x = 0 (unless y is NaN)
Tensor copysign(const Tensor& a, const Tensor& b);  // |a| with b's sign (-0.0 counts as negative)

}  // namespace rumus

RUMUS_API_END
