#version 450
// Implicit-GEMM convolution on contiguous f32 NCHW operands: the GEMMs of the
// im2col lowering, with the column matrix gathered from the image while each
// shared-memory tile is loaded, so no column buffer ever exists.
// Per group g (workgroup z), with KK = KH * KW:
//   MODE 0, forward:          out[OCg, N*OH*OW] = W[OCg, Cg*KK] @ cols[Cg*KK, N*OH*OW], + bias, then
//                             the ReLU of conv2d_relu when RELU;
//   MODE 1, backward data:    gin[Cg, N*H*W] = W^T[Cg, OCg*KK] @ G[OCg*KK, N*H*W], where G holds, for
//                             each input pixel, the output gradient at the positions whose window
//                             saw it through (kh, kw), zero elsewhere: a gather, so no col2im and no
//                             two invocations write one element;
//   MODE 2, backward weight:  gW[OCg, Cg*KK] = gout[OCg, N*OH*OW] @ cols^T, split over the reduction
//                             when the tiles are few (each split writes its own slice; the host adds
//                             them), and the bias gradient (row sums of gout) from the workgroups of
//                             the first column tile, which already hold those rows in shared memory.
// Bindings: 0 the output; 1 the image (MODE 0, 2) or the output gradient (MODE 1); 2 the weight
// (MODE 0, 1) or the output gradient (MODE 2); 3 the bias (MODE 0) or its gradient (MODE 2).
// Tiles and the inner product follow gemm.comp: BM x BN per workgroup, 8 x 8 per invocation held
// as 2 x 2 vec4 quads half a tile apart. Loads walk the direction that is contiguous in memory.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;  // (BM / 8) * (BN / 8); BM, BN >= 64 so that BN and BK divide it
layout(constant_id = 1) const uint BM = 64;
layout(constant_id = 2) const uint BN = 64;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const uint MODE = 0;
layout(constant_id = 5) const bool HAS_BIAS = false;
layout(constant_id = 6) const bool UNIT_STRIDE = false;  // stride 1 on both axes: MODE 1 gathers without dividing
layout(constant_id = 7) const bool RELU = false;         // MODE 0: max(0, convolution + bias) (conv2d_relu)

#define PUSH_CONV_IGEMM
#include "push_constants.h"

layout(set = 0, binding = 0) buffer Out { float out_[]; };
layout(set = 0, binding = 1) readonly buffer X { float x_[]; };
layout(set = 0, binding = 2) readonly buffer Y { float y_[]; };
layout(set = 0, binding = 3) buffer Bias { float bias_[]; };

const uint THREADS = (BM / 8) * (BN / 8);
const uint AS = BM / 4 + 1;  // k-major rows of vec4, padded
const uint BS = BN / 4;
const uint LA = BM * BK / THREADS;  // A elements each invocation loads per slice
const uint LB = BN * BK / THREADS;
shared vec4 As[BK * AS];
shared vec4 Bs[BK * BS];

uint grp, bm, bn, k_end, cg, ocg, kk, hw, ohw;
// MODE 0, 1: the one column of B this invocation loads, fixed for the whole
// reduction: its image's base offset and the window origin (MODE 0) or the
// padded pixel position (MODE 1).
uint col_base;
int col_h, col_w;
bool col_ok;

void put_a(uint m, uint k, float v) { As[k * AS + m / 4][m % 4] = v; }
void put_b(uint k, uint n, float v) { Bs[k * BS + n / 4][n % 4] = v; }

// A = W (MODE 0), W^T (MODE 1), gout (MODE 2); k is the fast index in memory in all three.
void load_a(uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  const uint kl = tid % BK, k = k0 + kl;
  uint base, m_stride;
  if (MODE == 0) {  // W[g * OCg + m, k]
    base = pc.off2 + grp * ocg * pc.K + k;
    m_stride = pc.K;
  } else if (MODE == 1) {  // W[g * OCg + oc, m, r], k = (oc, r)
    uint oc = k / kk;
    base = pc.off2 + (grp * ocg + oc) * cg * kk + (k - oc * kk);
    m_stride = kk;
  } else {  // gout[b, g * OCg + m, l], k = (b, l)
    uint b = k / ohw;
    base = pc.off2 + (b * pc.out_channels + grp * ocg) * ohw + (k - b * ohw);
    m_stride = ohw;
  }
  const bool k_ok = k < k_end;
  [[unroll]] for (uint p = 0; p < LA; ++p) {
    uint m = tid / BK + p * (THREADS / BK);
    put_a(m, kl, k_ok && bm + m < pc.M ? y_[base + (bm + m) * m_stride] : 0.0);
  }
}

// B of MODE 0, 1: row k = (c, kh, kw) (MODE 0) or (oc, kh, kw) (MODE 1) of this
// invocation's column; consecutive loads step k by THREADS / BN (1 or 2), so
// the kernel position advances by carrying instead of dividing.
void load_b_rows(uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  const uint nl = tid % BN, step = THREADS / BN;
  uint kl = tid / BN, k = k0 + kl;
  uint c = k / kk, r = k - c * kk, kh = r / pc.kernel_w, kw = r - kh * pc.kernel_w;
  [[unroll]] for (uint p = 0; p < LB; ++p) {
    float v = 0.0;
    if (col_ok && k < k_end) {
      if (MODE == 0) {
        int ih = col_h + int(kh * pc.dilation_h), iw = col_w + int(kw * pc.dilation_w);
        if (ih >= 0 && ih < int(pc.height) && iw >= 0 && iw < int(pc.width))
          v = x_[col_base + c * hw + uint(ih) * pc.width + uint(iw)];
      } else {
        // Output position (oh, ow) saw this pixel through (kh, kw) when
        // oh * stride + kh * dilation = ih + pad.
        int th = col_h - int(kh * pc.dilation_h), tw = col_w - int(kw * pc.dilation_w);
        if (th >= 0 && tw >= 0) {
          uint oh = UNIT_STRIDE ? uint(th) : uint(th) / pc.stride_h, ow = UNIT_STRIDE ? uint(tw) : uint(tw) / pc.stride_w;
          if (oh * pc.stride_h == uint(th) && ow * pc.stride_w == uint(tw) && oh < pc.out_h && ow < pc.out_w)
            v = x_[col_base + c * ohw + oh * pc.out_w + ow];
        }
      }
    }
    put_b(kl, nl, v);
    kl += step;
    k += step;
    [[unroll]] for (uint s = 0; s < step; ++s) {
      if (++kw == pc.kernel_w) {
        kw = 0;
        if (++kh == pc.kernel_h) {
          kh = 0;
          ++c;
        }
      }
    }
  }
}

// B of MODE 2: cols^T, row k = (b, oh, ow) fixed per slice, column n = (c, kh, kw)
// stepping by THREADS / BK (up to 32: each decomposed afresh).
void load_b_cols(uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  const uint kl = tid % BK, k = k0 + kl, step = THREADS / BK;
  const uint b = k / ohw, l = k - b * ohw, oh = l / pc.out_w, ow = l - oh * pc.out_w;
  const int ih0 = int(oh * pc.stride_h) - pc.pad_h, iw0 = int(ow * pc.stride_w) - pc.pad_w;
  const uint base = pc.off1 + (b * pc.channels + grp * cg) * hw;
  const bool k_ok = k < k_end;
  [[unroll]] for (uint p = 0; p < LB; ++p) {
    uint nl = tid / BK + p * step, n = bn + nl;
    uint c = n / kk, r = n - c * kk, kh = r / pc.kernel_w, kw = r - kh * pc.kernel_w;
    float v = 0.0;
    if (k_ok && n < pc.N) {
      int ih = ih0 + int(kh * pc.dilation_h), iw = iw0 + int(kw * pc.dilation_w);
      if (ih >= 0 && ih < int(pc.height) && iw >= 0 && iw < int(pc.width))
        v = x_[base + c * hw + uint(ih) * pc.width + uint(iw)];
    }
    put_b(kl, nl, v);
  }
}

// Where C(m, n) of this group goes.
uint out_index(uint m, uint n, uint split) {
  if (MODE == 0) {
    uint b = n / ohw;
    return pc.off0 + (b * pc.out_channels + grp * ocg + m) * ohw + (n - b * ohw);
  }
  if (MODE == 1) {
    uint b = n / hw;
    return pc.off0 + (b * pc.channels + grp * cg + m) * hw + (n - b * hw);
  }
  return pc.off0 + ((grp * pc.splits + split) * ocg + m) * pc.N + n;
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tx = tid % (BN / 8), ty = tid / (BN / 8);
  grp = gl_WorkGroupID.z / pc.splits;
  const uint split = gl_WorkGroupID.z % pc.splits;
  bm = gl_WorkGroupID.y * BM;
  bn = (pc.tile_n0 + gl_WorkGroupID.x) * BN;
  cg = pc.channels / pc.groups;
  ocg = pc.out_channels / pc.groups;
  kk = pc.kernel_h * pc.kernel_w;
  hw = pc.height * pc.width;
  ohw = pc.out_h * pc.out_w;
  const uint k_begin = split * pc.k_chunk;
  k_end = min(pc.K, k_begin + pc.k_chunk);

  if (MODE != 2) {
    const uint n = bn + tid % BN;
    col_ok = n < pc.N;
    if (MODE == 0) {
      const uint b = n / ohw, l = n - b * ohw, oh = l / pc.out_w, ow = l - oh * pc.out_w;
      col_base = pc.off1 + (b * pc.channels + grp * cg) * hw;
      col_h = int(oh * pc.stride_h) - pc.pad_h;
      col_w = int(ow * pc.stride_w) - pc.pad_w;
    } else {
      const uint b = n / hw, l = n - b * hw, ih = l / pc.width, iw = l - ih * pc.width;
      col_base = pc.off1 + (b * pc.out_channels + grp * ocg) * ohw;
      col_h = int(ih) + pc.pad_h;
      col_w = int(iw) + pc.pad_w;
    }
  }

  vec4 acc[16];  // row r (0..7) x quad q (0..1) at 2 * r + q
  for (uint i = 0; i < 16; ++i) acc[i] = vec4(0.0);
  float bias_sum = 0.0;  // MODE 2: row tid of gout summed over this split's range
  const bool sums_bias = MODE == 2 && HAS_BIAS && bn == 0 && tid < BM;

  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    load_a(k0);
    if (MODE == 2) load_b_cols(k0); else load_b_rows(k0);
    barrier();
    // Inner loops unrolled: besides speed, llvmpipe (lavapipe) caps the
    // iterations a loop may run over a whole invocation at 65535, and an
    // inner loop would spend that budget across the reduction.
    if (sums_bias)
      [[unroll]] for (uint k = 0; k < BK; ++k) bias_sum += As[k * AS + tid / 4][tid % 4];
    [[unroll]] for (uint k = 0; k < BK; ++k) {
      vec4 a0 = As[k * AS + ty], a1v = As[k * AS + ty + BM / 8];
      vec4 b0 = Bs[k * BS + tx], b1v = Bs[k * BS + tx + BN / 8];
      [[unroll]] for (uint r = 0; r < 4; ++r) {
        acc[2 * r] += a0[r] * b0;
        acc[2 * r + 1] += a0[r] * b1v;
        acc[2 * r + 8] += a1v[r] * b0;
        acc[2 * r + 9] += a1v[r] * b1v;
      }
    }
    barrier();
  }

  if (sums_bias && bm + tid < pc.M) bias_[pc.off3 + (grp * pc.splits + split) * ocg + bm + tid] = bias_sum;
  // Fully unrolled, so acc stays in registers (see gemm.comp).
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      uint m = bm + ty * 4 + h * (BM / 2) + r;
      if (m >= pc.M) continue;
      float bias = MODE == 0 && HAS_BIAS ? bias_[pc.off3 + grp * ocg + m] : 0.0;
      [[unroll]] for (uint q = 0; q < 2; ++q) {
        uint n = bn + tx * 4 + q * (BN / 2);
        vec4 v = acc[2 * r + 8 * h + q];
        [[unroll]] for (uint j = 0; j < 4; ++j) {
          // x > 0 ? x : 0, as the CPU's ReLU (NaN gives 0).
          const float r = v[j] + bias;
          if (n + j < pc.N) out_[out_index(m, n + j, split)] = RELU && !(r > 0.0) ? 0.0 : r;
        }
      }
    }
  }
}
