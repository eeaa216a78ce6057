#version 450
// Fused scaled dot-product attention in f16 on the matrix units
// (VK_NV_cooperative_matrix), flash-attention style. A workgroup of four
// subgroups takes 64 rows of one (batch, head), 16 per subgroup, held as
// 16 x 16 f16 fragments; the other sequence streams through shared memory BC
// rows at a time. Every product (scores, P V, the gradients) is a 16x16x16
// matrix-unit product accumulating in f32. The row-wise work the matrix units
// cannot do (masks, online softmax, dropout, dS) goes through shared memory:
// a subgroup stores its 16 x BC scores, each row is worked by two lanes, and
// the result is loaded back as an f16 fragment; the output's rows are
// rescaled the same way, stored, scaled by the lanes and loaded back. Scores are never stored in
// global memory: memory stays linear in length.
//   MODE 0: forward, online softmax; writes out (f16) and lse (f32).
//   MODE 1: grad_q = scale * dS K, with dS = P (dP z - D), dP = dO V^T.
//   MODE 2: grad_v = (P z)^T dO, grad_k = scale * dS^T Q, rows = keys.
// D_i = dO_i . O_i; z is the dropout multiplier (the same Philox draws as the
// f32 kernels and the CPU). Needs 16 x 16 x 16 f16 shapes and 32-lane subgroups.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;  // 128: four subgroups of 32
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint D = 64;   // head dims rounded up to a multiple of 16, at most 128
layout(constant_id = 3) const uint BC = 64;  // rows of the streamed sequence per tile: 32 or 64
// d, dv and every offset % 8 == 0: rows are read 16 bytes (8 halves) at a time.
layout(constant_id = 4) const bool ALIGNED = false;

#define PUSH_ATTENTION
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer Q { float16_t v[]; } q_;
layout(set = 0, binding = 1) readonly buffer K { float16_t v[]; } k_;
layout(set = 0, binding = 2) readonly buffer V { float16_t v[]; } v_;
layout(set = 0, binding = 3) buffer O { float16_t v[]; } o_;
layout(set = 0, binding = 4) buffer L { float v[]; } lse_;
TENSOR(5)  // mask: u8 or floating
layout(set = 0, binding = 6) readonly buffer GO { float16_t v[]; } go_;
layout(set = 0, binding = 7) buffer GQ { float16_t v[]; } gq_;
layout(set = 0, binding = 8) buffer GK { float16_t v[]; } gk_;
layout(set = 0, binding = 9) buffer GV { float16_t v[]; } gv_;
// The same bindings read 8 halves at a time.
layout(set = 0, binding = 0) readonly buffer Q8 { uvec4 v[]; } q8_;
layout(set = 0, binding = 1) readonly buffer K8 { uvec4 v[]; } k8_;
layout(set = 0, binding = 2) readonly buffer V8 { uvec4 v[]; } v8_;
layout(set = 0, binding = 3) readonly buffer O8 { uvec4 v[]; } o8_;
layout(set = 0, binding = 6) readonly buffer GO8 { uvec4 v[]; } go8_;

#define F16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define F32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>

const uint LANES = 32, WARPS = 4, ROWS = 64, FR = 16;  // FR: rows per subgroup
const uint KS = D + 8;      // shared row stride in halves: 16-byte aligned, off the bank period
const uint KU = KS / 8;     // the same in 16-byte units
const uint DU = D / 8;      // 16-byte units of a padded row
const uint HALF = BC / 2;   // columns per lane: two lanes share a row
const bool GRAD = MODE != 0u;

// Two streamed tiles (K and V, or Q and dO), each BC x KS; the resident rows
// (64 of one operand at a time, BC >= 32) are staged through the same space.
// Every array is a whole number of 16-byte units (unused ones too): the
// matrix loads and stores assume 16-byte aligned shared addresses.
shared uvec4 tiles[2 * BC * KU];  // 8 halves per element
shared float s_f32[WARPS * FR * BC];                       // each subgroup's scores (S, or S^T in mode 2)
shared float dp_f32[GRAD ? WARPS * FR * BC : 4];           // dP (or dP^T)
shared float16_t p_f16[WARPS * FR * BC];                   // P z (forward, mode 2) or dS (mode 1)
shared float16_t ds_f16[MODE == 2u ? WARPS * FR * BC : 8];  // dS^T
shared float scratch[WARPS * 256];                         // a 16 x 16 f32 fragment per subgroup
shared float col_lse[MODE == 2u ? BC : 4];
shared float col_delta[MODE == 2u ? BC : 4];

#include "attention_terms.glsl"

// Halves [col, col + 8) of row `row` of a [rows, width] f16 matrix at `base`
// (rows `stride` apart; bindings buf8 / buf1), packed; zeros outside the matrix.
#define FETCH8(result, buf8, buf1, base, stride, row, col, rows, width)                        \
  if (ALIGNED) {                                                                               \
    result = (row) < (rows) && (col) < (width) ? buf8[((base) + int((row) * (stride) + (col))) / 8] : uvec4(0); \
  } else {                                                                                     \
    float16_t h_[8];                                                                           \
    [[unroll]] for (uint j_ = 0; j_ < 8; ++j_)                                                 \
      h_[j_] = (row) < (rows) && (col) + j_ < (width) ? buf1[(base) + int((row) * (stride) + (col) + j_)] : float16_t(0.0); \
    result = uvec4(packFloat2x16(f16vec2(h_[0], h_[1])), packFloat2x16(f16vec2(h_[2], h_[3])), \
                   packFloat2x16(f16vec2(h_[4], h_[5])), packFloat2x16(f16vec2(h_[6], h_[7]))); \
  }

// Rows [first, first + count) of a [rows, width] f16 matrix at `base` (rows `stride` apart) into
// tiles[at...] (16-byte units, KU per row); zeros past its end and past `width`.
#define LOAD_ROWS(buf8, buf1, at, base, stride, first, count, rows, width)          \
  for (uint e = gl_LocalInvocationID.x; e < (count) * DU; e += gl_WorkGroupSize.x) { \
    const uint r = e / DU, u = e % DU;                                              \
    uvec4 val;                                                                      \
    FETCH8(val, buf8, buf1, base, stride, (first) + r, 8 * u, rows, width)          \
    tiles[(at) + r * KU + u] = val;                                                 \
  }

// dO_i . O_i over the 16-byte units u = part, part + parts, ... of row i.
float delta_part(uint i, uint part, uint parts, int gobase, int obase) {
  const uint go_stride = row_stride(pc.out_slots, pc.dv);
  float acc = 0.0;
  for (uint u = part; 8 * u < pc.dv; u += parts) {
    uvec4 a, b;
    FETCH8(a, go8_.v, go_.v, gobase, go_stride, i, 8 * u, pc.lq, pc.dv)
    FETCH8(b, o8_.v, o_.v, obase, go_stride, i, 8 * u, pc.lq, pc.dv)
    [[unroll]] for (uint w = 0; w < 4; ++w) acc += dot(unpackHalf2x16(a[w]), unpackHalf2x16(b[w]));
  }
  return acc;
}

// Multiplies row r of the subgroup's fragments by lane (r, *)'s factor f,
// through the scratch fragment: a lane scales the 8 elements of its row it owns.
#define SCALE_ROWS(acc, f)                                                                 \
  [[unroll]] for (uint n = 0; n < D / 16; ++n) {                                           \
    coopMatStoreNV(acc[n], scratch, warp * 256, 16, false);                                \
    subgroupMemoryBarrierShared();                                                         \
    subgroupBarrier();                                                                     \
    [[unroll]] for (uint c = 0; c < 8; ++c) scratch[warp * 256 + rl * 16 + (lane % 2) * 8 + c] *= (f); \
    subgroupMemoryBarrierShared();                                                         \
    subgroupBarrier();                                                                     \
    coopMatLoadNV(acc[n], scratch, warp * 256, 16, false);                                 \
    subgroupBarrier(); /* loaded by every lane before the next store */                    \
  }

// Writes the subgroup's 16 rows of the fragments, columns below `width`, rows
// below `rows`, to an f16 matrix at `base` (rows `stride` apart), through the scratch fragment.
#define STORE_ROWS(dst, acc, base, stride, first, rows, width)                                \
  [[unroll]] for (uint n = 0; n < D / 16; ++n) {                                              \
    coopMatStoreNV(acc[n], scratch, warp * 256, 16, false);                                   \
    subgroupMemoryBarrierShared();                                                            \
    subgroupBarrier();                                                                        \
    for (uint e = lane; e < 256; e += LANES) {                                                \
      const uint r = (first) + e / 16, c = n * 16 + e % 16;                                   \
      if (r < (rows) && c < (width)) dst[(base) + int(r * (stride) + c)] = float16_t(scratch[warp * 256 + e]); \
    }                                                                                         \
    subgroupBarrier();                                                                        \
  }

void main() {
  const uvec2 block = attention_block(MODE != 2u);  // MODE 2 walks key blocks
  const uint bh = block.y;
  if (bh >= pc.bh) return;  // whole workgroup: barriers stay uniform
  const uint warp = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint first_row = block.x * ROWS;  // of this workgroup
  const uint mine = first_row + warp * FR;           // this subgroup's first row
  const uint rl = lane / 2, c0 = (lane % 2) * HALF;  // the lane's row in the subgroup, its first column
  const uint d = pc.d, dv = pc.dv;
  const bool causal = ATT_CAUSAL;
  const uint sbase = warp * FR * BC;  // this subgroup's part of s_f32, dp_f32, p_f16, ds_f16
  const uint B_TILE = BC * KU;        // the second streamed tile, in units
  const int qbase = Q_ROW(bh, 0u), kbase = K_ROW(bh, 0u), vbase = V_ROW(bh, 0u), obase = O_ROW(bh, 0u);
  const int lbase = pc.off[4] + int(bh * pc.lq), gobase = GO_ROW(bh, 0u);
  const uint qk_stride = row_stride(pc.qkv_slots, d), v_stride = row_stride(pc.qkv_slots, dv);
  const uint o_stride = row_stride(pc.out_slots, dv);
  const uint gk_stride = row_stride(pc.grad_slots, d), gv_stride = row_stride(pc.grad_slots, dv);

  if (MODE == 0u || MODE == 1u) {
    const uint i = mine + rl;
    // The subgroup's query rows (and, for grad_q, dO rows) as A fragments.
    F16 qf[D / 16], gof[D / 16];
    LOAD_ROWS(q8_.v, q_.v, 0, qbase, qk_stride, first_row, ROWS, pc.lq, d)
    barrier();
    [[unroll]] for (uint kk = 0; kk < D / 16; ++kk) coopMatLoadNV(qf[kk], tiles, warp * FR * KU + kk * 2, KU, false);
    float lse = NEG_INF, delta = 0.0;
    if (MODE == 1u) {
      barrier();
      LOAD_ROWS(go8_.v, go_.v, 0, gobase, o_stride, first_row, ROWS, pc.lq, dv)
      barrier();
      [[unroll]] for (uint kk = 0; kk < D / 16; ++kk)
        coopMatLoadNV(gof[kk], tiles, warp * FR * KU + kk * 2, KU, false);
      if (i < pc.lq) {
        lse = lse_.v[lbase + int(i)];
        delta = delta_part(i, lane % 2, 2, gobase, obase);
      }
      delta += subgroupShuffleXor(delta, 1u);
    }
    F32 acc[D / 16];
    [[unroll]] for (uint n = 0; n < D / 16; ++n) acc[n] = F32(0.0);
    float mx = NEG_INF, sum = 0.0;
    // Causal: keys past the workgroup's last query are masked for every row.
    const uint kend = causal ? min(pc.lk, min(first_row + ROWS, pc.lq)) : pc.lk;
    for (uint j0 = 0; j0 < kend; j0 += BC) {
      barrier();
      LOAD_ROWS(k8_.v, k_.v, 0, kbase, qk_stride, j0, BC, pc.lk, d)
      LOAD_ROWS(v8_.v, v_.v, B_TILE, vbase, v_stride, j0, BC, pc.lk, dv)
      barrier();
      // S = Q K^T (and dP = dO V^T): K and V rows read column-major are K^T and V^T.
      [[unroll]] for (uint n = 0; n < BC / 16; ++n) {
        F32 s = F32(0.0), dp = F32(0.0);
        [[unroll]] for (uint kk = 0; kk < D / 16; ++kk) {
          F16 kt;
          coopMatLoadNV(kt, tiles, n * 16 * KU + kk * 2, KU, true);
          s = coopMatMulAddNV(qf[kk], kt, s);
          if (MODE == 1u) {
            F16 vt;
            coopMatLoadNV(vt, tiles, B_TILE + n * 16 * KU + kk * 2, KU, true);
            dp = coopMatMulAddNV(gof[kk], vt, dp);
          }
        }
        coopMatStoreNV(s, s_f32, sbase + n * 16, BC, false);
        if (MODE == 1u) coopMatStoreNV(dp, dp_f32, sbase + n * 16, BC, false);
      }
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      const uint row_at = sbase + rl * BC;
      if (MODE == 0u) {
        float tile_max = NEG_INF;
        for (uint c = c0; c < c0 + HALF; ++c) {
          const float m = mask_term(bh, i, j0 + c);
          const float s = m == NEG_INF ? NEG_INF : s_f32[row_at + c] * pc.scale + m;
          s_f32[row_at + c] = s;
          tile_max = max(tile_max, s);
        }
        tile_max = max(tile_max, subgroupShuffleXor(tile_max, 1u));
        // Online softmax: what was summed under the old maximum is rescaled. The
        // maximum moves only when a score passes it by more than 8 (weights
        // stay below e^8, well inside f16): most tiles then skip the rescale.
        const float new_max = tile_max > mx + 8.0 ? tile_max : mx;
        const float corr = new_max == mx ? 1.0 : exp(mx - new_max);
        float part = 0.0;
        for (uint c = c0; c < c0 + HALF; ++c) {
          const float s = s_f32[row_at + c];
          const float p = s == NEG_INF ? 0.0 : exp(s - new_max);
          part += p;
          p_f16[row_at + c] = float16_t(p * (p == 0.0 ? 1.0 : dropout_factor(bh, i, j0 + c)));
        }
        part += subgroupShuffleXor(part, 1u);
        sum = sum * corr + part;
        mx = new_max;
        if (!subgroupAll(corr == 1.0)) SCALE_ROWS(acc, corr)  // once the maxima settle, skipped
        subgroupMemoryBarrierShared();  // P written by the lanes before it is loaded
        subgroupBarrier();
        // O += (P z) V
        [[unroll]] for (uint kk = 0; kk < BC / 16; ++kk) {
          F16 pf;
          coopMatLoadNV(pf, p_f16, sbase + kk * 16, BC, false);
          [[unroll]] for (uint n = 0; n < D / 16; ++n) {
            F16 vf;
            coopMatLoadNV(vf, tiles, B_TILE + kk * 16 * KU + n * 2, KU, false);
            acc[n] = coopMatMulAddNV(pf, vf, acc[n]);
          }
        }
      } else {
        for (uint c = c0; c < c0 + HALF; ++c) {
          const float m = lse == NEG_INF ? NEG_INF : mask_term(bh, i, j0 + c);
          float ds = 0.0;
          if (m != NEG_INF) {
            const float p = exp(s_f32[row_at + c] * pc.scale + m - lse);
            ds = p * (dp_f32[row_at + c] * dropout_factor(bh, i, j0 + c) - delta) * pc.scale;
          }
          p_f16[row_at + c] = float16_t(ds);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        // grad_q += dS K
        [[unroll]] for (uint kk = 0; kk < BC / 16; ++kk) {
          F16 dsf;
          coopMatLoadNV(dsf, p_f16, sbase + kk * 16, BC, false);
          [[unroll]] for (uint n = 0; n < D / 16; ++n) {
            F16 kf;
            coopMatLoadNV(kf, tiles, kk * 16 * KU + n * 2, KU, false);
            acc[n] = coopMatMulAddNV(dsf, kf, acc[n]);
          }
        }
      }
    }
    if (MODE == 0u) {
      const float inv = sum == 0.0 ? 0.0 : 1.0 / sum;  // a fully masked row gives zeros
      SCALE_ROWS(acc, inv)
      STORE_ROWS(o_.v, acc, obase, o_stride, mine, pc.lq, dv)
      if (lane % 2 == 0u && i < pc.lq) lse_.v[lbase + int(i)] = sum == 0.0 ? NEG_INF : mx + log(sum);
    } else {
      STORE_ROWS(gq_.v, acc, GQ_ROW(bh, 0u), gk_stride, mine, pc.lq, d)
    }
    return;
  }

  // MODE 2: the subgroup's 16 key rows; queries and dO stream through shared memory.
  F16 kf[D / 16], vf[D / 16];
  LOAD_ROWS(k8_.v, k_.v, 0, kbase, qk_stride, first_row, ROWS, pc.lk, d)
  barrier();
  [[unroll]] for (uint kk = 0; kk < D / 16; ++kk) coopMatLoadNV(kf[kk], tiles, warp * FR * KU + kk * 2, KU, false);
  barrier();
  LOAD_ROWS(v8_.v, v_.v, 0, vbase, v_stride, first_row, ROWS, pc.lk, dv)
  barrier();
  [[unroll]] for (uint kk = 0; kk < D / 16; ++kk) coopMatLoadNV(vf[kk], tiles, warp * FR * KU + kk * 2, KU, false);
  F32 gk[D / 16], gv[D / 16];
  [[unroll]] for (uint n = 0; n < D / 16; ++n) {
    gk[n] = F32(0.0);
    gv[n] = F32(0.0);
  }
  // Causal: queries before the workgroup's first key see none of its keys.
  const uint qbegin = causal ? min(pc.lq, first_row) / BC * BC : 0u;
  for (uint i0 = qbegin; i0 < pc.lq; i0 += BC) {
    barrier();
    LOAD_ROWS(q8_.v, q_.v, 0, qbase, qk_stride, i0, BC, pc.lq, d)
    LOAD_ROWS(go8_.v, go_.v, B_TILE, gobase, o_stride, i0, BC, pc.lq, dv)
    // D_i for the tile's queries, four invocations (neighbouring lanes) per row.
    for (uint t = gl_LocalInvocationID.x; t < 4 * BC; t += gl_WorkGroupSize.x) {
      const uint i = i0 + t / 4;
      float delta = i < pc.lq ? delta_part(i, t % 4, 4, gobase, obase) : 0.0;
      delta += subgroupShuffleXor(delta, 1u);
      delta += subgroupShuffleXor(delta, 2u);
      if (t % 4 == 0u) {
        col_lse[t / 4] = i < pc.lq ? lse_.v[lbase + int(i)] : NEG_INF;
        col_delta[t / 4] = delta;
      }
    }
    barrier();
    // S^T = K Q^T, dP^T = V dO^T: Q and dO rows read column-major.
    [[unroll]] for (uint n = 0; n < BC / 16; ++n) {
      F32 st = F32(0.0), dpt = F32(0.0);
      [[unroll]] for (uint kk = 0; kk < D / 16; ++kk) {
        F16 qt, got;
        coopMatLoadNV(qt, tiles, n * 16 * KU + kk * 2, KU, true);
        coopMatLoadNV(got, tiles, B_TILE + n * 16 * KU + kk * 2, KU, true);
        st = coopMatMulAddNV(kf[kk], qt, st);
        dpt = coopMatMulAddNV(vf[kk], got, dpt);
      }
      coopMatStoreNV(st, s_f32, sbase + n * 16, BC, false);
      coopMatStoreNV(dpt, dp_f32, sbase + n * 16, BC, false);
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // A lane owns query columns and walks the subgroup's keys: consecutive
    // weights of one query row share Philox draws.
    for (uint c = lane; c < BC; c += LANES) {
      const uint i = i0 + c;
      const float lse = col_lse[c], delta = col_delta[c];
      for (uint r = 0; r < FR; ++r) {
        const uint at = sbase + r * BC + c;
        const float m = lse == NEG_INF ? NEG_INF : mask_term(bh, i, mine + r);
        float pz = 0.0, ds = 0.0;
        if (m != NEG_INF) {
          const float p = exp(s_f32[at] * pc.scale + m - lse), z = dropout_factor(bh, i, mine + r);
          pz = p * z;
          ds = p * (dp_f32[at] * z - delta) * pc.scale;
        }
        p_f16[at] = float16_t(pz);
        ds_f16[at] = float16_t(ds);
      }
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    // grad_v += (P z)^T dO, grad_k += dS^T Q
    [[unroll]] for (uint kk = 0; kk < BC / 16; ++kk) {
      F16 pf, dsf;
      coopMatLoadNV(pf, p_f16, sbase + kk * 16, BC, false);
      coopMatLoadNV(dsf, ds_f16, sbase + kk * 16, BC, false);
      [[unroll]] for (uint n = 0; n < D / 16; ++n) {
        F16 gof, qf;
        coopMatLoadNV(gof, tiles, B_TILE + kk * 16 * KU + n * 2, KU, false);
        coopMatLoadNV(qf, tiles, kk * 16 * KU + n * 2, KU, false);
        gv[n] = coopMatMulAddNV(pf, gof, gv[n]);
        gk[n] = coopMatMulAddNV(dsf, qf, gk[n]);
      }
    }
  }
  STORE_ROWS(gv_.v, gv, GV_ROW(bh, 0u), gv_stride, mine, pc.lk, dv)
  STORE_ROWS(gk_.v, gk, GK_ROW(bh, 0u), gk_stride, mine, pc.lk, d)
}
