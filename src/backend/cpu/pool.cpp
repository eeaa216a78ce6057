// CPU kernels of the pooling family (../pool.hpp).
// Parallel over independent planes or rows so that no two threads write the
// same element; scheduled dynamically in small chunks, so a thread the OS
// preempts does not hold up the whole loop.
#include "../pool.hpp"

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

void pool2d_forward(Backend& be, const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) {
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

void pool2d_backward(Backend& be, const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) {
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

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, pool) {
  register_kernel<Pool2dForwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::pool2d_forward);
  register_kernel<Pool2dBackwardKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::pool2d_backward);
}

}  // namespace rumus
