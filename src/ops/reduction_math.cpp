// Reductions composed of the sum/mean/amax kernels and pointwise ops: every
// device runs them, and their gradients (the ops' own) are twice differentiable.
#include "rumus/ops/reduction_math.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autocast.hpp"
#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

using autograd::SavedTensor;

namespace {

// The number of elements each output of reducing `x` over `dims` gathers.
std::int64_t reduced_count(const Tensor& x, std::vector<std::int64_t> dims, const char* op) {
  detail::reduced_shape(x.shape(), dims, op);  // checks and normalises dims (empty: all)
  std::int64_t n = 1;
  for (auto d : dims)
    if (d < x.dim()) n *= x.shape()[std::size_t(d)];
  return n;
}

// s^(1/p) whose gradient is 0 where s = 0 (PyTorch's subgradient of a zero norm or
// deviation), written with where so that it differentiates again.
Tensor root_zero_grad_at_zero(const char* op, const Tensor& s, double p) {
  Tensor y = p == 2 ? detail::unary_kernel(UnaryOp::sqrt, s) : detail::unary_kernel(UnaryOp::pow_scalar, s, 1.0 / p);
  if (autograd::needs_grad({&s}))
    autograd::record(op, {s}, y,
                     [ss = SavedTensor(s), sy = SavedTensor(y), p](const Tensor& g) {
                       const Tensor &s = ss.get(), &y = sy.get();
                       Tensor zero = zeros({}, {.dtype = g.dtype(), .device = g.device()});
                       // d s^(1/p) / ds = s^(1/p) / (p s); 0 at s = 0.
                       Tensor safe_s = where(eq(s, 0.0), ones({}, {.dtype = s.dtype(), .device = s.device()}), s);
                       return std::vector<Tensor>{where(eq(s, 0.0), zero, div(mul(g, y), mul(safe_s, p)))};
                     },
                     {}, autograd::Backward::differentiable);
  return y;
}

Tensor floating(const char* op, const Tensor& x) {
  detail::check_defined(op, x);
  return is_floating(x.dtype()) ? x : x.to(DType::f32);
}

}  // namespace

namespace {
// The variance and the keepdim mean it subtracted.
std::tuple<Tensor, Tensor> variance(const Tensor& x, const std::vector<std::int64_t>& dims, double correction,
                                    bool keepdim) {
  detail::check_defined("var", x);
  if (!is_floating(x.dtype()))
    throw DTypeError(fmt::format("var: expected a floating-point tensor, got {}", dtype_name(x.dtype())));
  const std::int64_t n = reduced_count(x, dims, "var");
  Tensor m = mean(x, dims, true);
  Tensor d = sub(x, m);
  return {div(sum(mul(d, d), dims, keepdim), std::max(double(n) - correction, 0.0)), m};
}

// The keepdim mean as var_mean returns it.
Tensor mean_as(const Tensor& m, const Tensor& v, bool keepdim) { return keepdim ? m : m.reshape(v.shape()); }
}  // namespace

Tensor var(const Tensor& x, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
  return std::get<0>(variance(x, dims, correction, keepdim));
}

std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const std::vector<std::int64_t>& dims, double correction,
                                    bool keepdim) {
  auto [v, m] = variance(x, dims, correction, keepdim);
  return {v, mean_as(m, v, keepdim)};
}

Tensor std(const Tensor& x, const std::vector<std::int64_t>& dims, double correction, bool keepdim) {
  return root_zero_grad_at_zero("std", var(x, dims, correction, keepdim), 2);
}

std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const std::vector<std::int64_t>& dims, double correction,
                                    bool keepdim) {
  auto [v, m] = variance(x, dims, correction, keepdim);
  return {root_zero_grad_at_zero("std_mean", v, 2), mean_as(m, v, keepdim)};
}

Tensor norm(const Tensor& x_in, double p, const std::vector<std::int64_t>& dims, bool keepdim) {
  detail::check_floating("norm", x_in);
  const Tensor x = detail::autocast("norm", x_in)[0];
  if (std::isnan(p) || p < 0) throw ValueError(fmt::format("norm: expected p >= 0 or infinity, got p = {}", p));
  if (std::isinf(p)) {
    if (x.numel() == 0)
      throw ShapeError(fmt::format("norm: the {}infinity norm of an empty tensor (shape {}) is undefined",
                                   p < 0 ? "-" : "", shape_str(x.shape())));
    return p > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  }
  if (p == 0) return sum(ne(x, 0.0).to(x.dtype()), dims, keepdim);
  if (p == 1) return sum(abs(x), dims, keepdim);
  Tensor powered = p == 2 ? mul(x, x) : pow(abs(x), p);
  return root_zero_grad_at_zero("norm", sum(powered, dims, keepdim), p);
}

Tensor norm(const Tensor& x, std::string_view p, const std::vector<std::int64_t>& dims, bool keepdim) {
  if (p != "fro")
    throw ValueError(fmt::format("norm: expected p = \"fro\" or a number, got \"{}\"", p));
  return norm(x, 2.0, dims, keepdim);
}

Tensor logsumexp(const Tensor& x0, const std::vector<std::int64_t>& dims, bool keepdim) {
  const Tensor x = floating("logsumexp", x0);
  auto normalized = dims;
  detail::reduced_shape(x.shape(), normalized, "logsumexp");  // checks the dims
  // The shift: the maximum, detached (the result does not depend on it), 0 where
  // it is infinite so that -inf rows give -inf and +inf gives +inf, not NaN.
  Tensor shift = x.numel() == 0 ? Tensor() : amax(x.detach(), dims, true);
  if (!shift.defined()) return log(sum(exp(x), dims, keepdim));
  shift = masked_fill(shift, isinf(shift), 0.0);
  Tensor out = add(log(sum(exp(sub(x, shift)), dims, true)), shift);
  if (keepdim) return out;
  for (auto it = normalized.rbegin(); it != normalized.rend(); ++it)
    if (*it < out.dim()) out = out.squeeze(*it);
  return out;
}

Tensor prod(const Tensor& x_in, std::int64_t dim, bool keepdim) {
  detail::check_defined("prod", x_in);
  const Tensor x0 = detail::autocast("prod", x_in)[0];
  std::vector<std::int64_t> dims{dim};
  detail::reduced_shape(x0.shape(), dims, "prod");
  Tensor t = is_floating(x0.dtype()) || x0.dtype() == DType::i64 ? x0 : x0.to(DType::i64);
  if (t.dim() == 0) return t.clone();
  const std::int64_t d = dims[0];
  if (t.shape()[std::size_t(d)] == 0) {
    Shape s = t.shape();
    s[std::size_t(d)] = 1;
    Tensor one = ones(s, {.dtype = t.dtype(), .device = t.device()});
    return keepdim ? one : one.squeeze(d);
  }
  // Halve the dim with pairwise products until one slice is left: log2(n) kernels.
  while (t.shape()[std::size_t(d)] > 1) {
    const std::int64_t n = t.shape()[std::size_t(d)], h = n / 2;
    Tensor p = mul(t.narrow(d, 0, h), t.narrow(d, h, h));
    if (n % 2 == 1) p = cat({mul(p.narrow(d, 0, 1), t.narrow(d, n - 1, 1)), p.narrow(d, 1, h - 1)}, d);
    t = p;
  }
  return keepdim ? t : t.squeeze(d);
}

Tensor prod(const Tensor& x) {
  detail::check_defined("prod", x);
  return prod(x.reshape({-1}), 0, false);
}

namespace {
// any: some element is non-zero; all: none is zero. Counted in f32 on x's device;
// bool results (u8 for u8 input, as PyTorch).
Tensor count_test(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim, bool is_any) {
  Tensor hits = (is_any ? ne(x.detach(), 0.0) : eq(x.detach(), 0.0)).to(DType::f32);
  Tensor count = sum(hits, dims, keepdim);
  Tensor result = is_any ? gt(count, 0.0) : eq(count, 0.0);
  return x.dtype() == DType::u8 ? result.to(DType::u8) : result;  // PyTorch keeps u8 for u8
}
}  // namespace

Tensor any(const Tensor& x) {
  detail::check_defined("any", x);
  return count_test(x, {}, false, true);
}
Tensor any(const Tensor& x, std::int64_t dim, bool keepdim) {
  detail::check_defined("any", x);
  std::vector<std::int64_t> dims{dim};
  detail::reduced_shape(x.shape(), dims, "any");
  return count_test(x, x.dim() == 0 ? std::vector<std::int64_t>{} : dims, keepdim, true);
}
Tensor all(const Tensor& x) {
  detail::check_defined("all", x);
  return count_test(x, {}, false, false);
}
Tensor all(const Tensor& x, std::int64_t dim, bool keepdim) {
  detail::check_defined("all", x);
  std::vector<std::int64_t> dims{dim};
  detail::reduced_shape(x.shape(), dims, "all");
  return count_test(x, x.dim() == 0 ? std::vector<std::int64_t>{} : dims, keepdim, false);
}

Tensor nansum(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  detail::check_defined("nansum", x);
  if (!is_floating(x.dtype())) return sum(x, dims, keepdim);
  return sum(masked_fill(x, isnan(x.detach()), 0.0), dims, keepdim);
}

Tensor nanmean(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  detail::check_floating("nanmean", x);
  Tensor count = sum(eq(isnan(x.detach()), 0.0).to(x.dtype()), dims, keepdim);
  return div(nansum(x, dims, keepdim), count);
}

Tensor Tensor::var(const std::vector<std::int64_t>& dims, double correction, bool keepdim) const {
  return rumus::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const std::vector<std::int64_t>& dims, double correction, bool keepdim) const {
  return rumus::std(*this, dims, correction, keepdim);
}
Tensor Tensor::norm(double p, const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::norm(*this, p, dims, keepdim);
}
Tensor Tensor::logsumexp(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::prod() const { return rumus::prod(*this); }
Tensor Tensor::prod(std::int64_t dim, bool keepdim) const { return rumus::prod(*this, dim, keepdim); }
Tensor Tensor::any() const { return rumus::any(*this); }
Tensor Tensor::any(std::int64_t dim, bool keepdim) const { return rumus::any(*this, dim, keepdim); }
Tensor Tensor::all() const { return rumus::all(*this); }
Tensor Tensor::all(std::int64_t dim, bool keepdim) const { return rumus::all(*this, dim, keepdim); }
Tensor Tensor::nansum(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::nansum(*this, dims, keepdim);
}
Tensor Tensor::nanmean(const std::vector<std::int64_t>& dims, bool keepdim) const {
  return rumus::nanmean(*this, dims, keepdim);
}

}  // namespace rumus
