// CPU kernels of the negative log-likelihood family (../nll.hpp).
#include "../nll.hpp"

#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

void nll_forward(Backend& be, TensorArg out, TensorArg count, TensorArg log_probs, TensorArg target,
                 std::int64_t ignore_index, bool mean) {
  require_contiguous("nll_forward", log_probs);
  require_contiguous("nll_forward", target);
  const std::int64_t rows = log_probs.layout->shape[0], cols = log_probs.layout->shape[1];
  const std::int64_t* t = base_of<std::int64_t>(target);
  RUMUS_DISPATCH_FLOAT(log_probs.dtype, "nll_forward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* lp = base_of<T>(log_probs);
    double sum = 0;  // in double whatever T: one pass over the rows
    std::int64_t counted = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      if (t[i] == ignore_index || t[i] < 0 || t[i] >= cols) continue;  // the op checked the range
      sum -= double(load(lp[i * cols + t[i]]));
      ++counted;
    }
    double loss = sum;
    if (mean) loss = counted ? sum / double(counted) : std::numeric_limits<double>::quiet_NaN();
    *base_of<T>(out) = store<T>(A(loss));
    *base_of<T>(count) = store<T>(A(counted));
  });
}

void nll_backward(Backend& be, TensorArg grad_in, TensorArg grad_out, TensorArg count, TensorArg log_probs,
                  TensorArg target, std::int64_t ignore_index, bool mean, bool softmax) {
  require_contiguous("nll_backward", grad_in);
  require_contiguous("nll_backward", log_probs);
  require_contiguous("nll_backward", target);
  const std::int64_t rows = log_probs.layout->shape[0], cols = log_probs.layout->shape[1];
  const std::int64_t* t = base_of<std::int64_t>(target);
  RUMUS_DISPATCH_FLOAT(log_probs.dtype, "nll_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* lp = base_of<T>(log_probs);
    T* gi = base_of<T>(grad_in);
    const A g = A(load(*base_of<T>(grad_out)));
    const A scale = mean ? g / A(load(*base_of<T>(count))) : g;
    _Pragma("omp parallel for if (rows * cols > kParallelGrain)")
    for (std::int64_t i = 0; i < rows; ++i) {
      T* row = gi + i * cols;
      const bool counted = t[i] != ignore_index && t[i] >= 0 && t[i] < cols;
      if (!counted) {
        for (std::int64_t c = 0; c < cols; ++c) row[c] = store<T>(A(0));
        continue;
      }
      const T* lr = lp + i * cols;
      for (std::int64_t c = 0; c < cols; ++c)
        row[c] = store<T>(softmax ? scale * std::exp(A(load(lr[c]))) : A(0));
      row[t[i]] = store<T>(A(load(row[t[i]])) - scale);
    }
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, nll) {
  register_kernel<NllForwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::nll_forward);
  register_kernel<NllBackwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::nll_backward);
}

}  // namespace rumus
