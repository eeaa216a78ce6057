// CPU reductions: sum, mean, max, min over any set of dims; argmax/argmin over one dim.
#include "../reduce.hpp"
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

namespace {

// Offset of logical element `linear` of `shape` under `strides`.
std::int64_t offset_of(std::int64_t linear, const Shape& shape, const Shape& strides) {
  std::int64_t off = 0;
  for (std::size_t d = shape.size(); d-- > 0;) {
    off += (linear % shape[d]) * strides[d];
    linear /= shape[d];
  }
  return off;
}

// Serial walk over the reduced sub-space starting at `base`.
template <class F>
void walk(const StridedIter<1>& it, std::int64_t base, F&& f) {
  const int nd = it.nd;
  std::int64_t idx[kMaxDims] = {};
  const std::int64_t inner = it.size[nd - 1], st = it.stride[0][nd - 1];
  std::int64_t off = base;
  for (;;) {
    f(off, inner, st);
    int d = nd - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      off += it.stride[0][d];
      if (idx[d] < it.size[d]) break;
      off -= it.size[d] * it.stride[0][d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Every reduced dim comes before every kept dim of size > 1: a contiguous
// input is then [R, K] with R the reduced and K the kept elements.
bool reduces_leading_dims(const Shape& out, const Shape& in) {
  bool kept_seen = false;
  for (std::size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    const bool reduced = out[d] == 1;
    if (reduced && kept_seen) return false;
    kept_seen = kept_seen || !reduced;
  }
  return kept_seen;
}

// acc[k] becomes the larger (smaller) of acc[k] and x[k], and probe[k] NaN
// where some x[k] is NaN or infinite: selects between separate arrays, which
// the compiler vectorizes (a running extreme in one variable it does not).
constexpr std::int64_t kExtremeLanes = 64;
template <bool kMax, class T, class V>
inline void extreme_into(V* __restrict acc, V* __restrict probe, const T* __restrict x, std::int64_t n) {
  for (std::int64_t k = 0; k < n; ++k) {
    const V v = load(x[k]);
    acc[k] = (kMax ? v > acc[k] : v < acc[k]) ? v : acc[k];
    probe[k] += v * V(0);
  }
}

}  // namespace

void reduce(Backend& be, ReduceOp op, TensorArg out, TensorArg in) {
  const Layout& lo = *out.layout;
  const Layout& li = *in.layout;
  Shape red_shape = li.shape;
  std::vector<int> reduced_dims;
  for (std::size_t d = 0; d < red_shape.size(); ++d) {
    if (lo.shape[d] == 1 && li.shape[d] != 1) reduced_dims.push_back(int(d));
    else red_shape[d] = 1;
  }
  const std::int64_t n_out = lo.numel();
  const std::int64_t n_red = numel_of(red_shape);
  Layout red_layout{red_shape, li.strides, 0};
  auto red_it = make_iter<1>(red_shape, {&red_layout});

  const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  if (is_arg && reduced_dims.size() > 1) throw Error("reduce: argmax/argmin reduce over one dim");
  const std::int64_t arg_stride = reduced_dims.empty() ? 0 : li.strides[reduced_dims[0]];

  RUMUS_DISPATCH_ALL(in.dtype, "reduce", [&] {
    using T = scalar_t;
    using A = std::conditional_t<std::is_floating_point_v<acc_t<T>>, double, std::int64_t>;
    const T* x = data_of<T>(in);

    auto reduce_at = [&](std::int64_t base) -> A {
      if (is_arg) {
        std::int64_t best = 0;
        A best_v = A(load(x[base]));
        for (std::int64_t i = 1; i < n_red; ++i) {
          A v = A(load(x[base + i * arg_stride]));
          bool better = op == ReduceOp::argmax ? (v > best_v || (v != v && best_v == best_v))
                                               : (v < best_v || (v != v && best_v == best_v));
          if (better) { best = i; best_v = v; }
        }
        return A(best);
      }
      if (op == ReduceOp::sum || op == ReduceOp::mean) {
        A acc = 0;
        walk(red_it, base, [&](std::int64_t off, std::int64_t n, std::int64_t st) {
          if (st == 1) {
            // Eight independent partial sums: one running sum is a chain of
            // dependent adds, which the compiler may not reorder.
            A part[8] = {};
            std::int64_t i = 0;
            for (; i + 8 <= n; i += 8)
              for (int k = 0; k < 8; ++k) part[k] += A(load(x[off + i + k]));
            for (; i < n; ++i) part[0] += A(load(x[off + i]));
            acc += ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
          } else {
            for (std::int64_t i = 0; i < n; ++i) acc += A(load(x[off + i * st]));
          }
        });
        return op == ReduceOp::mean ? A(acc / A(n_red)) : acc;
      }
      A acc = A(load(x[base]));
      const bool is_max = op == ReduceOp::max;
      auto fold = [&](std::int64_t off, std::int64_t n, std::int64_t st) {
        for (std::int64_t i = 0; i < n; ++i) {
          A v = A(load(x[off + i * st]));
          if (v != v) acc = v;  // NaN propagates
          else if (acc == acc && (is_max ? v > acc : v < acc)) acc = v;
        }
      };
      walk(red_it, base, [&](std::int64_t off, std::int64_t n, std::int64_t st) {
        using V = acc_t<T>;
        if (st != 1 || n < 2 * kExtremeLanes) return fold(off, n, st);
        // A contiguous run: kExtremeLanes running extremes in T's arithmetic,
        // which compile to vector max/min (the loop above, in double with a
        // branch per element, took most of logsumexp's time). A run holding
        // NaN (or infinity: the probe cannot tell) is folded again element by
        // element, so which NaN wins stays the loop's.
        V lane[kExtremeLanes], probe[kExtremeLanes] = {};
        for (V& l : lane) l = load(x[off]);
        std::int64_t i = 0;
        for (; i + kExtremeLanes <= n; i += kExtremeLanes) {
          if (is_max) extreme_into<true>(lane, probe, x + off + i, kExtremeLanes);
          else extreme_into<false>(lane, probe, x + off + i, kExtremeLanes);
        }
        V sum = 0;
        for (const V p : probe) sum += p;
        if (sum != sum) return fold(off, n, st);
        // The lanes halved in the same vector selects, then one fold.
        for (std::int64_t w = kExtremeLanes / 2; w >= 1; w /= 2) {
          if (is_max) extreme_into<true>(lane, probe, lane + w, w);
          else extreme_into<false>(lane, probe, lane + w, w);
        }
        const A v = A(lane[0]);
        if (acc == acc && (is_max ? v > acc : v < acc)) acc = v;
        fold(off + i, n - i, st);
      });
      return acc;
    };

    auto write = [&](std::int64_t o, A v) {
      if (is_arg) data_of<std::int64_t>(out)[o] = std::int64_t(v);
      else data_of<T>(out)[o] = store<T>(v);
    };

    if (n_out == 1 && !is_arg && (op == ReduceOp::sum || op == ReduceOp::mean) && n_red >= kParallelGrain &&
        omp_get_max_threads() > 1) {
      // One output, much input: per-thread partial sums over a contiguous split of the walk.
      std::vector<A> partial(omp_get_max_threads(), A(0));
      for_each_run(red_it, [&](auto off, std::int64_t n, auto st) {
        A acc = 0;
        for (std::int64_t i = 0; i < n; ++i) acc += A(load(x[li.offset + off[0] + i * st[0]]));
        partial[omp_get_thread_num()] += acc;
      });
      A total = 0;
      for (A p : partial) total += p;
      write(lo.offset, op == ReduceOp::mean ? A(total / A(n_red)) : total);
      return;
    }
    if (!is_arg && (op == ReduceOp::sum || op == ReduceOp::mean) && n_out > 1 &&
        reduces_leading_dims(lo.shape, li.shape) && li.is_contiguous() && lo.is_contiguous()) {
      // [R, K] -> [K] (bias gradients, column sums): whole rows are added into
      // a block of accumulators, instead of one strided column walk per output.
      const std::int64_t rows = n_red, cols = n_out;
      const T* in_rows = x + li.offset;
      T* o = data_of<T>(out) + lo.offset;
      const A div = op == ReduceOp::mean ? A(rows) : A(1);
      const int threads = omp_get_max_threads();
      const bool parallel = rows * cols >= kParallelGrain && threads > 1;
      constexpr std::int64_t kBlock = 256;
      if (!parallel || cols >= kBlock * threads) {
        const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
        _Pragma("omp parallel for if (parallel) schedule(static)")
        for (std::int64_t b = 0; b < blocks; ++b) {
          const std::int64_t k0 = b * kBlock, n = std::min(kBlock, cols - k0);
          A acc[kBlock] = {};
          for (std::int64_t r = 0; r < rows; ++r) {
            const T* row = in_rows + r * cols + k0;
            for (std::int64_t k = 0; k < n; ++k) acc[k] += A(load(row[k]));
          }
          for (std::int64_t k = 0; k < n; ++k) o[k0 + k] = store<T>(op == ReduceOp::mean ? A(acc[k] / div) : acc[k]);
        }
        return;
      }
      // Few columns: each thread sums a range of rows, then the partial rows are added in thread order.
      std::vector<A> partial(std::size_t(threads * cols), A(0));
      _Pragma("omp parallel")
      {
        A* mine = partial.data() + std::size_t(omp_get_thread_num() * cols);
        _Pragma("omp for schedule(static)")
        for (std::int64_t r = 0; r < rows; ++r) {
          const T* row = in_rows + r * cols;
          for (std::int64_t k = 0; k < cols; ++k) mine[k] += A(load(row[k]));
        }
      }
      for (std::int64_t k = 0; k < cols; ++k) {
        A total = 0;
        for (int t = 0; t < threads; ++t) total += partial[std::size_t(t * cols + k)];
        o[k] = store<T>(op == ReduceOp::mean ? A(total / div) : total);
      }
      return;
    }
    const bool parallel = n_out > 1 && n_out * n_red >= kParallelGrain;
    _Pragma("omp parallel for if (parallel) schedule(static)")
    for (std::int64_t o = 0; o < n_out; ++o) {
      std::int64_t base = li.offset + offset_of(o, lo.shape, li.strides);
      write(lo.offset + offset_of(o, lo.shape, lo.strides), reduce_at(base));
    }
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, reduce) {
  register_kernel<ReduceKernel>(Device::Kind::cpu, kAllDTypes, &cpu::reduce);
}

}  // namespace rumus
