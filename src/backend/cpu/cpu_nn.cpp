// CPU kernels for the neural-network ops: im2col/col2im, pooling, softmax,
// row gathers and scatters. Parallel over independent planes or rows so that
// no two threads write the same element; scheduled dynamically in small
// chunks, so a thread the OS preempts does not hold up the whole loop.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

namespace {

// First output position whose input coordinate (o * stride - pad + k) is >= 0,
// and one past the last with it < size.
void valid_range(std::int64_t size, std::int64_t out, std::int64_t stride, std::int64_t offset, std::int64_t& lo,
                 std::int64_t& hi) {
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  hi = offset >= size ? 0 : (size - offset + stride - 1) / stride;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
}

}  // namespace

void CpuBackend::im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) {
  const Shape& is = in.layout->strides;
  const Shape& cs = cols.layout->strides;
  const std::int64_t kk = g.kernel_h * g.kernel_w, rows = g.channels * kk;
  RUMUS_DISPATCH_FLOAT(in.dtype, "im2col", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* c = base_of<T>(cols);
    const T zero = store<T>(0.0);
    const std::int64_t total = g.batch * rows;
    _Pragma("omp parallel for schedule(dynamic, 8) if (total * g.out_h * g.out_w > kParallelGrain)")
    for (std::int64_t item = 0; item < total; ++item) {
      const std::int64_t n = item / rows, r = item % rows;
      const std::int64_t ch = r / kk, kh = (r % kk) / g.kernel_w, kw = r % g.kernel_w;
      const T* plane = x + n * is[0] + ch * is[1];
      T* dst = c + n * cs[0] + r * cs[1];
      const std::int64_t w_off = kw * g.dilation_w - g.pad_w;
      std::int64_t ow0, ow1;
      valid_range(g.width, g.out_w, g.stride_w, w_off, ow0, ow1);
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        T* drow = dst + oh * g.out_w * cs[2];
        const std::int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
        if (ih < 0 || ih >= g.height) {
          for (std::int64_t ow = 0; ow < g.out_w; ++ow) drow[ow * cs[2]] = zero;
          continue;
        }
        const T* srow = plane + ih * is[2];
        if (cs[2] == 1) {
          for (std::int64_t ow = 0; ow < ow0; ++ow) drow[ow] = zero;
          if (g.stride_w == 1 && is[3] == 1) {
            std::memcpy(drow + ow0, srow + ow0 + w_off, std::size_t(ow1 - ow0) * sizeof(T));
          } else {
            for (std::int64_t ow = ow0; ow < ow1; ++ow) drow[ow] = srow[(ow * g.stride_w + w_off) * is[3]];
          }
          for (std::int64_t ow = ow1; ow < g.out_w; ++ow) drow[ow] = zero;
        } else {
          for (std::int64_t ow = 0; ow < g.out_w; ++ow)
            drow[ow * cs[2]] = ow >= ow0 && ow < ow1 ? srow[(ow * g.stride_w + w_off) * is[3]] : zero;
        }
      }
    }
  });
}

void CpuBackend::col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) {
  require_contiguous("col2im", out);
  const Shape& cs = cols.layout->strides;
  const std::int64_t kk = g.kernel_h * g.kernel_w, hw = g.height * g.width;
  RUMUS_DISPATCH_FLOAT(out.dtype, "col2im", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* c = base_of<T>(cols);
    T* y = base_of<T>(out);
    const std::int64_t planes = g.batch * g.channels;
    _Pragma("omp parallel for schedule(dynamic, 8) if (planes * kk * g.out_h * g.out_w > kParallelGrain)")
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      const std::int64_t n = plane / g.channels, ch = plane % g.channels;
      T* dst = y + plane * hw;
      for (std::int64_t i = 0; i < hw; ++i) dst[i] = store<T>(0.0);
      for (std::int64_t k = 0; k < kk; ++k) {
        const std::int64_t kh = k / g.kernel_w, kw = k % g.kernel_w;
        const T* src = c + n * cs[0] + (ch * kk + k) * cs[1];
        const std::int64_t w_off = kw * g.dilation_w - g.pad_w;
        std::int64_t ow0, ow1;
        valid_range(g.width, g.out_w, g.stride_w, w_off, ow0, ow1);
        for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
          const std::int64_t ih = oh * g.stride_h - g.pad_h + kh * g.dilation_h;
          if (ih < 0 || ih >= g.height) continue;
          T* drow = dst + ih * g.width + w_off;
          const T* srow = src + oh * g.out_w * cs[2];
          if (g.stride_w == 1 && cs[2] == 1) {  // contiguous: vectorises
            for (std::int64_t ow = ow0; ow < ow1; ++ow) drow[ow] = store<T>(load(drow[ow]) + A(load(srow[ow])));
          } else {
            for (std::int64_t ow = ow0; ow < ow1; ++ow)
              drow[ow * g.stride_w] = store<T>(load(drow[ow * g.stride_w]) + A(load(srow[ow * cs[2]])));
          }
        }
      }
    }
  });
}

namespace {

struct Window {
  std::int64_t h0, h1, w0, w1;  // clipped to the input
  std::int64_t divisor;
};

Window avg_window(const Pool2dParams& p, std::int64_t oh, std::int64_t ow) {
  Window w;
  if (p.kind == PoolKind::adaptive_avg) {
    w.h0 = oh * p.height / p.out_h;
    w.h1 = ((oh + 1) * p.height + p.out_h - 1) / p.out_h;
    w.w0 = ow * p.width / p.out_w;
    w.w1 = ((ow + 1) * p.width + p.out_w - 1) / p.out_w;
    w.divisor = (w.h1 - w.h0) * (w.w1 - w.w0);
    return w;
  }
  // As PyTorch: the padded window is cut at the padded border, then at the input.
  std::int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
  std::int64_t h1 = std::min(h0 + p.kernel_h, p.height + p.pad_h), w1 = std::min(w0 + p.kernel_w, p.width + p.pad_w);
  const std::int64_t padded = (h1 - h0) * (w1 - w0);
  w.h0 = std::max<std::int64_t>(h0, 0);
  w.w0 = std::max<std::int64_t>(w0, 0);
  w.h1 = std::min(h1, p.height);
  w.w1 = std::min(w1, p.width);
  w.divisor = p.count_include_pad ? padded : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

}  // namespace

void CpuBackend::pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) {
  require_contiguous("pool2d_forward", out);
  require_contiguous("pool2d_forward", in);
  const std::int64_t hw = p.height * p.width, ohw = p.out_h * p.out_w;
  const bool parallel = p.planes > 1 && p.planes * ohw * p.kernel_h * p.kernel_w > kParallelGrain;
  RUMUS_DISPATCH_FLOAT(in.dtype, "pool2d_forward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(out);
    if (p.kind == PoolKind::max) {
      require_contiguous("pool2d_forward", indices);
      std::int64_t* idx = base_of<std::int64_t>(indices);
      // Locals, not p's fields: the i64 index stores could alias them and force reloads.
      const std::int64_t H = p.height, W = p.width, OH = p.out_h, OW = p.out_w, KH = p.kernel_h, KW = p.kernel_w,
                         SH = p.stride_h, SW = p.stride_w, PH = p.pad_h, PW = p.pad_w, DH = p.dilation_h,
                         DW = p.dilation_w;
      // Every window inside the plane too: ceil_mode can add a last one that runs off its edge.
      const bool plain2x2 = KH == 2 && KW == 2 && SH == 2 && SW == 2 && PH == 0 && PW == 0 && DH == 1 && DW == 1 &&
                            2 * OH <= H && 2 * OW <= W;
      _Pragma("omp parallel for schedule(dynamic, 8) if (parallel)")
      for (std::int64_t plane = 0; plane < p.planes; ++plane) {
        const T* src = x + plane * hw;
        T* dst = y + plane * ohw;
        std::int64_t* di = idx + plane * ohw;
        // Running maximum; a NaN wins and stays, as in PyTorch.
        auto take = [](A v, A& best, std::int64_t at, std::int64_t& best_i) {
          const bool better = v > best || (v != v && best == best);
          best = better ? v : best;
          best_i = better ? at : best_i;
        };
        if (plain2x2) {  // the common CNN case, written to compile to selects rather than branches
          for (std::int64_t oh = 0; oh < OH; ++oh) {
            const T* r0 = src + 2 * oh * W;
            const T* r1 = r0 + W;
            T* drow = dst + oh * OW;
            std::int64_t* irow = di + oh * OW;
            for (std::int64_t ow = 0; ow < OW; ++ow) {
              const A a0 = load(r0[2 * ow]), a1 = load(r0[2 * ow + 1]), a2 = load(r1[2 * ow]), a3 = load(r1[2 * ow + 1]);
              // Ordered compares compile to selects; NaN (rare) takes the careful path.
              A m = a0;
              std::int64_t k = 0;
              k = a1 > m ? 1 : k;
              m = a1 > m ? a1 : m;
              k = a2 > m ? W : k;
              m = a2 > m ? a2 : m;
              k = a3 > m ? W + 1 : k;
              m = a3 > m ? a3 : m;
              if (std::isnan(a0 + a1 + a2 + a3)) {
                const A v[4] = {a0, a1, a2, a3};
                const std::int64_t at[4] = {0, 1, W, W + 1};
                for (int j = 0; j < 4; ++j)
                  if (std::isnan(v[j])) {
                    m = v[j];
                    k = at[j];
                    break;
                  }
              }
              drow[ow] = store<T>(m);
              irow[ow] = 2 * oh * W + 2 * ow + k;
            }
          }
          continue;
        }
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          const std::int64_t h0 = oh * SH - PH;
          // Kernel rows whose input row lies inside the plane.
          const std::int64_t kh0 = h0 >= 0 ? 0 : (-h0 + DH - 1) / DH;
          const std::int64_t kh1 = std::min(KH, h0 >= H ? 0 : (H - h0 + DH - 1) / DH);
          for (std::int64_t ow = 0; ow < OW; ++ow) {
            const std::int64_t w0 = ow * SW - PW;
            const std::int64_t kw0 = w0 >= 0 ? 0 : (-w0 + DW - 1) / DW;
            const std::int64_t kw1 = std::min(KW, w0 >= W ? 0 : (W - w0 + DW - 1) / DW);
            A best = -std::numeric_limits<A>::infinity();
            std::int64_t best_i = -1;
            if (kh0 < kh1 && kw0 < kw1) {
              best_i = (h0 + kh0 * DH) * W + w0 + kw0 * DW;
              best = load(src[best_i]);
            }
            for (std::int64_t kh = kh0; kh < kh1; ++kh)
              for (std::int64_t kw = kw0; kw < kw1; ++kw) {
                const std::int64_t at = (h0 + kh * DH) * W + w0 + kw * DW;
                take(load(src[at]), best, at, best_i);
              }
            dst[oh * OW + ow] = store<T>(best);
            di[oh * OW + ow] = best_i;
          }
        }
      }
      return;
    }
    _Pragma("omp parallel for schedule(dynamic, 8) if (parallel)")
    for (std::int64_t plane = 0; plane < p.planes; ++plane) {
      const T* src = x + plane * hw;
      T* dst = y + plane * ohw;
      for (std::int64_t oh = 0; oh < p.out_h; ++oh)
        for (std::int64_t ow = 0; ow < p.out_w; ++ow) {
          const Window w = avg_window(p, oh, ow);
          A acc = 0;
          for (std::int64_t ih = w.h0; ih < w.h1; ++ih)
            for (std::int64_t iw = w.w0; iw < w.w1; ++iw) acc += load(src[ih * p.width + iw]);
          dst[oh * p.out_w + ow] = store<T>(acc / A(w.divisor));
        }
    }
  });
}

void CpuBackend::pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) {
  require_contiguous("pool2d_backward", grad_in);
  require_contiguous("pool2d_backward", grad_out);
  const std::int64_t hw = p.height * p.width, ohw = p.out_h * p.out_w;
  const bool parallel = p.planes > 1 && p.planes * (hw + ohw) > kParallelGrain;
  RUMUS_DISPATCH_FLOAT(grad_in.dtype, "pool2d_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    T* gi = base_of<T>(grad_in);
    const T* go = base_of<T>(grad_out);
    const std::int64_t* idx = p.kind == PoolKind::max ? base_of<std::int64_t>(indices) : nullptr;
    _Pragma("omp parallel for schedule(dynamic, 8) if (parallel)")
    for (std::int64_t plane = 0; plane < p.planes; ++plane) {
      T* dst = gi + plane * hw;
      const T* src = go + plane * ohw;
      if constexpr (std::is_same_v<T, A>) {
        std::memset(static_cast<void*>(dst), 0, std::size_t(hw) * sizeof(T));
      } else {
        for (std::int64_t i = 0; i < hw; ++i) dst[i] = store<T>(0.0);
      }
      if (idx) {
        const std::int64_t* si = idx + plane * ohw;
        for (std::int64_t o = 0; o < ohw; ++o)
          if (si[o] >= 0) dst[si[o]] = store<T>(load(dst[si[o]]) + load(src[o]));
        continue;
      }
      for (std::int64_t oh = 0; oh < p.out_h; ++oh)
        for (std::int64_t ow = 0; ow < p.out_w; ++ow) {
          const Window w = avg_window(p, oh, ow);
          const A v = load(src[oh * p.out_w + ow]) / A(w.divisor);
          for (std::int64_t ih = w.h0; ih < w.h1; ++ih)
            for (std::int64_t iw = w.w0; iw < w.w1; ++iw)
              dst[ih * p.width + iw] = store<T>(load(dst[ih * p.width + iw]) + v);
        }
    }
  });
}

void CpuBackend::softmax_forward(TensorArg out, TensorArg in, bool log) {
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

void CpuBackend::softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) {
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

void CpuBackend::index_select(TensorArg out, TensorArg src, TensorArg index) {
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

void CpuBackend::index_add(TensorArg out, TensorArg index, TensorArg src) {
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
