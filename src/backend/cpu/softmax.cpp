// CPU kernels of the softmax family (../softmax.hpp), a row per thread.
#include "../softmax.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

void softmax_forward(Backend& be, TensorArg out, TensorArg in, bool log) {
  require_contiguous("softmax_forward", out);
  require_contiguous("softmax_forward", in);
  const std::int64_t cols = in.layout->shape.back(), rows = cols ? in.layout->numel() / cols : 0;
  RUMUS_DISPATCH_FLOAT(in.dtype, "softmax_forward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(out);
    _Pragma("omp parallel for schedule(dynamic, 8) if (rows > 1 && rows * cols > kParallelGrain / 4)")
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      A mx = -std::numeric_limits<A>::infinity();
      for (std::int64_t i = 0; i < cols; ++i) mx = std::max(mx, A(load(xr[i])));
      if (std::isinf(mx) && mx < 0) mx = 0;  // an all -inf row stays finite until the division
      A sum = 0;
      if (log) {
        for (std::int64_t i = 0; i < cols; ++i) sum += std::exp(A(load(xr[i])) - mx);
        const A lse = mx + std::log(sum);
        for (std::int64_t i = 0; i < cols; ++i) yr[i] = store<T>(A(load(xr[i])) - lse);
      } else {
        for (std::int64_t i = 0; i < cols; ++i) {
          const A e = std::exp(A(load(xr[i])) - mx);
          sum += e;
          yr[i] = store<T>(e);
        }
        const A inv = A(1) / sum;
        for (std::int64_t i = 0; i < cols; ++i) yr[i] = store<T>(A(load(yr[i])) * inv);
      }
    }
  });
}

void softmax_backward(Backend& be, TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) {
  require_contiguous("softmax_backward", grad_in);
  require_contiguous("softmax_backward", grad_out);
  require_contiguous("softmax_backward", out);
  const std::int64_t cols = out.layout->shape.back(), rows = cols ? out.layout->numel() / cols : 0;
  RUMUS_DISPATCH_FLOAT(out.dtype, "softmax_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    T* gi = base_of<T>(grad_in);
    const T* go = base_of<T>(grad_out);
    const T* y = base_of<T>(out);
    _Pragma("omp parallel for schedule(dynamic, 8) if (rows > 1 && rows * cols > kParallelGrain / 4)")
    for (std::int64_t r = 0; r < rows; ++r) {
      const T *gr = go + r * cols, *yr = y + r * cols;
      T* dr = gi + r * cols;
      A s = 0;
      if (log) {
        for (std::int64_t i = 0; i < cols; ++i) s += A(load(gr[i]));
        for (std::int64_t i = 0; i < cols; ++i) dr[i] = store<T>(A(load(gr[i])) - std::exp(A(load(yr[i]))) * s);
      } else {
        for (std::int64_t i = 0; i < cols; ++i) s += A(load(gr[i])) * A(load(yr[i]));
        for (std::int64_t i = 0; i < cols; ++i) dr[i] = store<T>(A(load(yr[i])) * (A(load(gr[i])) - s));
      }
    }
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, softmax) {
  register_kernel<SoftmaxForwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::softmax_forward);
  register_kernel<SoftmaxBackwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::softmax_backward);
}

}  // namespace rumus
