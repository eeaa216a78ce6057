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

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, scan) { register_kernel<ScanKernel>(Device::Kind::cpu, kAllDTypes, &cpu::scan); }

}  // namespace rumus
