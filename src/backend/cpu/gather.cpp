// CPU kernels of the gather family (../gather.hpp).
#include "../gather.hpp"

#include <algorithm>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {
namespace {

struct GatherSizes {
  std::int64_t outer, n, m, inner;
};

GatherSizes sizes_of(const char* op, TensorArg big, TensorArg small, TensorArg index) {
  require_contiguous(op, big);
  require_contiguous(op, small);
  require_contiguous(op, index);
  if (index.dtype != DType::i64) throw DTypeError(std::string(op) + ": cpu kernel needs i64 indices");
  const Shape &b = big.layout->shape, &s = small.layout->shape;
  if (b.size() != 3 || s.size() != 3 || index.layout->shape != s)
    throw Error(std::string(op) + ": cpu kernel needs 3-D views and an index shaped as the small operand");
  return {b[0], b[1], s[1], b[2]};
}

void gather(Backend&, TensorArg out, TensorArg src, TensorArg index) {
  const GatherSizes z = sizes_of("gather", src, out, index);
  const std::int64_t* ix = base_of<std::int64_t>(index);
  RUMUS_DISPATCH_ALL(src.dtype, "gather", [&] {
    using T = scalar_t;
    const T* s = base_of<T>(src);
    T* o = base_of<T>(out);
    const std::int64_t rows = z.outer * z.m;
    _Pragma("omp parallel for schedule(static) if (rows * z.inner > kParallelGrain)")
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* slice = s + (r / z.m) * z.n * z.inner;
      for (std::int64_t k = 0; k < z.inner; ++k) o[r * z.inner + k] = slice[ix[r * z.inner + k] * z.inner + k];
    }
  });
}

void scatter_add(Backend&, TensorArg out, TensorArg index, TensorArg src) {
  const GatherSizes z = sizes_of("scatter_add", out, src, index);
  const std::int64_t* ix = base_of<std::int64_t>(index);
  RUMUS_DISPATCH_ALL(src.dtype, "scatter_add", [&] {
    using T = scalar_t;
    const T* s = base_of<T>(src);
    T* o = base_of<T>(out);
    // Threads own distinct (outer, block of columns) pairs, which never share
    // a destination; within one, the rows add in index order, so results
    // repeat. Each thread walks its rows of index and src in order, a block
    // of adjacent columns at a time (one column at a time strode through all
    // of them once per column). Blocks are at least a cache line wide.
    const std::int64_t threads = omp_get_max_threads();
    const std::int64_t blocks = std::clamp<std::int64_t>(threads / std::max<std::int64_t>(z.outer, 1), 1,
                                                         std::max<std::int64_t>(1, z.inner / 16));
    const std::int64_t width = (z.inner + blocks - 1) / blocks, units = z.outer * blocks;
    _Pragma("omp parallel for schedule(static) if (z.outer * z.inner * z.m > kParallelGrain && units > 1)")
    for (std::int64_t u = 0; u < units; ++u) {
      const std::int64_t ob = u / blocks, k0 = (u % blocks) * width, k1 = std::min(z.inner, k0 + width);
      T* dst = o + ob * z.n * z.inner;
      for (std::int64_t j = 0; j < z.m; ++j) {
        const std::int64_t row = (ob * z.m + j) * z.inner;
        for (std::int64_t k = k0; k < k1; ++k) {
          T& d = dst[ix[row + k] * z.inner + k];
          d = store<T>(load(d) + load(s[row + k]));
        }
      }
    }
  });
}

}  // namespace

namespace {

struct Rows {
  std::int64_t outer, n, m, inner, index_outer;
};

// Sizes of an index_select/index_add call from its big ([outer, n, inner]) and
// small ([outer, m, inner]) operands and the index [1 or outer, m].
Rows rows_of(const char* op, TensorArg big, TensorArg small, TensorArg index) {
  require_contiguous(op, big);
  require_contiguous(op, small);
  require_contiguous(op, index);
  if (index.dtype != DType::i64) throw DTypeError(std::string(op) + ": cpu kernel needs i64 indices");
  const Shape& b = big.layout->shape;
  const Shape& s = small.layout->shape;
  const Shape& i = index.layout->shape;
  if (b.size() != 3 || s.size() != 3 || i.size() != 2) throw Error(std::string(op) + ": cpu kernel needs 3-D views");
  return {b[0], b[1], s[1], b[2], i[0]};
}

}  // namespace

void index_select(Backend& be, TensorArg out, TensorArg src, TensorArg index) {
  const Rows r = rows_of("index_select", src, out, index);
  const std::int64_t* ix = base_of<std::int64_t>(index);
  RUMUS_DISPATCH_ALL(src.dtype, "index_select", [&] {
    using T = scalar_t;
    const T* s = base_of<T>(src);
    T* o = base_of<T>(out);
    const std::int64_t items = r.outer * r.m;
    _Pragma("omp parallel for schedule(dynamic, 8) if (items * r.inner > kParallelGrain)")
    for (std::int64_t it = 0; it < items; ++it) {
      const std::int64_t ob = it / r.m, j = it % r.m;
      const std::int64_t row = ix[(r.index_outer == 1 ? 0 : ob) * r.m + j];
      T* dst = o + it * r.inner;
      std::memcpy(static_cast<void*>(dst), s + (ob * r.n + row) * r.inner, std::size_t(r.inner) * sizeof(T));
    }
  });
}

void index_add(Backend& be, TensorArg out, TensorArg index, TensorArg src) {
  const Rows r = rows_of("index_add", out, src, index);
  const std::int64_t* ix = base_of<std::int64_t>(index);
  RUMUS_DISPATCH_FLOAT(src.dtype, "index_add", [&] {
    using T = scalar_t;
    const T* s = base_of<T>(src);
    T* o = base_of<T>(out);
    auto scatter = [&](std::int64_t ob, std::int64_t k0, std::int64_t k1) {
      for (std::int64_t j = 0; j < r.m; ++j) {
        const std::int64_t row = ix[(r.index_outer == 1 ? 0 : ob) * r.m + j];
        T* dst = o + (ob * r.n + row) * r.inner;
        const T* sr = s + (ob * r.m + j) * r.inner;
        for (std::int64_t k = k0; k < k1; ++k) dst[k] = store<T>(load(dst[k]) + load(sr[k]));
      }
    };
    const bool parallel = r.outer * r.m * r.inner > kParallelGrain;
    if (r.outer > 1) {
      // Distinct outer slices never share destination rows.
      _Pragma("omp parallel for schedule(dynamic, 8) if (parallel)")
      for (std::int64_t ob = 0; ob < r.outer; ++ob) scatter(ob, 0, r.inner);
    } else if (parallel && r.inner >= 64) {
      // One slice: repeated indices may collide, so threads split the columns instead.
      _Pragma("omp parallel")
      {
        const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        scatter(0, r.inner * t / nt, r.inner * (t + 1) / nt);
      }
    } else {
      scatter(0, 0, r.inner);
    }
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, gather) {
  register_kernel<GatherKernel>(Device::Kind::cpu, kAllDTypes, &cpu::gather);
  register_kernel<ScatterAddKernel>(Device::Kind::cpu, kAllDTypes, &cpu::scatter_add);
  register_kernel<IndexSelectKernel>(Device::Kind::cpu, kAllDTypes, &cpu::index_select);
  register_kernel<IndexAddKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::index_add);
}

}  // namespace rumus
