// CPU kernels of the convolution lowering (../conv.hpp): im2col and col2im.
// Parallel over independent planes or rows so that no two threads write the
// same element; scheduled dynamically in small chunks, so a thread the OS
// preempts does not hold up the whole loop.
#include "../conv.hpp"

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

void im2col(Backend& be, const Conv2dGeometry& g, TensorArg cols, TensorArg in) {
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

void col2im(Backend& be, const Conv2dGeometry& g, TensorArg out, TensorArg cols) {
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

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, im2col) {
  register_kernel<Im2colKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::im2col);
  register_kernel<Col2imKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::col2im);
}

}  // namespace rumus
