#pragma once
// Strided loops for CPU kernels: walk coalesced dims (../strided.hpp), split
// rows across OpenMP threads, hand each thread runs of the innermost dim.
#include <omp.h>

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../backend.hpp"
#include "../strided.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/saturate_cast.hpp"

namespace rumus::cpu {

constexpr int kMaxDims = kMaxStridedDims;
// Elements below which threads cost more than they save. Idle threads sleep
// (src/runtime/openmp_defaults.cpp), and waking them took about 25 us on a
// 2-core VM: longer than one thread takes over a 64 x 512 activation.
constexpr std::int64_t kParallelGrain = 131072;

template <std::size_t N>
using StridedIter = StridedDims<N>;

template <std::size_t N>
StridedIter<N> make_iter(const Shape& shape, const std::array<const Layout*, N>& layouts) {
  return coalesce<N>(shape, layouts, "cpu kernel");
}

// f(offsets, n, inner_strides): a run of n elements starting at offsets.
template <std::size_t N, class F>
void for_each_run(const StridedIter<N>& it, F&& f) {
  const int nd = it.nd;
  const std::int64_t inner = it.size[nd - 1];
  std::int64_t rows = 1;
  for (int d = 0; d < nd - 1; ++d) rows *= it.size[d];
  std::array<std::int64_t, N> inner_stride;
  for (std::size_t k = 0; k < N; ++k) inner_stride[k] = it.stride[k][nd - 1];

  auto run_rows = [&](std::int64_t r0, std::int64_t r1) {
    if (r0 >= r1) return;
    std::int64_t idx[kMaxDims] = {};
    std::array<std::int64_t, N> off = it.offset;
    std::int64_t rem = r0;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = rem % it.size[d];
      rem /= it.size[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += idx[d] * it.stride[k][d];
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      f(off, inner, inner_stride);
      for (int d = nd - 2; d >= 0; --d) {  // odometer increment
        ++idx[d];
        for (std::size_t k = 0; k < N; ++k) off[k] += it.stride[k][d];
        if (idx[d] < it.size[d]) break;
        for (std::size_t k = 0; k < N; ++k) off[k] -= it.size[d] * it.stride[k][d];
        idx[d] = 0;
      }
    }
  };

  if (rows * inner < kParallelGrain || omp_get_max_threads() == 1) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {  // one long run: split it
#pragma omp parallel
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      std::int64_t a = inner * t / nt, b = inner * (t + 1) / nt;
      if (a < b) {
        std::array<std::int64_t, N> off = it.offset;
        for (std::size_t k = 0; k < N; ++k) off[k] += a * inner_stride[k];
        f(off, b - a, inner_stride);
      }
    }
    return;
  }
#pragma omp parallel
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    run_rows(rows * t / nt, rows * (t + 1) / nt);
  }
}

// Arithmetic type for a storage type: half types compute in float, bool in
// 0/1 bytes (a store makes any nonzero result true: add is or, mul is and).
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                                 std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>>;

template <class T>
inline acc_t<T> load(const T& v) { return static_cast<acc_t<T>>(v); }
// Float to integer saturates, NaN gives 0 (saturate_cast.hpp): defined, and
// the same on every device.
template <class T, class A>
inline T store(A v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return saturate_cast<T>(v);
}

template <class T>
T* data_of(TensorArg t) { return static_cast<T*>(t.storage->data()); }
// The first element of a view; null for an absent operand (no storage).
template <class T>
T* base_of(TensorArg t) { return t.storage ? data_of<T>(t) + t.layout->offset : nullptr; }

inline void require_contiguous(const char* op, TensorArg t) {
  if (!t.layout->is_contiguous()) throw Error(std::string(op) + ": cpu kernel needs contiguous operands");
}

}  // namespace rumus::cpu

#define RUMUS_CASE(DT, TYPE, ...) \
  case ::rumus::DType::DT: {      \
    using scalar_t = TYPE;        \
    __VA_ARGS__();                \
    break;                        \
  }

#define RUMUS_DISPATCH_FLOAT(dt, name, ...)                                                           \
  switch (dt) {                                                                                       \
    RUMUS_CASE(f32, float, __VA_ARGS__)                                                               \
    RUMUS_CASE(f64, double, __VA_ARGS__)                                                              \
    RUMUS_CASE(f16, ::rumus::Half, __VA_ARGS__)                                                       \
    RUMUS_CASE(bf16, ::rumus::BFloat16, __VA_ARGS__)                                                  \
    default: throw ::rumus::DTypeError(std::string(name) + ": cpu kernel needs a floating dtype, got " + \
                                       std::string(::rumus::dtype_name(dt)));                         \
  }

#define RUMUS_DISPATCH_ALL(dt, name, ...)             \
  switch (dt) {                                       \
    RUMUS_CASE(f32, float, __VA_ARGS__)               \
    RUMUS_CASE(f64, double, __VA_ARGS__)              \
    RUMUS_CASE(f16, ::rumus::Half, __VA_ARGS__)       \
    RUMUS_CASE(bf16, ::rumus::BFloat16, __VA_ARGS__)  \
    RUMUS_CASE(i32, std::int32_t, __VA_ARGS__)        \
    RUMUS_CASE(i64, std::int64_t, __VA_ARGS__)        \
    RUMUS_CASE(u8, std::uint8_t, __VA_ARGS__)         \
    RUMUS_CASE(boolean, bool, __VA_ARGS__)            \
    RUMUS_CASE(i8, std::int8_t, __VA_ARGS__)          \
    RUMUS_CASE(i16, std::int16_t, __VA_ARGS__)        \
  }
