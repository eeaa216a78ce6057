// Fused optimizer updates: one pass over parameter, gradient and state,
// vectorised for the CPU's widest instructions (isa.hpp).
#include "../optimizer_step.hpp"
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"

namespace rumus::cpu {

namespace {

bool all_dense(std::initializer_list<TensorArg> args) {
  for (const TensorArg& a : args)
    if (!a.layout->is_contiguous()) return false;
  return true;
}
template <class T>
T* at(TensorArg t) { return data_of<T>(t) + t.layout->offset; }

// Thread t's share of [0, n) among nt: 64-byte aligned (16 floats) but the last.
std::pair<std::int64_t, std::int64_t> share(std::int64_t n, std::int64_t t, std::int64_t nt) {
  return {n * t / nt / 16 * 16, t + 1 == nt ? n : n * (t + 1) / nt / 16 * 16};
}

// fn(begin, end) over [0, n), split into one share per thread when n is large.
template <class F>
void split_across_threads(std::int64_t n, F&& fn) {
  if (n <= kParallelGrain || omp_get_max_threads() == 1) return fn(std::int64_t(0), n);
#pragma omp parallel
  {
    const auto [begin, end] = share(n, omp_get_thread_num(), omp_get_num_threads());
    fn(begin, end);
  }
}

// fn(i, begin, end) over each of the lists' [0, sizes[i]), in one parallel
// region when their sum is large: lists under kWholeOnOneThread elements go
// whole to one thread (dealt in turn), larger ones in a share per thread.
constexpr std::int64_t kWholeOnOneThread = 4096;
template <class F>
void foreach_across_threads(std::span<const std::int64_t> sizes, F&& fn) {
  std::int64_t total = 0;
  for (std::int64_t n : sizes) total += n;
  if (total <= kParallelGrain || omp_get_max_threads() == 1) {
    for (std::size_t i = 0; i < sizes.size(); ++i) fn(i, std::int64_t(0), sizes[i]);
    return;
  }
#pragma omp parallel
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    std::int64_t dealt = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::int64_t n = sizes[i];
      if (n < kWholeOnOneThread) {
        if (dealt++ % nt == t) fn(i, std::int64_t(0), n);
        continue;
      }
      const auto [begin, end] = share(n, t, nt);
      fn(i, begin, end);
    }
  }
}

// Optimizer state is stored as zero once it falls below the smallest normal
// number. A state entry whose gradient stays zero (the weights of a dead ReLU
// unit) decays geometrically into the subnormal range and stays there: 0.9
// times the smallest subnormal rounds back to itself. Many x86 CPUs run
// arithmetic on subnormals about a hundred times slower, and a step that
// carried such a buffer ran at two thirds of the speed. The value dropped is
// below 1e-38 (f32), far under anything the parameter update can resolve.
template <class T>
[[gnu::always_inline]] inline T flush_subnormal(T x) {
  return std::abs(x) < std::numeric_limits<T>::min() ? T(0) : x;
}

template <class T>
struct SgdLoop {
  T* p;
  const T* g;
  T* b;
  T lr, momentum, damp, weight_decay;
  bool has_momentum, first, nesterov;
};

// One loop per case, so that each is a straight vectorisable body.
template <class T>
[[gnu::always_inline]] inline void sgd_loop(const SgdLoop<T>& a, std::int64_t begin, std::int64_t end) {
  T* __restrict p = a.p;
  const T* __restrict g = a.g;
  T* __restrict b = a.b;
  const T lr = a.lr, mom = a.momentum, damp = a.damp, wd = a.weight_decay;
  if (!a.has_momentum) {
    for (std::int64_t i = begin; i < end; ++i) p[i] -= lr * (g[i] + wd * p[i]);
  } else if (a.first) {  // the buffer becomes the gradient
    for (std::int64_t i = begin; i < end; ++i) {
      const T d = g[i] + wd * p[i];
      b[i] = d;
      p[i] -= lr * (a.nesterov ? d + mom * d : d);
    }
  } else if (a.nesterov) {
    for (std::int64_t i = begin; i < end; ++i) {
      const T d = g[i] + wd * p[i], m = flush_subnormal(mom * b[i] + damp * d);
      b[i] = m;
      p[i] -= lr * (d + mom * m);
    }
  } else {
    for (std::int64_t i = begin; i < end; ++i) {
      const T m = flush_subnormal(mom * b[i] + damp * (g[i] + wd * p[i]));
      b[i] = m;
      p[i] -= lr * m;
    }
  }
}

template <class T>
struct AdamLoop {
  T* p;
  const T* g;
  T* m;
  T* v;
  T beta1, beta2, eps, step_size, inv_sqrt_c2, coupled_wd, decay;
};

template <class T>
[[gnu::always_inline]] inline void adam_loop(const AdamLoop<T>& a, std::int64_t begin, std::int64_t end) {
  T* __restrict p = a.p;
  const T* __restrict g = a.g;
  T* __restrict pm = a.m;
  T* __restrict pv = a.v;
  const T b1 = a.beta1, b2 = a.beta2, eps = a.eps, step_size = a.step_size, inv_sqrt_c2 = a.inv_sqrt_c2;
  const T coupled_wd = a.coupled_wd, decay = a.decay;
  for (std::int64_t i = begin; i < end; ++i) {
    const T d = g[i] + coupled_wd * p[i];
    const T mi = flush_subnormal(b1 * pm[i] + (T(1) - b1) * d);
    const T vi = flush_subnormal(b2 * pv[i] + (T(1) - b2) * d * d);
    pm[i] = mi;
    pv[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_c2 + eps);
  }
}

RUMUS_CPU_ISA_VARIANTS(sgd_f32, const SgdLoop<float>&, sgd_loop<float>)
RUMUS_CPU_ISA_VARIANTS(sgd_f64, const SgdLoop<double>&, sgd_loop<double>)
RUMUS_CPU_ISA_VARIANTS(adam_f32, const AdamLoop<float>&, adam_loop<float>)
RUMUS_CPU_ISA_VARIANTS(adam_f64, const AdamLoop<double>&, adam_loop<double>)

template <class T>
void sgd(const SgdLoop<T>& a, std::int64_t n) {
  split_across_threads(n, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) sgd_f32(a, begin, end);
    else sgd_f64(a, begin, end);
  });
}

template <class T>
void adam(const AdamLoop<T>& a, std::int64_t n) {
  split_across_threads(n, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) adam_f32(a, begin, end);
    else adam_f64(a, begin, end);
  });
}

// The per-step values computed on the device (an f32[5] scalars tensor, see
// ../optimizer_step.hpp): null when the fields hold them.
const float* device_scalars(TensorArg s) {
  return s.storage != nullptr && s.layout->numel() == 5 ? at<float>(s) : nullptr;
}

// Calls f with a zero of the parameter's type (f32 or f64).
template <class F>
void dispatch_f32_f64(DType dt, F&& f) {
  if (dt == DType::f32) f(float{});
  else f(double{});
}

template <class T>
SgdLoop<T> sgd_loop_of(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf, const float* d) {
  // With device scalars, the lr, first, momentum and dampening of this step come from them.
  return {at<T>(param), at<T>(grad), at<T>(buf), d ? T(d[0]) : T(s.lr), d ? T(d[2]) : T(s.momentum),
          d ? T(1 - T(d[3])) : T(1 - s.dampening), T(s.weight_decay), s.momentum != 0, d ? d[1] != 0 : s.first,
          s.nesterov};
}

// The Adam loop's values; with device scalars, also zeroes the moments on
// their first update (they may never have been written).
template <class T>
AdamLoop<T> adam_loop_of(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v,
                         const float* d) {
  double lr = s.lr, c1 = 1.0 - std::pow(s.beta1, double(s.step)), c2 = 1.0 - std::pow(s.beta2, double(s.step));
  if (d) {
    lr = d[0], c1 = d[1], c2 = d[2];
    if (d[3] != 0)
      for (TensorArg t : {m, v}) std::fill_n(at<T>(t), t.layout->numel(), T(0));
  }
  return {at<T>(param),
          at<T>(grad),
          at<T>(m),
          at<T>(v),
          T(s.beta1),
          T(s.beta2),
          T(s.eps),
          T(lr / c1),
          T(1 / std::sqrt(c2)),
          s.decoupled ? T(0) : T(s.weight_decay),
          s.decoupled ? T(1 - lr * s.weight_decay) : T(1)};
}

}  // namespace

void sgd_step(Backend& be, const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) {
  // ops/optimizer_step.cpp composes the update for anything else.
  if ((param.dtype != DType::f32 && param.dtype != DType::f64) || !all_dense({param, grad, buf}))
    throw DeviceError("sgd_step_: the CPU kernel takes contiguous f32 or f64 operands");
  const float* d = device_scalars(s.scalars);
  if (d && d[4] != 0) return;  // mixed precision found an inf or NaN: skipped
  dispatch_f32_f64(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    sgd(sgd_loop_of<T>(s, param, grad, buf, d), param.layout->numel());
  });
}

// Several SGD updates (dense f32, ops/optimizer_step.cpp checks) in one
// parallel region: one wake-up of the team for the whole step.
void sgd_step_foreach(Backend& be, const SgdKernelArgs& s, std::span<const SgdOperands> updates) {
  std::vector<SgdLoop<float>> loops;
  std::vector<std::int64_t> sizes;
  for (const SgdOperands& u : updates) {
    const float* d = device_scalars(u.scalars);
    if (d && d[4] != 0) continue;  // skipped, as sgd_step
    loops.push_back(sgd_loop_of<float>(s, u.param, u.grad, u.momentum_buf, d));
    sizes.push_back(u.param.layout->numel());
  }
  foreach_across_threads(sizes, [&](std::size_t i, std::int64_t begin, std::int64_t end) { sgd_f32(loops[i], begin, end); });
}

void adam_step(Backend& be, const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) {
  if ((param.dtype != DType::f32 && param.dtype != DType::f64) || !all_dense({param, grad, m, v}))
    throw DeviceError("adam_step_: the CPU kernel takes contiguous f32 or f64 operands");
  const float* d = device_scalars(s.scalars);
  if (d && d[4] != 0) return;  // mixed precision found an inf or NaN: skipped
  dispatch_f32_f64(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    adam(adam_loop_of<T>(s, param, grad, m, v, d), param.layout->numel());
  });
}

void adam_step_foreach(Backend& be, const AdamKernelArgs& s, std::span<const AdamOperands> updates) {
  std::vector<AdamLoop<float>> loops;
  std::vector<std::int64_t> sizes;
  for (const AdamOperands& u : updates) {
    const float* d = device_scalars(u.scalars);
    if (d && d[4] != 0) continue;
    loops.push_back(adam_loop_of<float>(s, u.param, u.grad, u.exp_avg, u.exp_avg_sq, d));
    sizes.push_back(u.param.layout->numel());
  }
  foreach_across_threads(sizes, [&](std::size_t i, std::int64_t begin, std::int64_t end) { adam_f32(loops[i], begin, end); });
}

void amp_unscale(Backend& be, TensorArg out, TensorArg grad, TensorArg found_inf, TensorArg inv_scale_t,
                 double inv_scale) {
  dispatch_f32_f64(grad.dtype, [&](auto zero) {
    using T = decltype(zero);
    T* __restrict o = at<T>(out);
    const T* __restrict g = at<T>(grad);
    const T inv = inv_scale_t.storage != nullptr ? T(*at<float>(inv_scale_t)) : T(inv_scale);
    int bad = 0;
    const std::int64_t n = grad.layout->numel();
#pragma omp parallel for simd reduction(| : bad) if (n > kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) {
      const T x = g[i] * inv;
      o[i] = x;
      bad |= !std::isfinite(x);
    }
    if (bad) *at<float>(found_inf) = 1.0f;
  });
}

// All gradients in one parallel region; a thread's share of each is
// checked on its own and the findings joined.
void amp_unscale_foreach(Backend& be, std::span<const AmpUnscaleOperands> grads, TensorArg found_inf,
                         TensorArg inv_scale) {
  if (grads.empty()) return;
  std::vector<std::int64_t> sizes;
  for (const AmpUnscaleOperands& u : grads) sizes.push_back(u.grad.layout->numel());
  const float inv = *at<float>(inv_scale);
  int bad = 0;
  dispatch_f32_f64(grads[0].grad.dtype, [&](auto zero) {
    using T = decltype(zero);
    foreach_across_threads(sizes, [&](std::size_t i, std::int64_t begin, std::int64_t end) {
      T* __restrict o = at<T>(grads[i].out);
      const T* __restrict g = at<T>(grads[i].grad);
      int here = 0;
#pragma omp simd reduction(| : here)
      for (std::int64_t j = begin; j < end; ++j) {
        const T x = g[j] * T(inv);
        o[j] = x;
        here |= !std::isfinite(x);
      }
      if (here) {
#pragma omp atomic write
        bad = 1;
      }
    });
  });
  if (bad) *at<float>(found_inf) = 1.0f;
}

// In f32, as the device keeps the scale.
void amp_update_scale(Backend& be, TensorArg scale, TensorArg growth_tracker, TensorArg found_inf,
                      double growth_factor, double backoff_factor, std::int64_t growth_interval) {
  float& s = *at<float>(scale);
  float& count = *at<float>(growth_tracker);
  if (*at<float>(found_inf) > 0) {
    s *= float(backoff_factor);
    count = 0;
    return;
  }
  const float counted = count + 1;
  if (counted == float(growth_interval)) {
    s = std::min(s * float(growth_factor), std::numeric_limits<float>::max());
    count = 0;
  } else {
    count = counted;
  }
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, optimizer_step) {
  register_kernel<SgdStepKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::sgd_step);
  register_kernel<AdamStepKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::adam_step);
  register_kernel<SgdForeachKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::sgd_step_foreach);
  register_kernel<AdamForeachKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::adam_step_foreach);
  register_kernel<AmpUnscaleKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::amp_unscale);
  register_kernel<AmpUnscaleForeachKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64},
                                           &cpu::amp_unscale_foreach);
  register_kernel<AmpUpdateScaleKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::amp_update_scale);
}

}  // namespace rumus
