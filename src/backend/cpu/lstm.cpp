// CPU kernels of the LSTM-cell family (../lstm.hpp): one pass over the batch
// rows, each thread a block of rows.
#include "../lstm.hpp"

#include <cmath>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "vector_math.hpp"

namespace rumus::cpu {
namespace {

// Branch-free, so the row loops vectorise (vector_math.hpp); exp(-x)
// overflows to inf for very negative x, which gives 0.
template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

void check(const char* op, std::initializer_list<TensorArg> operands) {
  for (TensorArg t : operands)
    if (t.storage) require_contiguous(op, t);
}

template <class T>
void forward(TensorArg h_a, TensorArg cn_a, TensorArg act_a, TensorArg xp_a, TensorArg hp_a, TensorArg c_a) {
  const std::int64_t batch = c_a.layout->shape[0], hidden = c_a.layout->shape[1];
  const T *xp = base_of<T>(xp_a), *hp = base_of<T>(hp_a), *c = base_of<T>(c_a);
  T *h = base_of<T>(h_a), *cn = base_of<T>(cn_a), *act = base_of<T>(act_a);
  _Pragma("omp parallel for schedule(static) if (batch * hidden * 4 > kParallelGrain)")
  for (std::int64_t r = 0; r < batch; ++r) {
    const T *x = xp + r * 4 * hidden, *y = hp + r * 4 * hidden;
    T* a = act + r * 4 * hidden;
    _Pragma("omp simd")
    for (std::int64_t j = 0; j < hidden; ++j) {
      const T i = sigmoid(x[j] + y[j]), f = sigmoid(x[hidden + j] + y[hidden + j]);
      const T g = std::tanh(x[2 * hidden + j] + y[2 * hidden + j]), o = sigmoid(x[3 * hidden + j] + y[3 * hidden + j]);
      const T c_next = f * c[r * hidden + j] + i * g;
      a[j] = i;
      a[hidden + j] = f;
      a[2 * hidden + j] = g;
      a[3 * hidden + j] = o;
      cn[r * hidden + j] = c_next;
      h[r * hidden + j] = o * std::tanh(c_next);
    }
  }
}

template <class T>
void backward(TensorArg dg_a, TensorArg dc_a, TensorArg dh_a, TensorArg dcn_a, TensorArg act_a, TensorArg c_a,
              TensorArg cn_a) {
  const std::int64_t batch = c_a.layout->shape[0], hidden = c_a.layout->shape[1];
  const T *dh = base_of<T>(dh_a), *dcn = base_of<T>(dcn_a), *act = base_of<T>(act_a), *c = base_of<T>(c_a),
          *cn = base_of<T>(cn_a);
  T *dg = base_of<T>(dg_a), *dc = base_of<T>(dc_a);
  _Pragma("omp parallel for schedule(static) if (batch * hidden * 4 > kParallelGrain)")
  for (std::int64_t r = 0; r < batch; ++r) {
    const T* a = act + r * 4 * hidden;
    T* d = dg + r * 4 * hidden;
    _Pragma("omp simd")
    for (std::int64_t j = 0; j < hidden; ++j) {
      const std::int64_t e = r * hidden + j;
      const T i = a[j], f = a[hidden + j], g = a[2 * hidden + j], o = a[3 * hidden + j];
      const T tc = std::tanh(cn[e]);
      // The cell state's gradient: through h' = o tanh(c'), and from c' directly.
      const T dcs = dh[e] * o * (T(1) - tc * tc) + (dcn ? dcn[e] : T(0));
      d[j] = dcs * g * i * (T(1) - i);
      d[hidden + j] = dcs * c[e] * f * (T(1) - f);
      d[2 * hidden + j] = dcs * i * (T(1) - g * g);
      d[3 * hidden + j] = dh[e] * tc * o * (T(1) - o);
      dc[e] = dcs * f;
    }
  }
}

void lstm_cell_forward(Backend&, TensorArg h, TensorArg c_next, TensorArg act, TensorArg xp, TensorArg hp,
                       TensorArg c) {
  check("lstm_cell_forward", {h, c_next, act, xp, hp, c});
  if (c.dtype == DType::f64) forward<double>(h, c_next, act, xp, hp, c);
  else forward<float>(h, c_next, act, xp, hp, c);
}

void lstm_cell_backward(Backend&, TensorArg d_gates, TensorArg d_c, TensorArg dh_next, TensorArg dc_next,
                        TensorArg act, TensorArg c, TensorArg c_next) {
  check("lstm_cell_backward", {d_gates, d_c, dh_next, dc_next, act, c, c_next});
  if (c.dtype == DType::f64) backward<double>(d_gates, d_c, dh_next, dc_next, act, c, c_next);
  else backward<float>(d_gates, d_c, dh_next, dc_next, act, c, c_next);
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, lstm) {
  register_kernel<LstmCellForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::lstm_cell_forward);
  register_kernel<LstmCellBackwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::lstm_cell_backward);
}

}  // namespace rumus
