// Layer normalisation in one pass over each row: the statistics, the
// normalised output and, backward, the input gradient with the weight and
// bias gradients. The composition it replaces made a dozen passes over the
// activations per call.
#include "../layer_norm.hpp"
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"

namespace rumus::cpu {

namespace {

// Rows are taken in blocks whose weight and bias gradients are summed
// separately, then block by block in order: the sums do not depend on the
// number of threads. At most kMaxBlocks blocks, of at least kMinBlockRows rows.
constexpr std::int64_t kMaxBlocks = 64, kMinBlockRows = 64;

template <class T>
void forward(TensorArg out_a, TensorArg mean_a, TensorArg invstd_a, TensorArg x_a, TensorArg w_a, TensorArg b_a,
             double eps) {
  const std::int64_t d = x_a.layout->shape.back(), rows = d ? x_a.layout->numel() / d : 0;
  const T* x = base_of<T>(x_a);
  const T *w = base_of<T>(w_a), *b = base_of<T>(b_a);
  T *out = base_of<T>(out_a), *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a);
  _Pragma("omp parallel for schedule(static) if (rows * d > kParallelGrain)")
  for (std::int64_t r = 0; r < rows; ++r) with_isa([&]() RUMUS_INLINE {
    const T* xr = x + r * d;
    T* yr = out + r * d;
    T sum = 0;
    _Pragma("omp simd reduction(+ : sum)")
    for (std::int64_t j = 0; j < d; ++j) sum += xr[j];
    const T mu = sum / T(d);
    T sq = 0;  // two passes over a row in cache: no cancellation in the variance
    _Pragma("omp simd reduction(+ : sq)")
    for (std::int64_t j = 0; j < d; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const T rs = T(1) / std::sqrt(sq / T(d) + T(eps));
    mean[r] = mu;
    invstd[r] = rs;
    if (w && b) {
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs * w[j] + b[j];
    } else if (w) {
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs * w[j];
    } else if (b) {
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs + b[j];
    } else {
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - mu) * rs;
    }
  });
}

template <class T>
void backward(TensorArg gx_a, TensorArg gw_a, TensorArg gb_a, TensorArg g_a, TensorArg x_a, TensorArg mean_a,
              TensorArg invstd_a, TensorArg w_a) {
  const std::int64_t d = x_a.layout->shape.back(), rows = d ? x_a.layout->numel() / d : 0;
  const T *x = base_of<T>(x_a), *g = base_of<T>(g_a), *mean = base_of<T>(mean_a), *invstd = base_of<T>(invstd_a);
  const T* w = base_of<T>(w_a);
  T *gx = base_of<T>(gx_a), *gw = base_of<T>(gw_a), *gb = base_of<T>(gb_a);
  const bool params = gw || gb;
  const std::int64_t block_rows = std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
  const std::int64_t blocks = (rows + block_rows - 1) / block_rows;
  // Per block: d sums for the weight, then d for the bias.
  std::vector<T> partial(params ? std::size_t(blocks * 2 * d) : 0, T(0));
  _Pragma("omp parallel for schedule(dynamic, 1) if (rows * d > kParallelGrain)")
  for (std::int64_t blk = 0; blk < blocks; ++blk) with_isa([&]() RUMUS_INLINE {
    T* pw = params ? partial.data() + blk * 2 * d : nullptr;
    T* pb = params ? pw + d : nullptr;
    for (std::int64_t r = blk * block_rows; r < std::min(rows, (blk + 1) * block_rows); ++r) {
      const T* xr = x + r * d;
      const T* gr = g + r * d;
      const T mu = mean[r], rs = invstd[r];
      if (params) {
        for (std::int64_t j = 0; j < d; ++j) {
          pw[j] += gr[j] * (xr[j] - mu) * rs;
          pb[j] += gr[j];
        }
      }
      if (!gx) continue;
      // dxhat = g * w; dx = (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) * invstd.
      T s1 = 0, s2 = 0;
      if (w) {
        _Pragma("omp simd reduction(+ : s1, s2)")
        for (std::int64_t j = 0; j < d; ++j) {
          const T dxh = gr[j] * w[j];
          s1 += dxh;
          s2 += dxh * (xr[j] - mu);
        }
      } else {
        _Pragma("omp simd reduction(+ : s1, s2)")
        for (std::int64_t j = 0; j < d; ++j) {
          s1 += gr[j];
          s2 += gr[j] * (xr[j] - mu);
        }
      }
      const T c1 = s1 / T(d), c2 = s2 * rs / T(d);  // mean(dxhat), mean(dxhat * xhat)
      T* gxr = gx + r * d;
      if (w) {
        for (std::int64_t j = 0; j < d; ++j) gxr[j] = (gr[j] * w[j] - c1 - (xr[j] - mu) * rs * c2) * rs;
      } else {
        for (std::int64_t j = 0; j < d; ++j) gxr[j] = (gr[j] - c1 - (xr[j] - mu) * rs * c2) * rs;
      }
    }
  });
  if (!params) return;
  for (std::int64_t j = 0; j < d; ++j) {
    T sw = 0, sb = 0;
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      sw += partial[std::size_t(blk * 2 * d + j)];
      sb += partial[std::size_t(blk * 2 * d + d + j)];
    }
    if (gw) gw[j] = sw;
    if (gb) gb[j] = sb;
  }
}

void require_dense(const char* op, std::initializer_list<TensorArg> args) {
  for (const TensorArg& a : args)
    if (a.storage && !a.layout->is_contiguous())
      throw Error(std::string(op) + ": cpu kernel needs contiguous operands");
}

}  // namespace

void layer_norm_forward(Backend& be, TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                                    TensorArg bias, double eps) {
  require_dense("layer_norm_forward", {out, mean, invstd, x, weight, bias});
  if (x.dtype == DType::f32) return forward<float>(out, mean, invstd, x, weight, bias, eps);
  if (x.dtype == DType::f64) return forward<double>(out, mean, invstd, x, weight, bias, eps);
  throw DTypeError("layer_norm_forward: cpu kernel supports f32 and f64, got " + std::string(dtype_name(x.dtype)));
}

void layer_norm_backward(Backend& be, TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                                     TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight) {
  require_dense("layer_norm_backward", {grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight});
  if (x.dtype == DType::f32)
    return backward<float>(grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight);
  if (x.dtype == DType::f64)
    return backward<double>(grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight);
  throw DTypeError("layer_norm_backward: cpu kernel supports f32 and f64, got " + std::string(dtype_name(x.dtype)));
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, layer_norm) {
  register_kernel<LayerNormForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::layer_norm_forward);
  register_kernel<LayerNormBackwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::layer_norm_backward);
}

}  // namespace rumus
