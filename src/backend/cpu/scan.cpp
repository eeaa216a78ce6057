// CPU kernels of the scan family (../scan.hpp): each (outer, inner) column
// scanned in order, the columns spread over threads.
#include "../scan.hpp"

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {
namespace {

void scan(Backend&, TensorArg out, TensorArg in, ScanOp op) {
  require_contiguous("scan", out);
  require_contiguous("scan", in);
  const Shape& s = in.layout->shape;
  if (s.size() != 3 || out.layout->shape != s) throw Error("scan: cpu kernel needs equal 3-D views");
  const std::int64_t outer = s[0], n = s[1], inner = s[2], columns = outer * inner;
  RUMUS_DISPATCH_ALL(in.dtype, "scan", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(out);
    _Pragma("omp parallel for schedule(static) if (columns * n > kParallelGrain && columns > 1)")
    for (std::int64_t c = 0; c < columns; ++c) {
      const std::int64_t at = (c / inner) * n * inner + c % inner;
      acc_t<T> acc = op == ScanOp::sum ? acc_t<T>(0) : acc_t<T>(1);
      for (std::int64_t j = 0; j < n; ++j) {
        const acc_t<T> v = load(x[at + j * inner]);
        acc = op == ScanOp::sum ? acc_t<T>(acc + v) : acc_t<T>(acc * v);
        y[at + j * inner] = store<T>(acc);
      }
    }
  });
}

// NaN is above every number; integers are never NaN.
template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

void cumextreme(Backend&, TensorArg values, TensorArg indices, TensorArg in, ExtremeOp op) {
  for (TensorArg t : {values, indices, in}) require_contiguous("cumextreme", t);
  const Shape& s = in.layout->shape;
  if (s.size() != 3 || values.layout->shape != s || indices.layout->shape != s || indices.dtype != DType::i64)
    throw Error("cumextreme: cpu kernel needs equal 3-D views and i64 indices");
  const std::int64_t outer = s[0], n = s[1], inner = s[2], columns = outer * inner;
  std::int64_t* ix = base_of<std::int64_t>(indices);
  RUMUS_DISPATCH_ALL(in.dtype, "cumextreme", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(values);
    _Pragma("omp parallel for schedule(static) if (columns * n > kParallelGrain && columns > 1)")
    for (std::int64_t c = 0; c < columns; ++c) {
      const std::int64_t at = (c / inner) * n * inner + c % inner;
      acc_t<T> best = load(x[at]);
      std::int64_t best_j = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const acc_t<T> v = load(x[at + j * inner]);
        // A later equal value takes over, and so does every NaN.
        if (is_nan(v) || (!is_nan(best) && (op == ExtremeOp::max ? v >= best : v <= best))) {
          best = v;
          best_j = j;
        }
        y[at + j * inner] = store<T>(best);
        ix[at + j * inner] = best_j;
      }
    }
  });
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, scan) {
  register_kernel<ScanKernel>(Device::Kind::cpu, kAllDTypes, &cpu::scan);
  register_kernel<CumExtremeKernel>(Device::Kind::cpu, kAllDTypes, &cpu::cumextreme);
}

}  // namespace rumus
