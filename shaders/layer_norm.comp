#version 450
// Layer normalisation over the last dim of contiguous [rows, d] tensors.
//   MODE 0: forward, one workgroup per row: the mean, then the variance about
//           it (a second pass over the row: no cancellation), then out, and
//           mean and invstd for the backward pass.
//   MODE 1: grad_x, one workgroup per row: with dxhat = grad_out * weight,
//           (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) * invstd.
//   MODE 2: the weight and bias gradients' partial sums over a block of
//           pc.block rows, one column per invocation: [blocks, 2, d].
//   MODE 3: those partials summed over the blocks, 8 invocations a column:
//           each sums every 8th block in order, then the first adds the 8
//           in order, so that the sums are the same on every run (no atomics).
// The _sg build (-DSUBGROUP_REDUCE, devices with subgroup arithmetic) sums a
// row with subgroupAdd and one barrier instead of a tree of barriers.
#extension GL_EXT_control_flow_attributes : require
#ifdef SUBGROUP_REDUCE
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint DT = 0;
layout(constant_id = 3) const bool HAS_W = false;  // MODE 0, 1: weight given; MODE 3: grad_weight wanted
layout(constant_id = 4) const bool HAS_B = false;  // MODE 0: bias given; MODE 3: grad_bias wanted

#define PUSH_LAYER_NORM
#include "push_constants.h"

TENSOR(0)  // out (0), grad_x (1), partials (2), grad_weight (3)
TENSOR(1)  // x (0-2), partials (3)
TENSOR(2)  // weight (0, 1)
TENSOR(3)  // bias (0), grad_out (1, 2), grad_bias (3)
TENSOR(4)  // mean [rows]
TENSOR(5)  // invstd [rows]

shared REAL red[2 * gl_WorkGroupSize.x];

// Sums of a and b over the workgroup.
void reduce_pair(inout REAL a, inout REAL b) {
  const uint lid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
#ifdef SUBGROUP_REDUCE
  a = subgroupAdd(a);
  b = subgroupAdd(b);
  if (subgroupElect()) {
    red[gl_SubgroupID] = a;
    red[n + gl_SubgroupID] = b;
  }
  barrier();
  a = 0.0;
  b = 0.0;
  for (uint s = 0; s < gl_NumSubgroups; ++s) {  // in order: every run sums alike
    a += red[s];
    b += red[n + s];
  }
  barrier();
  return;
#endif
  red[lid] = a;
  red[n + lid] = b;
  barrier();
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (lid < s) {
      red[lid] += red[lid + s];
      red[n + lid] += red[n + lid + s];
    }
    barrier();
  }
  a = red[0];
  b = red[n];
  barrier();
}

REAL eps() {
#ifdef RUMUS_F64
  return packDouble2x32(uvec2(pc.eps_lo, pc.eps_hi));
#else
  return uintBitsToFloat(pc.eps_lo);
#endif
}

void main() {
  const uint lid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x, d = pc.d;
  if (MODE == 3u) {
    const uint lane = lid % 8u, c = gl_WorkGroupID.x * (n / 8u) + lid / 8u;
    const uint blocks = (pc.rows + pc.block - 1) / pc.block;
    REAL sw = 0.0, sb = 0.0;
    if (c < d) {
      for (uint blk = lane; blk < blocks; blk += 8u) {
        sw += load1(DT, pc.off1 + (2 * blk) * d + c);
        sb += load1(DT, pc.off1 + (2 * blk + 1) * d + c);
      }
    }
    red[lid] = sw;
    red[n + lid] = sb;
    barrier();
    if (lane != 0u || c >= d) return;
    sw = red[lid];
    sb = red[n + lid];
    for (uint l = 1; l < 8u; ++l) {
      sw += red[lid + l];
      sb += red[n + lid + l];
    }
    if (HAS_W) store0(DT, pc.off0 + c, sw);
    if (HAS_B) store3(DT, pc.off3 + c, sb);
    return;
  }
  if (MODE == 2u) {
    const uint c = gl_WorkGroupID.x * n + lid;
    if (c >= d) return;
    const uint blk = gl_WorkGroupID.y, first = blk * pc.block, last = min(pc.rows, first + pc.block);
    REAL sw = 0.0, sb = 0.0;
    // Eight rows' loads in flight: a row at a time, the loop waited on memory at every row.
    uint r = first;
    for (; r + 8u <= last; r += 8u) {
      REAL g[8], xhat[8];
      [[unroll]] for (uint k = 0; k < 8u; ++k) {
        g[k] = load3(DT, pc.off3 + (r + k) * d + c);
        xhat[k] = (load1(DT, pc.off1 + (r + k) * d + c) - load4(DT, pc.off4 + r + k)) * load5(DT, pc.off5 + r + k);
      }
      [[unroll]] for (uint k = 0; k < 8u; ++k) {
        sw += g[k] * xhat[k];
        sb += g[k];
      }
    }
    for (; r < last; ++r) {
      const REAL g = load3(DT, pc.off3 + r * d + c);
      sw += g * (load1(DT, pc.off1 + r * d + c) - load4(DT, pc.off4 + r)) * load5(DT, pc.off5 + r);
      sb += g;
    }
    store0(DT, pc.off0 + (2 * blk) * d + c, sw);
    store0(DT, pc.off0 + (2 * blk + 1) * d + c, sb);
    return;
  }

  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= pc.rows) return;  // uniform per workgroup
  const uint base = row * d;
  if (MODE == 0u) {
    REAL s = 0.0, unused = 0.0;
    for (uint c = lid; c < d; c += n) s += load1(DT, pc.off1 + base + c);
    reduce_pair(s, unused);
    const REAL mu = s / REAL(d);
    REAL q = 0.0;
    for (uint c = lid; c < d; c += n) {
      const REAL t = load1(DT, pc.off1 + base + c) - mu;
      q += t * t;
    }
    reduce_pair(q, unused);
    const REAL rs = REAL(1.0) / sqrt(q / REAL(d) + eps());
    for (uint c = lid; c < d; c += n) {
      REAL y = (load1(DT, pc.off1 + base + c) - mu) * rs;
      if (HAS_W) y *= load2(DT, pc.off2 + c);
      if (HAS_B) y += load3(DT, pc.off3 + c);
      store0(DT, pc.off0 + base + c, y);
    }
    if (lid == 0u) {
      store4(DT, pc.off4 + row, mu);
      store5(DT, pc.off5 + row, rs);
    }
    return;
  }

  // MODE 1
  const REAL mu = load4(DT, pc.off4 + row), rs = load5(DT, pc.off5 + row);
  REAL s1 = 0.0, s2 = 0.0;
  for (uint c = lid; c < d; c += n) {
    const REAL dxh = load3(DT, pc.off3 + base + c) * (HAS_W ? load2(DT, pc.off2 + c) : REAL(1.0));
    s1 += dxh;
    s2 += dxh * (load1(DT, pc.off1 + base + c) - mu);
  }
  reduce_pair(s1, s2);
  const REAL c1 = s1 / REAL(d), c2 = s2 * rs / REAL(d);  // mean(dxhat), mean(dxhat * xhat)
  for (uint c = lid; c < d; c += n) {
    const REAL dxh = load3(DT, pc.off3 + base + c) * (HAS_W ? load2(DT, pc.off2 + c) : REAL(1.0));
    store0(DT, pc.off0 + base + c, (dxh - c1 - (load1(DT, pc.off1 + base + c) - mu) * rs * c2) * rs);
  }
}
