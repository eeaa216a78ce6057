// CPU kernels of the sort family (../sort.hpp): a stable sort of each row's
// positions by value, the rows spread over threads.
#include "../sort.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {
namespace {

template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

void sort(Backend&, TensorArg values, TensorArg indices, TensorArg in, bool descending) {
  for (TensorArg t : {values, indices, in}) require_contiguous("sort", t);
  const Shape& s = in.layout->shape;
  if (s.size() != 2 || values.layout->shape != s || indices.layout->shape != s || indices.dtype != DType::i64)
    throw Error("sort: cpu kernel needs equal 2-D views and i64 indices");
  const std::int64_t rows = s[0], n = s[1];
  std::int64_t* ix = base_of<std::int64_t>(indices);
  RUMUS_DISPATCH_ALL(in.dtype, "sort", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(values);
    _Pragma("omp parallel for schedule(dynamic) if (rows * n > kParallelGrain && rows > 1)")
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      std::int64_t* order = ix + r * n;
      std::iota(order, order + n, std::int64_t(0));
      // NaN is the largest value; stable_sort keeps equal values in order.
      auto before = [&](std::int64_t a, std::int64_t b) {
        const acc_t<T> va = load(row[a]), vb = load(row[b]);
        const bool na = is_nan(va), nb = is_nan(vb);
        if (na || nb) return descending ? na && !nb : nb && !na;
        return descending ? va > vb : va < vb;
      };
      std::stable_sort(order, order + n, before);
      for (std::int64_t j = 0; j < n; ++j) y[r * n + j] = row[order[j]];
    }
  });
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, sort) { register_kernel<SortKernel>(Device::Kind::cpu, kAllDTypes, &cpu::sort); }

}  // namespace rumus
