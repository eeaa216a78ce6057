#version 450
// Fused scaled dot-product attention, backward (f32), with register
// blocking, flash-attention-2 style: one pass over the score matrix gives all
// three gradients. A workgroup of 128 invocations keeps 32 key and value rows
// of one (batch, head) in shared memory; queries and dO stream through shared
// memory 32 rows at a time, the next tile fetched into registers while the
// current one is worked. Scores are recomputed, never stored in global memory.
// Per tile:
//   Scores: invocation (a, b), a < 8, b < 16, takes keys 4a + c and queries
//   2b + e: S = Q K^T and dP = dO V^T from 16-byte shared loads, each load
//   feeding several products. Key tiles xor their units with row / 4 and
//   query tiles with row / 2, so the rows a subgroup reads at once hit
//   different banks. P z and dS = P (dP z - D) scale go to shared memory as
//   [query][key].
//   grad_k += dS^T Q and grad_v += (P z)^T dO: invocation (g, u) keeps keys
//   4g + c at 16-byte column unit u in registers.
//   grad_q += dS K: invocation (g, u) sums the workgroup's keys for queries
//   4g + c at unit u and adds that into grad_q with float atomics (grad_q is
//   zeroed first); workgroups of other keys add theirs in any order.
// At width 64 every invocation takes both sums, at 32 half take each.
// D_i = dO_i . O_i; z is the dropout multiplier (the same Philox draws as the
// other kernels and the CPU). Built once per width (-DBLOCKED_D), as
// attention_blocked.comp, whose forward writes the lse read here.
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_atomic_float : require
#include "common.glsl"

layout(local_size_x = 128) in;
const uint D_MAX = BLOCKED_D;  // >= d and dv: 32 or 64
// d, dv and every offset % 4 == 0: rows are read 16 bytes (4 floats) at a time.
layout(constant_id = 4) const bool ALIGNED = false;

const uint R = 32;               // key rows per workgroup
const uint T = 32;               // query rows per tile
const uint DU = D_MAX / 4;       // 16-byte units per row
const uint PER = T * DU / 128u;  // units of a 32-row tile each invocation loads
const uint SUMS = 8u * DU;       // invocations per sum: 8 groups of 4 rows x DU units

#define PUSH_ATTENTION
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer Q { float v[]; } q_;
layout(set = 0, binding = 1) readonly buffer K { float v[]; } k_;
layout(set = 0, binding = 2) readonly buffer V { float v[]; } v_;
layout(set = 0, binding = 3) readonly buffer O { float v[]; } o_;
layout(set = 0, binding = 4) readonly buffer L { float v[]; } lse_;
TENSOR(5)  // mask: u8 or floating
layout(set = 0, binding = 6) readonly buffer GO { float v[]; } go_;
layout(set = 0, binding = 7) buffer GQ { float v[]; } gq_;
layout(set = 0, binding = 8) writeonly buffer GK { float v[]; } gk_;
layout(set = 0, binding = 9) writeonly buffer GV { float v[]; } gv_;
// The same bindings read 4 floats at a time.
layout(set = 0, binding = 0) readonly buffer Q4 { vec4 v[]; } q4_;
layout(set = 0, binding = 1) readonly buffer K4 { vec4 v[]; } k4_;
layout(set = 0, binding = 2) readonly buffer V4 { vec4 v[]; } v4_;
layout(set = 0, binding = 3) readonly buffer O4 { vec4 v[]; } o4_;
layout(set = 0, binding = 6) readonly buffer GO4 { vec4 v[]; } go4_;

shared vec4 tile_k[R * DU];
shared vec4 tile_v[R * DU];
shared vec4 tile_q[T * DU];
shared vec4 tile_go[T * DU];
shared vec4 w_ds[T * R / 4];  // dS of the tile, [query][key]
shared vec4 w_pz[T * R / 4];  // P z, the same layout
shared float query_lse[T];
shared vec4 query_delta[T];   // D of the tile's queries, in 4 parts

#define ATTENTION_ROW_DELTA
#define ATTENTION_BLOCKED_TILES
#include "attention_terms.glsl"

// This invocation's share of the lse and D of query rows [first, first + 32):
// row tid / 4, a quarter of its columns (whole 16-byte units).
void fetch_query_terms(uint bh, uint first, out float lse, out float part) {
  const uint tid = gl_LocalInvocationID.x, i = first + tid / 4u, span = (pc.dv + 15u) / 16u * 4u;
  const uint c0 = min((tid % 4u) * span, pc.dv), c1 = min(c0 + span, pc.dv);
  part = i < pc.lq ? row_delta(bh, i, c0, c1) : 0.0;
  lse = i < pc.lq ? lse_.v[pc.off[4] + int(bh * pc.lq + i)] : NEG_INF;
}

void main() {
  const uvec2 block = attention_block(false);
  const uint bh = block.y;
  if (bh >= pc.bh) return;  // whole workgroup: barriers stay uniform
  const uint tid = gl_LocalInvocationID.x;
  const uint d = pc.d, dv = pc.dv;
  const uint key0 = block.x * R;
  const int qbase = Q_ROW(bh, 0u), kbase = K_ROW(bh, 0u), vbase = V_ROW(bh, 0u), gobase = GO_ROW(bh, 0u);
  const int gqbase = GQ_ROW(bh, 0u);
  const uint qk_stride = row_stride(pc.qkv_slots, d), v_stride = row_stride(pc.qkv_slots, dv);
  const uint go_stride = row_stride(pc.out_slots, dv), gq_stride = row_stride(pc.grad_slots, d);

  {
    vec4 rk[PER], rv[PER];
    FETCH_TILE(rk, k_.v, k4_.v, kbase, qk_stride, key0, pc.lk, d)
    FETCH_TILE(rv, v_.v, v4_.v, vbase, v_stride, key0, pc.lk, dv)
    STORE_TILE(tile_k, rk, key_at)
    STORE_TILE(tile_v, rv, key_at)
  }

  // Causal: the first query that sees the workgroup's first key.
  const uint begin = ATT_CAUSAL ? min(key0, pc.lq) : 0u;
  vec4 next_q[PER], next_go[PER];
  float next_lse, next_part;
  FETCH_TILE(next_q, q_.v, q4_.v, qbase, qk_stride, begin, pc.lq, d)
  FETCH_TILE(next_go, go_.v, go4_.v, gobase, go_stride, begin, pc.lq, dv)
  fetch_query_terms(bh, begin, next_lse, next_part);

  vec4 acc_k[4], acc_v[4];  // grad_k and grad_v of keys 4g + c, unit u
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    acc_k[c] = vec4(0.0);
    acc_v[c] = vec4(0.0);
  }
  const uint a = tid % 8u, b = tid / 8u;  // scores: keys 4a + c, queries 2b + e
  const uint g = tid / DU, u = tid % DU;  // grad_k, grad_v: keys 4g + c at unit u (tid < SUMS)
  const uint t2 = (tid + SUMS) % 128u, g2 = t2 / DU, u2 = t2 % DU;  // grad_q: queries 4 g2 + c at u2 (t2 < SUMS)
  for (uint t0 = begin; t0 < pc.lq; t0 += T) {
    barrier();
    STORE_TILE(tile_q, next_q, query_at)
    STORE_TILE(tile_go, next_go, query_at)
    query_delta[tid / 4u][tid % 4u] = next_part;
    if (tid % 4u == 0u) query_lse[tid / 4u] = next_lse;
    barrier();
    if (t0 + T < pc.lq) {
      FETCH_TILE(next_q, q_.v, q4_.v, qbase, qk_stride, t0 + T, pc.lq, d)
      FETCH_TILE(next_go, go_.v, go4_.v, gobase, go_stride, t0 + T, pc.lq, dv)
      fetch_query_terms(bh, t0 + T, next_lse, next_part);
    }
    // S and dP of queries 2b + e with keys 4a + c, at [4e + c].
    float s[8], dp[8];
    [[unroll]] for (uint x = 0; x < 8; ++x) {
      s[x] = 0.0;
      dp[x] = 0.0;
    }
    // Loops run in unrolled chunks: unrolled whole, the kernel held 234
    // registers and ran 11 % slower on one GPU (chunks: 183).
    [[dont_unroll]] for (uint v0 = 0; v0 < DU; v0 += 4) [[unroll]] for (uint vv = 0; vv < 4; ++vv) {
      const uint v = v0 + vv;
      vec4 qr[2], gor[2];
      [[unroll]] for (uint e = 0; e < 2; ++e) {
        qr[e] = tile_q[query_at(2 * b + e, v)];
        gor[e] = tile_go[query_at(2 * b + e, v)];
      }
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        const vec4 kr = tile_k[key_at(4 * a + c, v)], vr = tile_v[key_at(4 * a + c, v)];
        [[unroll]] for (uint e = 0; e < 2; ++e) {
          s[4 * e + c] += dot(qr[e], kr);
          dp[4 * e + c] += dot(gor[e], vr);
        }
      }
    }
    // Tiles wholly before the diagonal, inside both lengths and without a mask need no per-score test.
    const bool plain =
        ATT_MASK_KIND == 0u && key0 + R <= pc.lk && t0 + T <= pc.lq && (!ATT_CAUSAL || key0 + R <= t0 + 1u);
    [[unroll]] for (uint e = 0; e < 2; ++e) {
      const uint row = 2 * b + e, i = t0 + row;
      const float lse = query_lse[row], delta = dot(query_delta[row], vec4(1.0));
      vec4 ds, pz;
      const vec4 zs = dropout_factors4(bh, i, key0 + 4 * a);
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        const uint j = key0 + 4 * a + c;
        const float m = plain ? 0.0 : mask_term(bh, i, j);
        const float p = m == NEG_INF || lse == NEG_INF ? 0.0 : exp(s[4 * e + c] * pc.scale + m - lse);
        const float z = p == 0.0 ? 0.0 : zs[c];
        ds[c] = p * (dp[4 * e + c] * z - delta) * pc.scale;
        pz[c] = p * z;
      }
      w_ds[row * (R / 4) + a] = ds;
      w_pz[row * (R / 4) + a] = pz;
    }
    barrier();
    if (tid < SUMS) {
      [[dont_unroll]] for (uint r0 = 0; r0 < T; r0 += 4) [[unroll]] for (uint rr = 0; rr < 4; ++rr) {
        const uint r = r0 + rr;
        const vec4 w = w_ds[r * (R / 4) + g], wp = w_pz[r * (R / 4) + g];
        const vec4 x = tile_q[query_at(r, u)], y = tile_go[query_at(r, u)];
        [[unroll]] for (uint c = 0; c < 4; ++c) {
          acc_k[c] += w[c] * x;
          acc_v[c] += wp[c] * y;
        }
      }
    }
    if (t2 < SUMS) {
      vec4 dq[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
      [[dont_unroll]] for (uint kg0 = 0; kg0 < R / 4; kg0 += 2) [[unroll]] for (uint kgg = 0; kgg < 2; ++kgg) {
        const uint kg = kg0 + kgg;
        vec4 w[4];
        [[unroll]] for (uint c = 0; c < 4; ++c) w[c] = w_ds[(4 * g2 + c) * (R / 4) + kg];
        [[unroll]] for (uint k = 0; k < 4; ++k) {
          const vec4 kr = tile_k[key_at(4 * kg + k, u2)];
          [[unroll]] for (uint c = 0; c < 4; ++c) dq[c] += w[c][k] * kr;
        }
      }
      [[unroll]] for (uint c = 0; c < 4; ++c) {
        const uint i = t0 + 4 * g2 + c;
        if (i >= pc.lq) break;
        const int at = gqbase + int(i * gq_stride + 4 * u2);
        [[unroll]] for (uint w = 0; w < 4; ++w)
          if (4 * u2 + w < d) atomicAdd(gq_.v[at + int(w)], dq[c][w]);
      }
    }
  }
  if (tid >= SUMS) return;
  [[unroll]] for (uint c = 0; c < 4; ++c) {
    const uint j = key0 + 4 * g + c;
    if (j >= pc.lk) break;
    STORE_RUN(gk_.v, GK_ROW(bh, j), 4 * u, d, acc_k[c])
    STORE_RUN(gv_.v, GV_ROW(bh, j), 4 * u, dv, acc_v[c])
  }
}
