#version 450
// Training-mode batch normalisation of a contiguous x viewed as [n, c, hw]
// (src/backend/batch_norm.hpp). A channel's m = n * hw values are split into
// pc.parts chunks of pc.chunk, a workgroup each, so that few channels of many
// values still fill the device; a second launch merges each channel's chunks
// in order (the same result on every run: no atomics).
//   MODE 0: statistics of a chunk -> partials [c, parts, 2]: the mean
//           relative to the channel's first value, and the sum of squared
//           deviations (M2). Each invocation sums its values shifted by that
//           first value, and the workgroup merges the invocations' (count,
//           mean, M2) with Chan's formula: no E[x^2] - E[x]^2 cancellation.
//   MODE 1: one invocation per channel merges its chunks the same way into
//           mean and invstd and, with HAS_B (here: running statistics
//           given), updates running_mean and running_var (unbiased variance).
//   MODE 2: out = (x - mean) * invstd * weight + bias, per element.
//   MODE 3: sums of g and of g * (x - mean) over a chunk -> partials [c, parts, 2].
//   MODE 4: one invocation per channel adds its chunks in order: sum_dy and
//           sum_dy_xhat (the latter times invstd).
//   MODE 5: grad_x = w * invstd * (g - sum_dy / m - xhat * sum_dy_xhat / m), per element.
// DT is the dtype of x, out, grad_out and grad_x; DT_C that of the [c]
// operands and the partials: f32 for 16-bit x (PyTorch's mixed batch norm
// under autocast: 16-bit activations, f32 parameters and statistics), else DT.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint MODE = 0;
layout(constant_id = 1) const uint DT = 0;
layout(constant_id = 2) const bool HAS_W = false;  // MODE 2, 5: weight given
layout(constant_id = 3) const bool HAS_B = false;  // MODE 2: bias given; MODE 1: running statistics given
layout(constant_id = 4) const uint DT_C = 0;
// MODE 2, 5: values per invocation, consecutive and of one channel (hw % VEC
// == 0), their loads issued together: more bytes in flight per invocation.
layout(constant_id = 5) const uint VEC = 1;

#define PUSH_BATCH_NORM
#include "push_constants.h"

// MODE 0, 3: 0 partials, 1 x, 2 grad_out (3), 3 mean (3)
// MODE 1:    0 partials, 1 x, 2 mean, 3 invstd, 4 running_mean, 5 running_var
// MODE 2:    0 out, 1 x, 2 mean, 3 invstd, 4 weight, 5 bias
// MODE 4:    0 partials, 1 sum_dy, 2 sum_dy_xhat, 3 invstd
// MODE 5:    0 grad_x, 1 x, 2 grad_out, 3 mean, 4 invstd, 5 weight, 6 sum_dy, 7 sum_dy_xhat
TENSOR(0)
TENSOR(1)
TENSOR(2)
TENSOR(3)
TENSOR(4)
TENSOR(5)
TENSOR(6)
TENSOR(7)

shared REAL red_n[gl_WorkGroupSize.x], red_a[gl_WorkGroupSize.x], red_b[gl_WorkGroupSize.x];

REAL scalar_param(uint lo, uint hi) {
#ifdef RUMUS_F64
  return packDouble2x32(uvec2(lo, hi));
#else
  return uintBitsToFloat(lo);
#endif
}

uint at(uint operand, uint i) { return pc.off[operand] + i; }

// Where value j (< m) of channel ch lies in x.
uint x_index(uint ch, uint j) {
  const uint i = j / pc.hw;
  return (i * pc.c + ch) * pc.hw + (j - i * pc.hw);
}

// Values in chunk p of a channel.
REAL chunk_count(uint p, uint m) { return REAL(min(m, (p + 1u) * pc.chunk) - p * pc.chunk); }

void main() {
  const uint lid = gl_LocalInvocationID.x, local = gl_WorkGroupSize.x;
  const uint m = pc.n * pc.hw;

  if (MODE == 0u || MODE == 3u) {
    const uint ch = gl_WorkGroupID.y, part = gl_WorkGroupID.x;
    const uint first = part * pc.chunk, last = min(m, first + pc.chunk);
    REAL cnt = 0.0, a = 0.0, b = 0.0;
    if (MODE == 0u) {
      const REAL shift = load1(DT, at(1, ch * pc.hw));
      for (uint j = first + lid; j < last; j += local) {
        const REAL d = load1(DT, at(1, x_index(ch, j))) - shift;
        cnt += 1.0;
        a += d;
        b += d * d;
      }
      if (cnt > 0.0) {  // to (mean, M2), both about the shift
        a /= cnt;
        b = max(b - a * a * cnt, REAL(0.0));
      }
    } else {
      const REAL mu = load3(DT_C, at(3, ch));
      for (uint j = first + lid; j < last; j += local) {
        const uint e = x_index(ch, j);
        const REAL g = load2(DT, at(2, e));
        a += g;
        b += g * (load1(DT, at(1, e)) - mu);
      }
    }
    red_n[lid] = cnt;
    red_a[lid] = a;
    red_b[lid] = b;
    barrier();
    for (uint s = local / 2u; s > 0u; s >>= 1) {
      if (lid < s) {
        if (MODE == 0u) {
          const REAL na = red_n[lid], nb = red_n[lid + s];
          if (nb > 0.0) {
            const REAL nn = na + nb, delta = red_a[lid + s] - red_a[lid];
            red_a[lid] += delta * (nb / nn);
            red_b[lid] += red_b[lid + s] + delta * delta * (na * nb / nn);
            red_n[lid] = nn;
          }
        } else {
          red_a[lid] += red_a[lid + s];
          red_b[lid] += red_b[lid + s];
        }
      }
      barrier();
    }
    if (lid == 0u) {
      store0(DT_C, at(0, (ch * pc.parts + part) * 2u), red_a[0]);
      store0(DT_C, at(0, (ch * pc.parts + part) * 2u + 1u), red_b[0]);
    }
    return;
  }

  if (MODE == 1u || MODE == 4u) {
    const uint ch = gl_GlobalInvocationID.x;
    if (ch >= pc.c) return;
    REAL cnt = 0.0, a = 0.0, b = 0.0;
    for (uint p = 0u; p < pc.parts; ++p) {
      const REAL pa = load0(DT_C, at(0, (ch * pc.parts + p) * 2u)),
                 pb = load0(DT_C, at(0, (ch * pc.parts + p) * 2u + 1u));
      if (MODE == 1u) {
        const REAL nb = chunk_count(p, m), nn = cnt + nb, delta = pa - a;
        a += delta * (nb / nn);
        b += pb + delta * delta * (cnt * nb / nn);
        cnt = nn;
      } else {
        a += pa;
        b += pb;
      }
    }
    if (MODE == 4u) {
      store1(DT_C, at(1, ch), a);
      store2(DT_C, at(2, ch), b * load3(DT_C, at(3, ch)));
      return;
    }
    const REAL mean = load1(DT, at(1, ch * pc.hw)) + a, var = b / REAL(m);
    store2(DT_C, at(2, ch), mean);
    store3(DT_C, at(3, ch), REAL(1.0) / sqrt(var + scalar_param(pc.eps_lo, pc.eps_hi)));
    if (HAS_B) {
      const REAL mom = scalar_param(pc.momentum_lo, pc.momentum_hi);
      store4(DT_C, at(4, ch), (REAL(1.0) - mom) * load4(DT_C, at(4, ch)) + mom * mean);
      store5(DT_C, at(5, ch), (REAL(1.0) - mom) * load5(DT_C, at(5, ch)) + mom * (b / REAL(m - 1u)));
    }
    return;
  }

  const uint total = m * pc.c, step = gl_NumWorkGroups.x * local;
  for (uint e0 = gl_GlobalInvocationID.x * VEC; e0 < total; e0 += step * VEC) {
    const uint ch = (e0 / pc.hw) % pc.c;
    REAL x[VEC];
    [[unroll]] for (uint j = 0; j < VEC; ++j) x[j] = load1(DT, at(1, e0 + j));
    if (MODE == 2u) {
      const REAL mu = load2(DT_C, at(2, ch)), is = load3(DT_C, at(3, ch));
      const REAL w = HAS_W ? load4(DT_C, at(4, ch)) : REAL(1), b = HAS_B ? load5(DT_C, at(5, ch)) : REAL(0);
      [[unroll]] for (uint j = 0; j < VEC; ++j) {
        REAL y = (x[j] - mu) * is;
        if (HAS_W) y *= w;
        if (HAS_B) y += b;
        store0(DT, at(0, e0 + j), y);
      }
    } else {  // MODE 5
      REAL g[VEC];
      [[unroll]] for (uint j = 0; j < VEC; ++j) g[j] = load2(DT, at(2, e0 + j));
      const REAL is = load4(DT_C, at(4, ch)), k = HAS_W ? is * load5(DT_C, at(5, ch)) : is, mu = load3(DT_C, at(3, ch));
      const REAL sum_dy = load6(DT_C, at(6, ch)), sum_dy_xhat = load7(DT_C, at(7, ch));
      [[unroll]] for (uint j = 0; j < VEC; ++j) {
        const REAL xhat = (x[j] - mu) * is;
        store0(DT, at(0, e0 + j), k * (g[j] - (sum_dy + xhat * sum_dy_xhat) / REAL(m)));
      }
    }
  }
}
