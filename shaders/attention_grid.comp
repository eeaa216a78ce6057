#version 450
// Fused scaled dot-product attention, forward (f32), flash-attention style,
// with a 4 x 4 grid of scores per invocation. A workgroup of 16 x 8
// invocations takes 64 query rows of one (batch, head) and keeps them in
// shared memory; keys and values stream through shared memory 32 rows at a
// time, the next tile fetched into registers while the current one is
// worked. Invocation (ty, tx) scores queries 4 ty + r against keys 4 tx + c,
// so a 16-byte shared read feeds 8 multiply-adds (attention_blocked.comp
// scores one query row per invocation: 3.2), and a tile's barriers and
// shuffles serve four times as many scores per invocation. The weights go
// through shared memory once; the same invocation then accumulates its four
// rows' outputs at 16-byte units tx + 8 n. An online softmax keeps each
// row's running maximum and sum; lse is written for the backward kernels.
// Scores are never stored in global memory. z is the dropout multiplier
// (the same Philox draws as the other kernels and the CPU). Needs subgroups
// of at least 8 lanes with shuffles: the 8 invocations of a row block are
// neighbouring lanes and reduce over it with three xor shuffles.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

// Built once per head width (-DBLOCKED_D): register arrays sized by
// specialisation constants end up in slow memory on some drivers.
const uint ROWS = 64;                  // query rows per workgroup
const uint TR = ROWS / 4, TC = 8;      // invocations down the rows and across the keys
const uint THREADS = TR * TC;
layout(local_size_x = 128) in;
const uint D_MAX = BLOCKED_D;          // >= d and dv: 32 or 64
// d, dv and every offset % 4 == 0: rows are read 16 bytes (4 floats) at a time.
layout(constant_id = 4) const bool ALIGNED = false;

const uint BC = 4 * TC;                // keys per tile
const uint RU = ROWS / 4;              // 16-byte units of a weights row (4 query rows each)
const uint DU = D_MAX / 4;             // 16-byte units per query, key or value row
const uint NC = D_MAX / (4 * TC);      // output units per invocation and row: tx + 8 n
const uint PER = BC * DU / THREADS;    // units of a key or value tile each invocation loads

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

shared vec4 rows_q[ROWS * DU];   // swizzled by key_at()
shared vec4 tile_k[BC * DU];     // swizzled by key_at()
shared vec4 tile_v[BC * DU];     // plain rows
shared vec4 weights[BC * RU];    // P z of the tile, [key][4 query rows], swizzled by weight_at()

#define ATTENTION_BLOCKED_TILES
#define ATTENTION_ROW_SHUFFLES
#include "attention_terms.glsl"

// Unit u of row `row` of the value tile: plain rows, read a row at a time.
uint value_at(uint row, uint u) { return row * DU + u; }
// Query rows [4 b, 4 b + 4) of key j's weights: b xor j / 4, so the
// invocations storing keys 4 tx + c of one row block hit distinct banks.
uint weight_at(uint j, uint b) { return j * RU + (b ^ (j >> 2)); }


void main() {
  const uvec2 block = attention_block(true);
  const uint bh = block.y;
  if (bh >= pc.bh) return;  // whole workgroup: barriers stay uniform
  const uint tid = gl_LocalInvocationID.x, tx = tid % TC, ty = tid / TC;
  const uint first_row = block.x * ROWS, i0 = first_row + 4 * ty;
  const uint d = pc.d, dv = pc.dv;
  const int qbase = Q_ROW(bh, 0u), kbase = K_ROW(bh, 0u), vbase = V_ROW(bh, 0u);
  const uint qk_stride = row_stride(pc.qkv_slots, d), v_stride = row_stride(pc.qkv_slots, dv);

  for (uint e = tid; e < ROWS * DU; e += THREADS) {
    const uint r = e / DU, u = e % DU;
    rows_q[key_at(r, u)] =
        first_row + r < pc.lq ? LOAD_RUN(q_.v, q4_.v, qbase + int((first_row + r) * qk_stride), 4 * u, d) : vec4(0.0);
  }
  float mx[4], sum[4];
  vec4 acc[4 * NC];  // row r, unit n at r * NC + n
  [[unroll]] for (uint r = 0; r < 4; ++r) {
    mx[r] = NEG_INF;
    sum[r] = 0.0;
    [[unroll]] for (uint n = 0; n < NC; ++n) acc[r * NC + n] = vec4(0.0);
  }
  // Causal: keys past the workgroup's last query are masked for every row.
  const uint kend = ATT_CAUSAL ? min(pc.lk, min(first_row + ROWS, pc.lq)) : pc.lk;
  vec4 next_k[PER], next_v[PER];
  FETCH_TILE(next_k, k_.v, k4_.v, kbase, qk_stride, 0u, pc.lk, d)
  FETCH_TILE(next_v, v_.v, v4_.v, vbase, v_stride, 0u, pc.lk, dv)
  for (uint j0 = 0; j0 < kend; j0 += BC) {
    barrier();  // the last tile's products are done with tile_v and weights
    STORE_TILE(tile_k, next_k, key_at)
    STORE_TILE(tile_v, next_v, value_at)
    barrier();
    if (j0 + BC < kend) {
      FETCH_TILE(next_k, k_.v, k4_.v, kbase, qk_stride, j0 + BC, pc.lk, d)
      FETCH_TILE(next_v, v_.v, v4_.v, vbase, v_stride, j0 + BC, pc.lk, dv)
    }
    // Scores of rows i0 + r with keys j0 + 4 tx + c.
    float s[16];  // r * 4 + c
    [[unroll]] for (uint e = 0; e < 16; ++e) s[e] = 0.0;
    // Loops run in unrolled chunks: unrolled whole, the kernel held 220
    // registers and ran 1.2x slower on one GPU (chunks: 180).
    [[dont_unroll]] for (uint u0 = 0; u0 < DU; u0 += 4) [[unroll]] for (uint uu = 0; uu < 4; ++uu) {
      const uint u = u0 + uu;
      vec4 qv[4], kv[4];
      [[unroll]] for (uint r = 0; r < 4; ++r) qv[r] = rows_q[key_at(4 * ty + r, u)];
      [[unroll]] for (uint c = 0; c < 4; ++c) kv[c] = tile_k[key_at(4 * tx + c, u)];
      [[unroll]] for (uint r = 0; r < 4; ++r)
        [[unroll]] for (uint c = 0; c < 4; ++c) s[r * 4 + c] += dot(qv[r], kv[c]);
    }
    // Tiles wholly before the diagonal, inside the keys and without a mask need no per-score test.
    const bool plain = ATT_MASK_KIND == 0u && j0 + BC <= pc.lk && (!ATT_CAUSAL || j0 + BC <= first_row + 1u);
    vec4 w[4];  // key c's weights for the four rows
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      float tile_max = NEG_INF;
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        const float m = plain ? 0.0 : mask_term(bh, i0 + r, j0 + 4 * tx + c);
        s[r * 4 + c] = m == NEG_INF ? NEG_INF : s[r * 4 + c] * pc.scale + m;
        tile_max = max(tile_max, s[r * 4 + c]);
      }
      // Online softmax: what was summed under the old maximum is rescaled.
      const float new_max = max(mx[r], row_max(tile_max));
      const float corr = new_max == NEG_INF ? 1.0 : exp(mx[r] - new_max);
      float part = 0.0;
      const vec4 z = dropout_factors4(bh, i0 + r, j0 + 4 * tx);
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        const float p = s[r * 4 + c] == NEG_INF ? 0.0 : exp(s[r * 4 + c] - new_max);
        part += p;
        w[c][r] = p * z[c];
      }
      sum[r] = sum[r] * corr + part;  // this invocation's keys only; added up at the end
      mx[r] = new_max;
      if (corr != 1.0) [[unroll]] for (uint n = 0; n < NC; ++n) acc[r * NC + n] *= corr;
    }
    [[unroll]] for (uint c = 0; c < 4; ++c) weights[weight_at(4 * tx + c, ty)] = w[c];
    barrier();
    // O += (P z) V: four rows' weights of one key against the key's value units.
    [[dont_unroll]] for (uint j8 = 0; j8 < BC; j8 += 8) [[unroll]] for (uint jj = 0; jj < 8; ++jj) {
      const uint j = j8 + jj;
      const vec4 pw = weights[weight_at(j, ty)];
      [[unroll]] for (uint n = 0; n < NC; ++n) {
        const vec4 vv = tile_v[value_at(j, tx + TC * n)];
        [[unroll]] for (uint r = 0; r < 4; ++r) acc[r * NC + n] += pw[r] * vv;
      }
    }
  }
  [[unroll]] for (uint r = 0; r < 4; ++r) {
    const float total = row_sum(sum[r]);
    const uint i = i0 + r;
    if (i >= pc.lq) continue;
    const float inv = total == 0.0 ? 0.0 : 1.0 / total;  // a fully masked row gives zeros
    const int oo = O_ROW(bh, i);
    [[unroll]] for (uint n = 0; n < NC; ++n) STORE_RUN(o_.v, oo, 4 * (tx + TC * n), dv, acc[r * NC + n] * inv)
    if (tx == 0u) lse_.v[pc.off[4] + int(bh * pc.lq + i)] = total == 0.0 ? NEG_INF : mx[r] + log(total);
  }
}
