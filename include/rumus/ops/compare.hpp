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
Tensor eq(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
// cond ? a : b with broadcasting; gradients flow to a and b, never to cond.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

}  // namespace rumus

RUMUS_API_END
