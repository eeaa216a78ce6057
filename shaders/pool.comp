#version 450
// 2-D pooling over contiguous [planes, H, W]. Forward: one invocation per
// output. Backward: one invocation per input pixel, gathering from the
// outputs whose windows contain it (no atomics, deterministic).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;  // POOL_*
layout(constant_id = 2) const bool BACKWARD = false;
layout(constant_id = 3) const uint DT = 0;
// The planes' geometry, constants of the pipeline (one a shape) so that the
// index arithmetic divides by constants: divisions by push constants bound
// the 2x2 max pool's backward on an H100 (128 us for [512, 64, 24, 24]).
layout(constant_id = 4) const uint H = 1;
layout(constant_id = 5) const uint W = 1;
layout(constant_id = 6) const uint OH = 1;
layout(constant_id = 7) const uint OW = 1;
layout(constant_id = 8) const uint KH = 1;
layout(constant_id = 9) const uint KW = 1;
layout(constant_id = 10) const uint SH = 1;
layout(constant_id = 11) const uint SW = 1;

#define PUSH_POOL
#include "push_constants.h"

TENSOR(0)  // forward: out; backward: grad_in
TENSOR(1)  // forward: in; backward: grad_out
TENSOR(2)  // indices (i64), max only

// The input window of output (oh, ow), clipped, and its divisor (as the CPU kernel).
void avg_window(uint oh, uint ow, out int h0, out int h1, out int w0, out int w1, out REAL divisor) {
  if (KIND == POOL_ADAPTIVE_AVG) {
    h0 = int(oh * H / OH);
    h1 = int(((oh + 1) * H + OH - 1) / OH);
    w0 = int(ow * W / OW);
    w1 = int(((ow + 1) * W + OW - 1) / OW);
    divisor = REAL((h1 - h0) * (w1 - w0));
    return;
  }
  int ph0 = int(oh * SH) - pc.pad_h, pw0 = int(ow * SW) - pc.pad_w;
  int ph1 = min(ph0 + int(KH), int(H) + pc.pad_h);
  int pw1 = min(pw0 + int(KW), int(W) + pc.pad_w);
  REAL padded = REAL((ph1 - ph0) * (pw1 - pw0));
  h0 = max(ph0, 0); w0 = max(pw0, 0);
  h1 = min(ph1, int(H)); w1 = min(pw1, int(W));
  divisor = pc.count_include_pad != 0 ? padded : REAL((h1 - h0) * (w1 - w0));
}

void forward(uint i) {
  uint ow = i % OW, t = i / OW;
  uint oh = t % OH, plane = t / OH;
  int src = pc.off1 + int(plane * H * W);
  if (KIND == POOL_MAX) {
    REAL best = 0.0;
    int best_i = -1;
    int h0 = int(oh * SH) - pc.pad_h, w0 = int(ow * SW) - pc.pad_w;
    for (uint kh = 0; kh < KH; ++kh) {
      int ih = h0 + int(kh * pc.dilation_h);
      if (ih < 0 || ih >= int(H)) continue;
      for (uint kw = 0; kw < KW; ++kw) {
        int iw = w0 + int(kw * pc.dilation_w);
        if (iw < 0 || iw >= int(W)) continue;
        REAL v = load1(DT, src + ih * int(W) + iw);
        if (best_i < 0 || (!is_nan_f(best) && (v > best || is_nan_f(v)))) {  // NaN wins
          best = v;
          best_i = ih * int(W) + iw;
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
    for (int iw = w0; iw < w1; ++iw) acc += load1(DT, src + ih * int(W) + iw);
  store0(DT, pc.off0 + int(i), acc / divisor);
}

void backward(uint i) {
  int iw = int(i % W), t = int(i / W);
  int ih = t % int(H), plane = t / int(H);
  int go = pc.off1 + plane * int(OH * OW);
  REAL acc = 0.0;
  if (KIND == POOL_ADAPTIVE_AVG) {
    // Adaptive windows are monotone in the output index: scan the few that may contain ih / iw.
    int oh0 = max(0, ih * int(OH) / int(H) - 1), oh1 = min(int(OH), (ih + 1) * int(OH) / int(H) + 2);
    int ow0 = max(0, iw * int(OW) / int(W) - 1), ow1 = min(int(OW), (iw + 1) * int(OW) / int(W) + 2);
    for (int oh = oh0; oh < oh1; ++oh)
      for (int ow = ow0; ow < ow1; ++ow) {
        int h0, h1, w0, w1;
        REAL divisor;
        avg_window(oh, ow, h0, h1, w0, w1, divisor);
        if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1) acc += load1(DT, go + oh * int(OW) + ow) / divisor;
      }
  } else if (KIND == POOL_MAX && SH == KH && SW == KW && pc.pad_h == 0 &&
             pc.pad_w == 0 && pc.dilation_h == 1 && pc.dilation_w == 1) {
    // Windows that tile the input (the usual 2x2 pool): a pixel lies in one
    // window at most, found by one division, with no loop over the window.
    const int oh = ih / int(SH), ow = iw / int(SW);
    if (oh < int(OH) && ow < int(OW)) {
      const int o = oh * int(OW) + ow, at = pc.off2 + plane * int(OH * OW) + o;
      if (int(t2u.v[2 * at]) == ih * int(W) + iw) acc = load1(DT, go + o);
    }
  } else {
    const uint dh = KIND == POOL_MAX ? pc.dilation_h : 1u, dw = KIND == POOL_MAX ? pc.dilation_w : 1u;
    for (uint kh = 0; kh < KH; ++kh) {
      int th = ih + pc.pad_h - int(kh * dh);
      if (th < 0 || th % int(SH) != 0 || th / int(SH) >= int(OH)) continue;
      int oh = th / int(SH);
      for (uint kw = 0; kw < KW; ++kw) {
        int tw = iw + pc.pad_w - int(kw * dw);
        if (tw < 0 || tw % int(SW) != 0 || tw / int(SW) >= int(OW)) continue;
        int ow = tw / int(SW);
        int o = oh * int(OW) + ow;
        if (KIND == POOL_MAX) {
          int at = pc.off2 + plane * int(OH * OW) + o;
          if (int(t2u.v[2 * at]) == ih * int(W) + iw) acc += load1(DT, go + o);
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
