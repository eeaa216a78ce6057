// The initialisers with structure: orthogonal_, eye_, dirac_ and trunc_normal_.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/nn/init.hpp"
#include "rumus/nn/deferred_init.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/pointwise_math.hpp"

namespace rumus::nn::init {

namespace {
// Orthonormalises the n columns of the row-major [m, n] matrix a in place
// (m >= n): modified Gram-Schmidt, run twice for accuracy. The R it implies
// has a positive diagonal, so this is PyTorch's q * sign(diag(r)).
void orthonormal_columns(std::vector<double>& a, std::int64_t m, std::int64_t n) {
  auto at = [&](std::int64_t i, std::int64_t j) -> double& { return a[std::size_t(i * n + j)]; };
  for (std::int64_t j = 0; j < n; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t k = 0; k < j; ++k) {
        double dot = 0;
        for (std::int64_t i = 0; i < m; ++i) dot += at(i, k) * at(i, j);
        for (std::int64_t i = 0; i < m; ++i) at(i, j) -= dot * at(i, k);
      }
    double norm = 0;
    for (std::int64_t i = 0; i < m; ++i) norm += at(i, j) * at(i, j);
    norm = std::sqrt(norm);
    for (std::int64_t i = 0; i < m; ++i) at(i, j) /= norm;
  }
}
void write(Tensor& t, const std::vector<double>& values) {
  NoGradGuard no_grad;
  t.copy_(tensor(values, t.shape(), {.dtype = DType::f64}).to(t.dtype()).to(t.device()));
}
}  // namespace

void orthogonal_(Tensor& t, double gain, Generator* gen) {
  materialize(t);  // a deferred parameter: these fill it for real (deferred_init.hpp)
  if (t.dim() < 2)
    throw ShapeError(fmt::format("orthogonal_: expected a tensor of 2 or more dims, got shape {}", shape_str(t.shape())));
  const std::int64_t rows = t.size(0), cols = rows ? t.numel() / rows : 0;
  if (t.numel() == 0) return;
  std::vector<double> flat = normal({rows, cols}, 0.0, 1.0, {.dtype = DType::f64}, gen).to_vector<double>();
  // Orthonormal columns of the taller orientation: rows when the matrix is wide.
  const bool wide = rows < cols;
  const std::int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  std::vector<double> a(flat.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      a[std::size_t(wide ? j * n + i : i * n + j)] = flat[std::size_t(i * cols + j)];
  orthonormal_columns(a, m, n);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j)
      flat[std::size_t(i * cols + j)] = gain * a[std::size_t(wide ? j * n + i : i * n + j)];
  write(t, flat);
}

void eye_(Tensor& t) {
  materialize(t);  // a deferred parameter: these fill it for real (deferred_init.hpp)
  if (t.dim() != 2) throw ShapeError(fmt::format("eye_: expected a 2-D tensor, got shape {}", shape_str(t.shape())));
  NoGradGuard no_grad;
  t.copy_(eye(t.size(0), t.size(1), {.dtype = t.dtype(), .device = t.device()}));
}

void dirac_(Tensor& t, std::int64_t groups) {
  materialize(t);  // a deferred parameter: these fill it for real (deferred_init.hpp)
  if (t.dim() < 3 || t.dim() > 5)
    throw ShapeError(fmt::format("dirac_: expected a 3-, 4- or 5-D tensor, got shape {}", shape_str(t.shape())));
  if (groups < 1 || t.size(0) % groups != 0)
    throw ValueError(fmt::format("dirac_: expected dim 0 ({}) divisible by groups ({})", t.size(0), groups));
  const std::int64_t out_per_group = t.size(0) / groups, channels = std::min(out_per_group, t.size(1));
  std::vector<double> v(std::size_t(t.numel()), 0.0);
  std::int64_t spatial = 1, centre = 0;
  for (std::int64_t d = 2; d < t.dim(); ++d) {
    centre = centre * t.size(d) + t.size(d) / 2;
    spatial *= t.size(d);
  }
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t c = 0; c < channels; ++c)
      v[std::size_t(((g * out_per_group + c) * t.size(1) + c) * spatial + centre)] = 1.0;
  write(t, v);
}

void trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  materialize(t);  // a deferred parameter: these fill it for real (deferred_init.hpp)
  if (!(a < b)) throw ValueError(fmt::format("trunc_normal_: expected a < b, got a = {}, b = {}", a, b));
  if (!(std > 0)) throw ValueError(fmt::format("trunc_normal_: expected std > 0, got {}", std));
  if (!is_floating(t.dtype()))
    throw DTypeError(fmt::format("trunc_normal_: expected a floating tensor, got {}", dtype_name(t.dtype())));
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::numbers::sqrt2)) / 2.0; };
  const double lo = cdf((a - mean) / std), hi = cdf((b - mean) / std);
  // Uniform on the truncated CDF range, mapped back through the inverse CDF;
  // drawn in f64 so the tails stay accurate, clamped against rounding.
  Tensor u = uniform(t.shape(), 2.0 * lo - 1.0, 2.0 * hi - 1.0, {.dtype = DType::f64, .device = t.device()}, gen);
  Tensor x = clamp(add(mul(erfinv(u), std * std::numbers::sqrt2), mean), a, b);
  NoGradGuard no_grad;
  t.copy_(x.to(t.dtype()));
}

}  // namespace rumus::nn::init
