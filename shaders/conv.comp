#version 450
// Convolution lowering. IM2COL: one invocation per (sample, channel, output
// position), writing that window's column entries (zeros in the padding). COL2IM: one invocation per input pixel, gathering every
// column entry that maps onto it, so no two invocations write one element.
// QUADS (f32, f16 or bf16; rows of the columns, or of the image, in whole
// quads): four neighbouring positions or pixels an invocation, whose
// column entries or pixels are written in one 16- or 8-byte store.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool COL2IM = false;
layout(constant_id = 2) const uint DT = 0;
layout(constant_id = 3) const bool QUADS = false;

#define PUSH_CONV
#include "push_constants.h"

TENSOR(0)  // im2col: cols; col2im: image
TENSOR(1)  // im2col: image; col2im: cols
layout(set = 0, binding = 0) buffer Q0 { vec4 v[]; } t0q;
layout(set = 0, binding = 0) buffer D0 { uvec2 v[]; } t0d;

// Elements [4 q, 4 q + 4) of binding 0 in one store.
void store_quad(uint q, vec4 v) {
  if (DT == DT_F32) t0q.v[q] = v;
  else t0d.v[q] = pack_quad16(DT, v);
}

// Output positions [4 j, 4 j + 4) of one row, one (sample, channel): their column entries.
void im2col_quad(uint i) {
  const uint quads_w = pc.out_w / 4;
  uint ow = 4 * (i % quads_w), t = i / quads_w;
  uint oh = t % pc.out_h; t /= pc.out_h;
  uint ch = t % pc.channels, n = t / pc.channels;
  const int ih0 = int(oh * pc.stride_h) - pc.pad_h, iw0 = int(ow * pc.stride_w) - pc.pad_w;
  const int src = pc.in_offset + int(n) * pc.in_stride[0] + int(ch) * pc.in_stride[1];
  int dst = pc.cols_offset + int(n) * pc.cols_stride[0] + int(ch * pc.kernel_h * pc.kernel_w) * pc.cols_stride[1] +
            int(oh * pc.out_w + ow);
  for (uint kh = 0; kh < pc.kernel_h; ++kh) {
    const int ih = ih0 + int(kh * pc.dilation_h);
    const bool row = ih >= 0 && ih < int(pc.height);
    for (uint kw = 0; kw < pc.kernel_w; ++kw) {
      vec4 v = vec4(0.0);
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        const int iw = iw0 + int(j * pc.stride_w + kw * pc.dilation_w);
        if (row && iw >= 0 && iw < int(pc.width)) v[j] = float(load1(DT, src + ih * pc.in_stride[2] + iw * pc.in_stride[3]));
      }
      store_quad(uint(dst) / 4, v);
      dst += pc.cols_stride[1];
    }
  }
}

// Pixels [4 j, 4 j + 4) of one image row: every column entry that maps onto each.
void col2im_quad(uint i) {
  const uint quads_w = pc.width / 4;
  uint iw = 4 * (i % quads_w), t = i / quads_w;
  uint ih = t % pc.height; t /= pc.height;
  uint ch = t % pc.channels, n = t / pc.channels;
  vec4 acc = vec4(0.0);
  for (uint kh = 0; kh < pc.kernel_h; ++kh) {
    int th = int(ih) + pc.pad_h - int(kh * pc.dilation_h);
    if (th < 0 || th % int(pc.stride_h) != 0) continue;
    uint oh = uint(th) / pc.stride_h;
    if (oh >= pc.out_h) continue;
    for (uint kw = 0; kw < pc.kernel_w; ++kw) {
      const int row = pc.cols_offset + int(n) * pc.cols_stride[0] +
                      int(ch * pc.kernel_h * pc.kernel_w + kh * pc.kernel_w + kw) * pc.cols_stride[1] +
                      int(oh * pc.out_w) * pc.cols_stride[2];
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        int tw = int(iw + j) + pc.pad_w - int(kw * pc.dilation_w);
        if (tw < 0 || tw % int(pc.stride_w) != 0) continue;
        uint ow = uint(tw) / pc.stride_w;
        if (ow < pc.out_w) acc[j] += float(load1(DT, row + int(ow) * pc.cols_stride[2]));
      }
    }
  }
  store_quad((uint(pc.in_offset) + ((n * pc.channels + ch) * pc.height + ih) * pc.width + iw) / 4, acc);
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint kk = pc.kernel_h * pc.kernel_w;
  for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += step) {
    if (QUADS) {
      if (COL2IM) col2im_quad(i);
      else im2col_quad(i);
      continue;
    }
    if (!COL2IM) {
      // Item i is one (sample, channel, output position): it reads the window
      // there and writes its KH x KW column entries, so neighbouring
      // invocations read neighbouring pixels and write neighbouring entries.
      if (i >= pc.total / kk) break;
      uint ow = i % pc.out_w, t = i / pc.out_w;
      uint oh = t % pc.out_h; t /= pc.out_h;
      uint ch = t % pc.channels, n = t / pc.channels;
      const int ih0 = int(oh * pc.stride_h) - pc.pad_h, iw0 = int(ow * pc.stride_w) - pc.pad_w;
      const int src = pc.in_offset + int(n) * pc.in_stride[0] + int(ch) * pc.in_stride[1];
      int dst = pc.cols_offset + int(n) * pc.cols_stride[0] + int(ch * kk) * pc.cols_stride[1] +
                int(oh * pc.out_w + ow) * pc.cols_stride[2];
      for (uint kh = 0; kh < pc.kernel_h; ++kh) {
        const int ih = ih0 + int(kh * pc.dilation_h);
        for (uint kw = 0; kw < pc.kernel_w; ++kw) {
          const int iw = iw0 + int(kw * pc.dilation_w);
          REAL v = 0.0;
          if (ih >= 0 && ih < int(pc.height) && iw >= 0 && iw < int(pc.width))
            v = load1(DT, src + ih * pc.in_stride[2] + iw * pc.in_stride[3]);
          store0(DT, dst, v);
          dst += pc.cols_stride[1];
        }
      }
    } else {
      uint iw = i % pc.width, t = i / pc.width;
      uint ih = t % pc.height; t /= pc.height;
      uint ch = t % pc.channels, n = t / pc.channels;
      REAL acc = 0.0;
      for (uint kh = 0; kh < pc.kernel_h; ++kh) {
        int th = int(ih) + pc.pad_h - int(kh * pc.dilation_h);
        if (th < 0 || th % int(pc.stride_h) != 0) continue;
        uint oh = uint(th) / pc.stride_h;
        if (oh >= pc.out_h) continue;
        for (uint kw = 0; kw < pc.kernel_w; ++kw) {
          int tw = int(iw) + pc.pad_w - int(kw * pc.dilation_w);
          if (tw < 0 || tw % int(pc.stride_w) != 0) continue;
          uint ow = uint(tw) / pc.stride_w;
          if (ow >= pc.out_w) continue;
          uint r = ch * kk + kh * pc.kernel_w + kw;
          acc += load1(DT, pc.cols_offset + int(n) * pc.cols_stride[0] + int(r) * pc.cols_stride[1] +
                               int(oh * pc.out_w + ow) * pc.cols_stride[2]);
        }
      }
      store0(DT, pc.in_offset + int(i), acc);
    }
  }
}
