#version 450
// Direct f32 convolutions for tiny reductions (K = C x KH x KW up to 32, one
// group: a first layer over 1 or 3 channels), where a GEMM's tiles would be
// mostly empty. Contiguous NCHW operands; push constants as conv_igemm.comp's.
//   MODE 0, forward: an invocation per output position holds its K inputs in
//     registers and writes OCB channels (coalesced along the positions) from
//     the workgroup's weights in shared memory, + bias, then the ReLU of
//     conv2d_relu when RELU.
//   MODE 2, weight gradient: a workgroup sums a slice of the positions
//     (k_chunk, a multiple of PB) for OCB output channels, PB positions at a
//     time staged in shared memory; invocation (c, lane) adds
//     gout[c, p] x cols[k, p] for every k over its lane's positions, and the
//     lanes are added at the end. Slice s writes parts[s][OC][K] (and the bias
//     gradient's parts[s][OC]); with one slice, the gradients themselves.
// Bindings: 0 the output (MODE 0) or the weight gradient's slices (MODE 2);
// 1 the image; 2 the weight (MODE 0) or the output gradient (MODE 2); 3 the
// bias (MODE 0) or its gradient's slices (MODE 2).
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint K = 9;    // C x KH x KW, at most 32
layout(constant_id = 2) const uint KH = 3;
layout(constant_id = 3) const uint KW = 3;
layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool RELU = false;
layout(constant_id = 6) const uint OCB = 32;  // output channels per workgroup: 8, 16, 32 or 64

#define PUSH_CONV_IGEMM
#include "push_constants.h"

layout(set = 0, binding = 0) buffer Out { float out_[]; };
layout(set = 0, binding = 1) readonly buffer X { float x_[]; };
layout(set = 0, binding = 2) readonly buffer Y { float y_[]; };
layout(set = 0, binding = 3) buffer Bias { float bias_[]; };

const uint KQ = (K + 3) / 4;  // K in vec4s, the weights zero-padded
const uint PB = 64;           // MODE 2: positions per block
const uint LANES = 256 / OCB;

shared vec4 ws[MODE == 0 ? OCB * KQ : 1];
shared float bs[MODE == 0 ? OCB : 1];
shared float xs[MODE == 2 ? K * PB : 1];               // [k][p]
shared float gs[MODE == 2 ? OCB * (PB + 1) : 1];       // [c][p], rows padded against bank conflicts
shared float sums[MODE == 2 ? OCB * (K + 1) : 1];      // [c][k], then the bias's sum

// Input k of output position j's window (0 in the padding).
float window_input(uint j, uint k) {
  const uint ohw = pc.out_h * pc.out_w;
  const uint n = j / ohw, p = j - n * ohw, oh = p / pc.out_w, ow = p - oh * pc.out_w;
  const uint c = k / (KH * KW), r = k - c * (KH * KW), kh = r / KW, kw = r - kh * KW;
  const int ih = int(oh * pc.stride_h + kh * pc.dilation_h) - pc.pad_h;
  const int iw = int(ow * pc.stride_w + kw * pc.dilation_w) - pc.pad_w;
  if (ih < 0 || iw < 0 || ih >= int(pc.height) || iw >= int(pc.width)) return 0.0;
  return x_[pc.off1 + ((n * pc.channels + c) * pc.height + uint(ih)) * pc.width + uint(iw)];
}

void forward() {
  const uint tid = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.y * OCB;
  const uint nc = min(OCB, pc.out_channels - c0);
  for (uint i = tid; i < OCB * KQ; i += 256) {
    const uint c = i / KQ, q = i - c * KQ;
    vec4 w = vec4(0.0);
    [[unroll]] for (uint e = 0; e < 4; ++e)
      if (c < nc && q * 4 + e < K) w[e] = y_[pc.off2 + (c0 + c) * K + q * 4 + e];
    ws[i] = w;
  }
  if (HAS_BIAS && tid < OCB) bs[tid] = tid < nc ? bias_[pc.off3 + c0 + tid] : 0.0;
  barrier();
  const uint j = (gl_WorkGroupID.x + pc.tile_n0) * 256 + tid;
  if (j >= pc.N) return;
  vec4 x[KQ];
  [[unroll]] for (uint q = 0; q < KQ; ++q)
    [[unroll]] for (uint e = 0; e < 4; ++e) x[q][e] = q * 4 + e < K ? window_input(j, q * 4 + e) : 0.0;
  const uint ohw = pc.out_h * pc.out_w, n = j / ohw, p = j - n * ohw;
  const uint base = pc.off0 + (n * pc.out_channels + c0) * ohw + p;
  for (uint c = 0; c < nc; ++c) {
    float acc = HAS_BIAS ? bs[c] : 0.0;
    [[unroll]] for (uint q = 0; q < KQ; ++q) acc += dot(ws[c * KQ + q], x[q]);
    out_[base + c * ohw] = RELU ? max(acc, 0.0) : acc;
  }
}

void weight_gradient() {
  const uint tid = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.y * OCB;
  const uint nc = min(OCB, pc.out_channels - c0);
  const uint c = tid % OCB, lane = tid / OCB;
  const uint first = gl_WorkGroupID.x * pc.k_chunk, end = min(first + pc.k_chunk, pc.N);
  const uint ohw = pc.out_h * pc.out_w;
  float acc[K];
  [[unroll]] for (uint k = 0; k < K; ++k) acc[k] = 0.0;
  float acc_bias = 0.0;
  for (uint j0 = first; j0 < end; j0 += PB) {
    for (uint i = tid; i < OCB * PB; i += 256) {
      const uint cc = i / PB, pp = i - cc * PB, j = j0 + pp;
      float g = 0.0;
      if (j < end && cc < nc) {
        const uint n = j / ohw;
        g = y_[pc.off2 + (n * pc.out_channels + c0 + cc) * ohw + (j - n * ohw)];
      }
      gs[cc * (PB + 1) + pp] = g;
    }
    for (uint i = tid; i < K * PB; i += 256) {
      const uint k = i / PB, pp = i - k * PB, j = j0 + pp;
      xs[i] = j < end ? window_input(j, k) : 0.0;
    }
    barrier();
    for (uint pp = lane; pp < PB; pp += LANES) {
      const float g = gs[c * (PB + 1) + pp];
      acc_bias += g;
      [[unroll]] for (uint k = 0; k < K; ++k) acc[k] += g * xs[k * PB + pp];
    }
    barrier();
  }
  // The lanes' sums, one lane at a time.
  for (uint l = 0; l < LANES; ++l) {
    if (lane == l) {
      [[unroll]] for (uint k = 0; k < K; ++k) sums[c * (K + 1) + k] = (l == 0 ? 0.0 : sums[c * (K + 1) + k]) + acc[k];
      sums[c * (K + 1) + K] = (l == 0 ? 0.0 : sums[c * (K + 1) + K]) + acc_bias;
    }
    barrier();
  }
  const uint slice = gl_WorkGroupID.x;
  for (uint i = tid; i < nc * K; i += 256) {
    const uint cc = i / K, k = i - cc * K;
    out_[pc.off0 + (slice * pc.out_channels + c0 + cc) * K + k] = sums[cc * (K + 1) + k];
  }
  if (HAS_BIAS && tid < nc) bias_[pc.off3 + slice * pc.out_channels + c0 + tid] = sums[tid * (K + 1) + K];
}

void main() {
  if (MODE == 0)
    forward();
  else
    weight_gradient();
}
