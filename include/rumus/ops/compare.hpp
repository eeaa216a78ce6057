#pragma once
// Comparisons produce u8 masks (1/0); they carry no gradient.
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Against a number: it takes the tensor's dtype, except that a fractional
// number beside an integer tensor compares in f32 (lt(i, 2.5) is not lt(i, 2)).
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
// Floating tensors only can hold NaN or inf; integer tensors give all 0 (all 1 for isfinite).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// cond ? a : b with broadcasting; gradients flow to a and b, never to cond.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` where mask (u8, broadcast to x's shape) is set; the gradient flows to the other elements.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace rumus

RUMUS_API_END
