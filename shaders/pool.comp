#version 450
// 2-D pooling over contiguous [planes, H, W]. Forward: one invocation per
// output. Backward: one invocation per input pixel, gathering from the
// outputs whose windows contain it (no atomics, deterministic).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;  // POOL_*
layout(constant_id = 2) const bool BACKWARD = false;
layout(constant_id = 3) const uint DT = 0;

#define PUSH_POOL
#include "push_constants.h"

TENSOR(0)  // forward: out; backward: grad_in
TENSOR(1)  // forward: in; backward: grad_out
TENSOR(2)  // indices (i64), max only

// The input window of output (oh, ow), clipped, and its divisor (as the CPU kernel).
void avg_window(uint oh, uint ow, out int h0, out int h1, out int w0, out int w1, out REAL divisor) {
  if (KIND == POOL_ADAPTIVE_AVG) {
    h0 = int(oh * pc.height / pc.out_h);
    h1 = int(((oh + 1) * pc.height + pc.out_h - 1) / pc.out_h);
    w0 = int(ow * pc.width / pc.out_w);
    w1 = int(((ow + 1) * pc.width + pc.out_w - 1) / pc.out_w);
    divisor = REAL((h1 - h0) * (w1 - w0));
    return;
  }
  int ph0 = int(oh * pc.stride_h) - pc.pad_h, pw0 = int(ow * pc.stride_w) - pc.pad_w;
  int ph1 = min(ph0 + int(pc.kernel_h), int(pc.height) + pc.pad_h);
  int pw1 = min(pw0 + int(pc.kernel_w), int(pc.width) + pc.pad_w);
  REAL padded = REAL((ph1 - ph0) * (pw1 - pw0));
  h0 = max(ph0, 0); w0 = max(pw0, 0);
  h1 = min(ph1, int(pc.height)); w1 = min(pw1, int(pc.width));
  divisor = pc.count_include_pad != 0 ? padded : REAL((h1 - h0) * (w1 - w0));
}

void forward(uint i) {
  uint ow = i % pc.out_w, t = i / pc.out_w;
  uint oh = t % pc.out_h, plane = t / pc.out_h;
  int src = pc.off1 + int(plane * pc.height * pc.width);
  if (KIND == POOL_MAX) {
    REAL best = 0.0;
    int best_i = -1;
    int h0 = int(oh * pc.stride_h) - pc.pad_h, w0 = int(ow * pc.stride_w) - pc.pad_w;
    for (uint kh = 0; kh < pc.kernel_h; ++kh) {
      int ih = h0 + int(kh * pc.dilation_h);
      if (ih < 0 || ih >= int(pc.height)) continue;
      for (uint kw = 0; kw < pc.kernel_w; ++kw) {
        int iw = w0 + int(kw * pc.dilation_w);
        if (iw < 0 || iw >= int(pc.width)) continue;
        REAL v = load1(DT, src + ih * int(pc.width) + iw);
        if (best_i < 0 || (!is_nan_f(best) && (v > best || is_nan_f(v)))) {  // NaN wins
          best = v;
          best_i = ih * int(pc.width) + iw;
        }
      }
    }
    if (best_i < 0) best = -real_inf();
    store0(DT, pc.off0 + int(i), best);
    int at = pc.off2 + int(i);
    t2u.v[2 * at] = uint(best_i);
    t2u.v[2 * at + 1] = best_i < 0 ? 0xffffffffu : 0u;
    return;
  }
  int h0, h1, w0, w1;
  REAL divisor;
  avg_window(oh, ow, h0, h1, w0, w1, divisor);
  REAL acc = 0.0;
  for (int ih = h0; ih < h1; ++ih)
    for (int iw = w0; iw < w1; ++iw) acc += load1(DT, src + ih * int(pc.width) + iw);
  store0(DT, pc.off0 + int(i), acc / divisor);
}

void backward(uint i) {
  int iw = int(i % pc.width), t = int(i / pc.width);
  int ih = t % int(pc.height), plane = t / int(pc.height);
  int go = pc.off1 + plane * int(pc.out_h * pc.out_w);
  REAL acc = 0.0;
  if (KIND == POOL_ADAPTIVE_AVG) {
    // Adaptive windows are monotone in the output index: scan the few that may contain ih / iw.
    int oh0 = max(0, ih * int(pc.out_h) / int(pc.height) - 1), oh1 = min(int(pc.out_h), (ih + 1) * int(pc.out_h) / int(pc.height) + 2);
    int ow0 = max(0, iw * int(pc.out_w) / int(pc.width) - 1), ow1 = min(int(pc.out_w), (iw + 1) * int(pc.out_w) / int(pc.width) + 2);
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        int h0, h1, w0, w1;
        REAL divisor;
        avg_window(oh, ow, h0, h1, w0, w1, divisor);
        if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1) acc += load1(DT, go + oh * int(pc.out_w) + ow) / divisor;
      }
  } else if (KIND == POOL_MAX && pc.stride_h == pc.kernel_h && pc.stride_w == pc.kernel_w && pc.pad_h == 0 &&
             pc.pad_w == 0 && pc.dilation_h == 1 && pc.dilation_w == 1) {
    // Windows that tile the input (the usual 2x2 pool): a pixel lies in one
    // window at most, found by one division, with no loop over the window.
    const int oh = ih / int(pc.stride_h), ow = iw / int(pc.stride_w);
    if (oh < int(pc.out_h) && ow < int(pc.out_w)) {
      const int o = oh * int(pc.out_w) + ow, at = pc.off2 + plane * int(pc.out_h * pc.out_w) + o;
      if (int(t2u.v[2 * at]) == ih * int(pc.width) + iw) acc = load1(DT, go + o);
    }
  } else {
    const uint dh = KIND == POOL_MAX ? pc.dilation_h : 1u, dw = KIND == POOL_MAX ? pc.dilation_w : 1u;
    for (uint kh = 0; kh < pc.kernel_h; ++kh) {
      int th = ih + pc.pad_h - int(kh * dh);
      if (th < 0 || th % int(pc.stride_h) != 0 || th / int(pc.stride_h) >= int(pc.out_h)) continue;
      int oh = th / int(pc.stride_h);
      for (uint kw = 0; kw < pc.kernel_w; ++kw) {
        int tw = iw + pc.pad_w - int(kw * dw);
        if (tw < 0 || tw % int(pc.stride_w) != 0 || tw / int(pc.stride_w) >= int(pc.out_w)) continue;
        int ow = tw / int(pc.stride_w);
        int o = oh * int(pc.out_w) + ow;
        if (KIND == POOL_MAX) {
          int at = pc.off2 + plane * int(pc.out_h * pc.out_w) + o;
          if (int(t2u.v[2 * at]) == ih * int(pc.width) + iw) acc += load1(DT, go + o);
        } else {
          int h0, h1, w0, w1;
          REAL divisor;
          avg_window(oh, ow, h0, h1, w0, w1, divisor);
          if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1) acc += load1(DT, go + o) / divisor;
        }
      }
    }
  }
  store0(DT, pc.off0 + int(i), acc);
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += step) {
    if (BACKWARD) backward(i);
    else forward(i);
  }
}
