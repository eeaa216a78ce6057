#pragma once
// Comparisons and logical ops produce bool tensors; they carry no gradient.
// Masks and conditions are bool, or u8 read as bool (nonzero is true).
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
// number beside an integer tensor compares in f32 (lt(i, 2.5) is not lt(i, 2)),
// and an integer beside a bool tensor in i64 (eq(mask, 2) is all false).
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
// torch.logical_and/or/xor/not: any dtype, read as nonzero = true.
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
// &, |, ^ and ~ of bool tensors (the logical ops), as in libtorch. Bitwise
// forms for integer tensors are not implemented: they raise DTypeError.
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator~(const Tensor& x);
// cond ? a : b with broadcasting; gradients flow to a and b, never to cond.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` where mask (bool or u8, broadcast to x's shape) is set; the gradient flows to the other elements.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

}  // namespace rumus

RUMUS_API_END
