// Fused optimizer updates: one pass over parameter, gradient and state.
#include <cmath>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

namespace {
bool all_dense(std::initializer_list<TensorArg> args) {
  for (const TensorArg& a : args)
    if (!a.layout->is_contiguous()) return false;
  return true;
}
template <class T>
T* at(TensorArg t) { return data_of<T>(t) + t.layout->offset; }
// Calls f with a zero of the parameter's type (f32 or f64).
template <class F>
void dispatch_f32_f64(DType dt, F&& f) {
  if (dt == DType::f32) f(float{});
  else f(double{});
}
}  // namespace

void CpuBackend::sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) {
  if ((param.dtype != DType::f32 && param.dtype != DType::f64) || !all_dense({param, grad, buf}))
    return composed_sgd_step(*this, s, param, grad, buf);
  const std::int64_t n = param.layout->numel();
  dispatch_f32_f64(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = at<T>(param);
    const T* g = at<T>(grad);
    T* b = at<T>(buf);
    const T lr = T(s.lr), mom = T(s.momentum), damp = T(1 - s.dampening), wd = T(s.weight_decay);
    const bool has_mom = s.momentum != 0, first = s.first, nesterov = s.nesterov;
    _Pragma("omp parallel for simd if (n > kParallelGrain) schedule(static)")
    for (std::int64_t i = 0; i < n; ++i) {
      T d = g[i] + wd * p[i];
      if (has_mom) {
        T m = first ? d : mom * b[i] + damp * d;
        b[i] = m;
        d = nesterov ? d + mom * m : m;
      }
      p[i] -= lr * d;
    }
  });
}

void CpuBackend::adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) {
  if ((param.dtype != DType::f32 && param.dtype != DType::f64) || !all_dense({param, grad, m, v}))
    return composed_adam_step(*this, s, param, grad, m, v);
  const std::int64_t n = param.layout->numel();
  dispatch_f32_f64(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = at<T>(param);
    const T* g = at<T>(grad);
    T* pm = at<T>(m);
    T* pv = at<T>(v);
    const double c1 = 1.0 - std::pow(s.beta1, double(s.step)), c2 = 1.0 - std::pow(s.beta2, double(s.step));
    const T b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps), step_size = T(s.lr / c1), inv_sqrt_c2 = T(1 / std::sqrt(c2));
    const T coupled_wd = s.decoupled ? T(0) : T(s.weight_decay);
    const T decay = s.decoupled ? T(1 - s.lr * s.weight_decay) : T(1);
    _Pragma("omp parallel for simd if (n > kParallelGrain) schedule(static)")
    for (std::int64_t i = 0; i < n; ++i) {
      T d = g[i] + coupled_wd * p[i];
      T mi = b1 * pm[i] + (T(1) - b1) * d;
      T vi = b2 * pv[i] + (T(1) - b2) * d * d;
      pm[i] = mi;
      pv[i] = vi;
      p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_c2 + eps);
    }
  });
}

}  // namespace rumus::cpu
