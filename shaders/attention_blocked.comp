#version 450
// Fused scaled dot-product attention, forward (f32), with register blocking,
// flash-attention style. A workgroup of 128 invocations takes 16 query rows
// of one (batch, head) and keeps them in shared memory; keys and values
// stream through shared memory 32 rows at a time, the next tile fetched into
// registers while the current one is worked. Invocation (ty, tx), ty < 16,
// tx < 8, computes the scores of row ty with keys 4 tx + c, so each value
// read from shared memory feeds several products; the weights go back
// through shared memory once, and the invocation accumulates the 16-byte
// runs tx + 8 n of its row's output. An online softmax keeps the running
// maximum and sum; lse is written for the backward kernels
// (attention_tiled.comp). Scores are never stored in global memory.
// z is the dropout multiplier (the same Philox draws as the other kernels
// and the CPU): the four keys of an invocation share one draw. Needs
// subgroups of at least 8 with shuffles: the 8 invocations of a row are
// neighbouring lanes and reduce over it with three xor shuffles.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

layout(local_size_x = 128) in;
// Built once per width (-DBLOCKED_D): register arrays sized by specialisation
// constants end up in slow memory on some drivers.
const uint D_MAX = BLOCKED_D;  // >= d and dv: 32 or 64
// d, dv and every offset % 4 == 0: rows are read 16 bytes (4 floats) at a time.
layout(constant_id = 4) const bool ALIGNED = false;

const uint ROWS = 16;             // query rows per workgroup, one per 8 invocations
const uint BC = 32;               // keys per tile: 4 per invocation
const uint DU = D_MAX / 4;        // 16-byte units per row
const uint NC = D_MAX / 32;       // output runs per invocation: units tx + 8 n
const uint PER = BC * DU / 128u;  // 16-byte units of a key or value tile each invocation loads

#define PUSH_ATTENTION
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer Q { float v[]; } q_;
layout(set = 0, binding = 1) readonly buffer K { float v[]; } k_;
layout(set = 0, binding = 2) readonly buffer V { float v[]; } v_;
layout(set = 0, binding = 3) writeonly buffer O { float v[]; } o_;
layout(set = 0, binding = 4) writeonly buffer L { float v[]; } lse_;
TENSOR(5)  // mask: u8 or floating
// The same bindings read 4 floats at a time.
layout(set = 0, binding = 0) readonly buffer Q4 { vec4 v[]; } q4_;
layout(set = 0, binding = 1) readonly buffer K4 { vec4 v[]; } k4_;
layout(set = 0, binding = 2) readonly buffer V4 { vec4 v[]; } v4_;

shared vec4 rows_q[ROWS * DU];
shared vec4 tile_k[BC * DU];
shared vec4 tile_v[BC * DU];
shared vec4 weights[ROWS * BC / 4];  // P z of the tile, [ROWS][BC]

#define ATTENTION_BLOCKED_TILES
#define ATTENTION_ROW_SHUFFLES
#include "attention_terms.glsl"


void main() {
  const uvec2 block = attention_block(true);
  const uint bh = block.y;
  if (bh >= pc.bh) return;  // whole workgroup: barriers stay uniform
  const uint tx = gl_LocalInvocationID.x % 8u, ty = gl_LocalInvocationID.x / 8u;
  const uint first_row = block.x * ROWS, i = first_row + ty;
  const uint d = pc.d, dv = pc.dv;
  const int qbase = Q_ROW(bh, 0u), kbase = K_ROW(bh, 0u), vbase = V_ROW(bh, 0u);
  const uint qk_stride = row_stride(pc.qkv_slots, d), v_stride = row_stride(pc.qkv_slots, dv);

  for (uint e = gl_LocalInvocationID.x; e < ROWS * DU; e += 128u) {
    const uint r = e / DU, u = e % DU;
    rows_q[e] = first_row + r < pc.lq ? LOAD_RUN(q_.v, q4_.v, qbase + int((first_row + r) * qk_stride), 4 * u, d) : vec4(0.0);
  }
  float mx = NEG_INF, sum = 0.0;
  vec4 acc[NC];
  [[unroll]] for (uint n = 0; n < NC; ++n) acc[n] = vec4(0.0);
  // Causal: keys past the workgroup's last query are masked for every row.
  const uint kend = ATT_CAUSAL ? min(pc.lk, min(first_row + ROWS, pc.lq)) : pc.lk;
  vec4 next_k[PER], next_v[PER];
  FETCH_TILE(next_k, k_.v, k4_.v, kbase, qk_stride, 0u, pc.lk, d)
  FETCH_TILE(next_v, v_.v, v4_.v, vbase, v_stride, 0u, pc.lk, dv)
  for (uint j0 = 0; j0 < kend; j0 += BC) {
    barrier();
    STORE_TILE(tile_k, next_k, key_at)
    STORE_TILE(tile_v, next_v, key_at)
    barrier();
    if (j0 + BC < kend) {
      FETCH_TILE(next_k, k_.v, k4_.v, kbase, qk_stride, j0 + BC, pc.lk, d)
      FETCH_TILE(next_v, v_.v, v4_.v, vbase, v_stride, j0 + BC, pc.lk, dv)
    }
    // Scores of row i with keys j0 + 4 tx + c.
    float s[4] = float[4](0.0, 0.0, 0.0, 0.0);
    [[unroll]] for (uint u = 0; u < DU; ++u) {
      const vec4 qv = rows_q[ty * DU + u];
      [[unroll]] for (uint c = 0; c < 4; ++c) s[c] += dot(qv, tile_k[key_at(4 * tx + c, u)]);
    }
    float tile_max = NEG_INF;
    // Tiles wholly before the diagonal, inside the keys and without a mask need no per-score test.
    const bool plain = ATT_MASK_KIND == 0u && j0 + BC <= pc.lk && (!ATT_CAUSAL || j0 + BC <= first_row + 1u);
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const float m = plain ? 0.0 : mask_term(bh, i, j0 + 4 * tx + c);
      s[c] = m == NEG_INF ? NEG_INF : s[c] * pc.scale + m;
      tile_max = max(tile_max, s[c]);
    }
    // Online softmax: what was summed under the old maximum is rescaled.
    const float new_max = max(mx, row_max(tile_max));
    const float corr = new_max == NEG_INF ? 1.0 : exp(mx - new_max);
    vec4 w;
    float part = 0.0;
    const vec4 z = dropout_factors4(bh, i, j0 + 4 * tx);
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      const float p = s[c] == NEG_INF ? 0.0 : exp(s[c] - new_max);
      part += p;
      w[c] = p * z[c];
    }
    sum = sum * corr + part;  // this invocation's keys only; added up at the end
    mx = new_max;
    if (corr != 1.0) [[unroll]] for (uint n = 0; n < NC; ++n) acc[n] *= corr;
    weights[ty * (BC / 4) + tx] = w;
    barrier();
    // O += (P z) V: the row's weights, 4 keys at a time.
    [[unroll]] for (uint k4 = 0; k4 < BC / 4; ++k4) {
      const vec4 wr = weights[ty * (BC / 4) + k4];
      [[unroll]] for (uint c = 0; c < 4; ++c)
        [[unroll]] for (uint n = 0; n < NC; ++n) acc[n] += wr[c] * tile_v[key_at(4 * k4 + c, tx + 8 * n)];
    }
  }
  const float total = row_sum(sum);
  if (i >= pc.lq) return;
  const float inv = total == 0.0 ? 0.0 : 1.0 / total;  // a fully masked row gives zeros
  const int oo = O_ROW(bh, i);
  [[unroll]] for (uint n = 0; n < NC; ++n) STORE_RUN(o_.v, oo, 4 * (tx + 8 * n), dv, acc[n] * inv)
  if (tx == 0u) lse_.v[pc.off[4] + int(bh * pc.lq + i)] = total == 0.0 ? NEG_INF : mx + log(total);
}
