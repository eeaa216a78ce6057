// CPU kernels of the batch-norm family (../batch_norm.hpp). The reductions
// take a channel per thread and sum in double (f32's sums over half a million
// values keep their digits); the per-element passes take a plane [n, c] per
// iteration, with the channel's constants hoisted out of the inner loop.
#include "../batch_norm.hpp"

#include <algorithm>
#include <cmath>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"

namespace rumus::cpu {
namespace {


void check(const char* op, std::initializer_list<TensorArg> operands) {
  for (TensorArg t : operands)
    if (t.storage) require_contiguous(op, t);
}

template <class T>
void stats(TensorArg mean_a, TensorArg invstd_a, TensorArg rm_a, TensorArg rv_a, TensorArg x_a, double eps,
           double momentum) {
  const std::int64_t n = x_a.layout->shape[0], c = x_a.layout->shape[1], hw = x_a.layout->shape[2];
  const T* x = base_of<T>(x_a);
  T *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a), *rm = base_of<T>(rm_a), *rv = base_of<T>(rv_a);
  const double m = double(n * hw);
  _Pragma("omp parallel for schedule(static) if (n * c * hw > kParallelGrain)")
  for (std::int64_t ch = 0; ch < c; ++ch) with_isa([&]() RUMUS_INLINE {
    // Sums shifted by the channel's first value: one pass without E[x^2] - E[x]^2's cancellation.
    const double shift = double(x[ch * hw]);
    double s = 0, q = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const T* row = x + (i * c + ch) * hw;
      _Pragma("omp simd reduction(+ : s, q)")
      for (std::int64_t j = 0; j < hw; ++j) {
        const double d = double(row[j]) - shift;
        s += d;
        q += d * d;
      }
    }
    const double mu = s / m, var = std::max(0.0, (q - s * mu) / m);
    mean[ch] = T(shift + mu);
    invstd[ch] = T(1.0 / std::sqrt(var + eps));
    if (rm) {
      rm[ch] = T((1.0 - momentum) * double(rm[ch]) + momentum * (shift + mu));
      rv[ch] = T((1.0 - momentum) * double(rv[ch]) + momentum * var * m / (m - 1.0));
    }
  });
}

template <class T>
void forward(TensorArg out_a, TensorArg x_a, TensorArg mean_a, TensorArg invstd_a, TensorArg w_a, TensorArg b_a) {
  const std::int64_t n = x_a.layout->shape[0], c = x_a.layout->shape[1], hw = x_a.layout->shape[2];
  const T *x = base_of<T>(x_a), *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a);
  const T *w = base_of<T>(w_a), *b = base_of<T>(b_a);
  T* out = base_of<T>(out_a);
  _Pragma("omp parallel for schedule(static) if (n * c * hw > kParallelGrain)")
  for (std::int64_t p = 0; p < n * c; ++p) with_isa([&]() RUMUS_INLINE {
    const std::int64_t ch = p % c;
    const T mu = mean[ch], scale = invstd[ch] * (w ? w[ch] : T(1)), shift = b ? b[ch] : T(0);
    const T* xr = x + p * hw;
    T* yr = out + p * hw;
    _Pragma("omp simd")
    for (std::int64_t j = 0; j < hw; ++j) yr[j] = (xr[j] - mu) * scale + shift;
  });
}

template <class T>
void backward_reduce(TensorArg sdy_a, TensorArg sdx_a, TensorArg g_a, TensorArg x_a, TensorArg mean_a,
                     TensorArg invstd_a) {
  const std::int64_t n = x_a.layout->shape[0], c = x_a.layout->shape[1], hw = x_a.layout->shape[2];
  const T *g = base_of<T>(g_a), *x = base_of<T>(x_a), *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a);
  T *sdy = base_of<T>(sdy_a), *sdx = base_of<T>(sdx_a);
  _Pragma("omp parallel for schedule(static) if (n * c * hw > kParallelGrain)")
  for (std::int64_t ch = 0; ch < c; ++ch) with_isa([&]() RUMUS_INLINE {
    const double mu = double(mean[ch]);
    double s = 0, sx = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const T *gr = g + (i * c + ch) * hw, *xr = x + (i * c + ch) * hw;
      _Pragma("omp simd reduction(+ : s, sx)")
      for (std::int64_t j = 0; j < hw; ++j) {
        s += double(gr[j]);
        sx += double(gr[j]) * (double(xr[j]) - mu);
      }
    }
    sdy[ch] = T(s);
    sdx[ch] = T(sx * double(invstd[ch]));
  });
}

template <class T>
void backward(TensorArg gx_a, TensorArg g_a, TensorArg x_a, TensorArg mean_a, TensorArg invstd_a, TensorArg w_a,
              TensorArg sdy_a, TensorArg sdx_a) {
  const std::int64_t n = x_a.layout->shape[0], c = x_a.layout->shape[1], hw = x_a.layout->shape[2];
  const T *g = base_of<T>(g_a), *x = base_of<T>(x_a), *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a);
  const T *w = base_of<T>(w_a), *sdy = base_of<T>(sdy_a), *sdx = base_of<T>(sdx_a);
  T* gx = base_of<T>(gx_a);
  const double m = double(n * hw);
  _Pragma("omp parallel for schedule(static) if (n * c * hw > kParallelGrain)")
  for (std::int64_t p = 0; p < n * c; ++p) with_isa([&]() RUMUS_INLINE {
    const std::int64_t ch = p % c;
    // grad_x = k * g - k * sum_dy / M - (x - mean) * k * invstd * sum_dy_xhat / M, k = weight * invstd.
    const double is = double(invstd[ch]), k = is * (w ? double(w[ch]) : 1.0);
    const T mu = mean[ch], a = T(k), shift = T(k * double(sdy[ch]) / m), cx = T(k * is * double(sdx[ch]) / m);
    const T *gr = g + p * hw, *xr = x + p * hw;
    T* out = gx + p * hw;
    _Pragma("omp simd")
    for (std::int64_t j = 0; j < hw; ++j) out[j] = a * gr[j] - shift - (xr[j] - mu) * cx;
  });
}

void batch_norm_stats(Backend&, TensorArg mean, TensorArg invstd, TensorArg running_mean, TensorArg running_var,
                      TensorArg x, double eps, double momentum) {
  check("batch_norm_stats", {mean, invstd, running_mean, running_var, x});
  if (x.dtype == DType::f64) stats<double>(mean, invstd, running_mean, running_var, x, eps, momentum);
  else stats<float>(mean, invstd, running_mean, running_var, x, eps, momentum);
}

void batch_norm_forward(Backend&, TensorArg out, TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight,
                        TensorArg bias) {
  check("batch_norm_forward", {out, x, mean, invstd, weight, bias});
  if (x.dtype == DType::f64) forward<double>(out, x, mean, invstd, weight, bias);
  else forward<float>(out, x, mean, invstd, weight, bias);
}

void batch_norm_backward_reduce(Backend&, TensorArg sum_dy, TensorArg sum_dy_xhat, TensorArg grad_out, TensorArg x,
                                TensorArg mean, TensorArg invstd) {
  check("batch_norm_backward_reduce", {sum_dy, sum_dy_xhat, grad_out, x, mean, invstd});
  if (x.dtype == DType::f64) backward_reduce<double>(sum_dy, sum_dy_xhat, grad_out, x, mean, invstd);
  else backward_reduce<float>(sum_dy, sum_dy_xhat, grad_out, x, mean, invstd);
}

void batch_norm_backward(Backend&, TensorArg grad_x, TensorArg grad_out, TensorArg x, TensorArg mean,
                         TensorArg invstd, TensorArg weight, TensorArg sum_dy, TensorArg sum_dy_xhat) {
  check("batch_norm_backward", {grad_x, grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xhat});
  if (x.dtype == DType::f64) backward<double>(grad_x, grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xhat);
  else backward<float>(grad_x, grad_out, x, mean, invstd, weight, sum_dy, sum_dy_xhat);
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, batch_norm) {
  const DTypeSet dtypes{DType::f32, DType::f64};
  register_kernel<BatchNormStatsKernel>(Device::Kind::cpu, dtypes, &cpu::batch_norm_stats);
  register_kernel<BatchNormForwardKernel>(Device::Kind::cpu, dtypes, &cpu::batch_norm_forward);
  register_kernel<BatchNormBackwardReduceKernel>(Device::Kind::cpu, dtypes, &cpu::batch_norm_backward_reduce);
  register_kernel<BatchNormBackwardKernel>(Device::Kind::cpu, dtypes, &cpu::batch_norm_backward);
}

}  // namespace rumus
