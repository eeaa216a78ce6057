#pragma once
// Pointwise math with NumPy broadcasting, forward and backward.
#include <string_view>

#include "rumus/core/scalar.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
// True division, as torch.div: integer operands divide as f32 (7 / 2 = 3.5).
Tensor div(const Tensor& a, const Tensor& b);
// torch.div(a, b, rounding_mode="trunc" or "floor"): the quotient rounded
// toward zero or down, in the operands' promoted dtype (integers stay integers;
// an integer division by zero is a ValueError). Its gradient is zero.
Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode);
// torch.floor_divide: div(a, b, "floor").
Tensor floor_divide(const Tensor& a, const Tensor& b);
// A number operand: an integer tensor stays integer with an integer number
// (add(i, 2)) and becomes f32 with a floating one (add(i, 2.5) = 4.5 for 2),
// as PyTorch's type promotion. div is true division either way.
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor sub(Scalar a, const Tensor& b);  // a - b (torch::rsub)
Tensor div(Scalar a, const Tensor& b);  // a / b
Tensor pow(const Tensor& a, double exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
// NaN bound = unbounded on that side.
Tensor clamp(const Tensor& x, double min, double max);
// Rounding to integral values (round: half to even, as torch.round); integer
// tensors come back as they are. Their gradient is zero.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
inline Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
inline Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
inline Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace rumus

RUMUS_API_END
