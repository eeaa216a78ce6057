#version 450
// Fused scaled dot-product attention (f32), flash-attention style: a
// workgroup takes ROWS consecutive rows of one (batch, head); each invocation
// owns one row and keeps it, and its accumulators, in registers. The other
// sequence streams through shared memory TILE rows at a time, so each K/V (or
// Q/dO) row is read from global memory once per workgroup rather than once per
// row. Scores are recomputed, never stored: memory stays linear in length.
//   MODE 0: forward with an online softmax; writes lse.
//   MODE 1: grad_q[i] = scale * sum_j P_ij (dP_ij z_ij - D_i) k_j.
//   MODE 2: grad_v[j] = sum_i P_ij z_ij dO_i, grad_k[j] = scale * sum_i dS_ij q_i.
// D_i = dO_i . O_i; z is the dropout multiplier (Philox, as attention.comp and
// the CPU kernel). Head dims up to D_MAX; larger ones use attention.comp.
//
// Built twice: with RUMUS_QUAD (attention_tiled_quad), the four invocations
// of a subgroup quad share a row, each holding every fourth run of 4 columns,
// and add their partial dot products with two quad swaps. Four times the invocations
// and a quarter of the registers each: at long sequences one invocation per
// row leaves most of a large GPU idle.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

#ifdef RUMUS_QUAD
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_quad : require
const uint LANES = 4;
// Which row of the workgroup an invocation takes, and which of its columns.
uint row_slot() { return gl_SubgroupID * (gl_SubgroupSize / 4) + gl_SubgroupInvocationID / 4; }
uint row_lane() { return gl_SubgroupInvocationID % 4; }
// The sum over the row's lanes, the same bits in each (addition commutes).
float row_sum(float x) {
  x += subgroupQuadSwapHorizontal(x);
  return x + subgroupQuadSwapVertical(x);
}
#else
const uint LANES = 1;
uint row_slot() { return gl_LocalInvocationID.x; }
uint row_lane() { return 0; }
float row_sum(float x) { return x; }
#endif

layout(local_size_x_id = 0) in;  // rows per workgroup * LANES
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const uint D_MAX = 64;  // >= d and dv: 16, 32, 64 or 128
layout(constant_id = 3) const uint TILE = 32;   // rows of the streamed sequence per shared-memory tile
// d, dv and every offset % 4 == 0: rows are read 16 bytes (4 floats) at a time.
layout(constant_id = 4) const bool ALIGNED = false;
const uint ROWS = gl_WorkGroupSize.x / LANES;  // rows per workgroup
const uint DL = D_MAX / LANES;                 // register columns per invocation
// Registers and shared tiles are read 4 columns at a time (one 16-byte shared
// load feeds 4 FMAs); run g of an invocation is columns 4 * (lane + LANES * g) + [0, 4),
// so the lanes of a row read neighbouring 16-byte units.
const uint DG = DL / 4;   // runs per invocation
const uint DU = D_MAX / 4;  // 16-byte units per tile row

#define PUSH_ATTENTION
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer Q { float v[]; } q_;
layout(set = 0, binding = 1) readonly buffer K { float v[]; } k_;
layout(set = 0, binding = 2) readonly buffer V { float v[]; } v_;
layout(set = 0, binding = 3) buffer O { float v[]; } o_;
layout(set = 0, binding = 4) buffer L { float v[]; } lse_;
TENSOR(5)  // mask: u8 or floating
layout(set = 0, binding = 6) readonly buffer GO { float v[]; } go_;
layout(set = 0, binding = 7) buffer GQ { float v[]; } gq_;
layout(set = 0, binding = 8) buffer GK { float v[]; } gk_;
layout(set = 0, binding = 9) buffer GV { float v[]; } gv_;
// The same bindings read 4 floats at a time.
layout(set = 0, binding = 0) readonly buffer Q4 { vec4 v[]; } q4_;
layout(set = 0, binding = 1) readonly buffer K4 { vec4 v[]; } k4_;
layout(set = 0, binding = 2) readonly buffer V4 { vec4 v[]; } v4_;
layout(set = 0, binding = 3) readonly buffer O4 { vec4 v[]; } o4_;
layout(set = 0, binding = 6) readonly buffer GO4 { vec4 v[]; } go4_;

// Two streamed operands per tile: K and V (modes 0, 1) or Q and dO (mode 2).
shared vec4 tile_a[TILE * DU];
shared vec4 tile_b[TILE * DU];
shared float tile_lse[TILE];
shared float tile_delta[TILE];
shared float delta_part[gl_WorkGroupSize.x];  // mode 2: partial D_i, several invocations per row

#define ATTENTION_ROW_DELTA
#include "attention_terms.glsl"

// Copies rows [first, first + TILE) of a [rows, width] matrix at `base` (rows `stride` apart) into
// a shared tile, zeros past its end and past `width` (so padded columns add 0);
// 4 floats per load when ALIGNED (src4 is the binding's vec4 view).
#define LOAD_TILE(dst, src, src4, base, stride, first, rows, width)                           \
  for (uint e = gl_LocalInvocationID.x; e < TILE * DU; e += gl_WorkGroupSize.x) {             \
    const uint r = e / DU, c = 4 * (e % DU);                                                  \
    const bool row_in = (first) + r < (rows);                                                 \
    const int at = (base) + int(((first) + r) * (stride) + c);                                \
    if (ALIGNED) {                                                                            \
      dst[e] = row_in && c < (width) ? src4[at / 4] : vec4(0.0);                              \
    } else {                                                                                  \
      vec4 x = vec4(0.0);                                                                     \
      [[unroll]] for (uint w = 0; w < 4; ++w) if (row_in && c + w < (width)) x[w] = src[at + int(w)]; \
      dst[e] = x;                                                                             \
    }                                                                                         \
  }

// The first column of run g of this invocation (see DG).
uint run_col(uint lane, uint g) { return 4 * (lane + LANES * g); }

void main() {
  const uvec2 block = attention_block(MODE != 2u);  // MODE 2 walks key blocks
  const uint bh = block.y;
  if (bh >= pc.bh) return;  // whole workgroup: barriers stay uniform
  const uint rows = MODE == 2u ? pc.lk : pc.lq;
  const uint first_row = block.x * ROWS;
  const uint row = first_row + row_slot(), lane = row_lane();
  const bool in_range = row < rows;
  const uint d = pc.d, dv = pc.dv;
  const bool causal = ATT_CAUSAL;

  if (MODE == 0u || MODE == 1u) {
    const uint i = row;
    vec4 qr[DG], acc[DG], gor[DG];
    const int qo = Q_ROW(bh, min(i, pc.lq - 1u));
    [[unroll]] for (uint g = 0; g < DG; ++g) {
      qr[g] = LOAD_RUN(q_.v, q4_.v, qo, run_col(lane, g), d);
      acc[g] = vec4(0.0);
    }
    float mx = NEG_INF, sum = 0.0, lse = 0.0, delta = 0.0;
    if (MODE == 1u) {
      lse = in_range ? lse_.v[pc.off[4] + int(bh * pc.lq + i)] : NEG_INF;
      const int go = GO_ROW(bh, min(i, pc.lq - 1u));
      const int oo = O_ROW(bh, min(i, pc.lq - 1u));
      [[unroll]] for (uint g = 0; g < DG; ++g) {
        gor[g] = LOAD_RUN(go_.v, go4_.v, go, run_col(lane, g), dv);
        delta += dot(gor[g], LOAD_RUN(o_.v, o4_.v, oo, run_col(lane, g), dv));
      }
      delta = row_sum(delta);
    }
    // Causal: keys past the workgroup's last query are masked for every row.
    const uint kend = causal ? min(pc.lk, min(first_row + ROWS, pc.lq)) : pc.lk;
    const int kbase = K_ROW(bh, 0u), vbase = V_ROW(bh, 0u);
    const uint k_stride = row_stride(pc.qkv_slots, d), v_stride = row_stride(pc.qkv_slots, dv);
    for (uint j0 = 0; j0 < kend; j0 += TILE) {
      barrier();
      LOAD_TILE(tile_a, k_.v, k4_.v, kbase, k_stride, j0, pc.lk, d)
      LOAD_TILE(tile_b, v_.v, v4_.v, vbase, v_stride, j0, pc.lk, dv)
      barrier();
      if (!in_range || (MODE == 1u && lse == NEG_INF)) continue;
      const uint n = min(TILE, kend - j0);
      for (uint jj = 0; jj < n; ++jj) {
        const float m = mask_term(bh, i, j0 + jj);
        if (m == NEG_INF) continue;
        const uint t = jj * DU + lane;  // this lane's first unit of tile row jj
        float s = 0.0;
        [[unroll]] for (uint g = 0; g < DG; ++g) s += dot(qr[g], tile_a[t + LANES * g]);
        s = row_sum(s) * pc.scale + m;
        if (MODE == 0u) {
          if (s > mx) {  // online softmax: rescale what was summed under the old maximum
            const float corr = exp(mx - s);
            sum *= corr;
            [[unroll]] for (uint g = 0; g < DG; ++g) acc[g] *= corr;
            mx = s;
          }
          const float p = exp(s - mx);
          sum += p;
          const float w = p * dropout_factor(bh, i, j0 + jj);
          [[unroll]] for (uint g = 0; g < DG; ++g) acc[g] += w * tile_b[t + LANES * g];
        } else {
          const float p = exp(s - lse);
          float dp = 0.0;
          [[unroll]] for (uint g = 0; g < DG; ++g) dp += dot(gor[g], tile_b[t + LANES * g]);
          const float ds = p * (row_sum(dp) * dropout_factor(bh, i, j0 + jj) - delta) * pc.scale;
          [[unroll]] for (uint g = 0; g < DG; ++g) acc[g] += ds * tile_a[t + LANES * g];
        }
      }
    }
    if (!in_range) return;
    if (MODE == 0u) {
      const int oo = O_ROW(bh, i);
      const float inv = sum == 0.0 ? 0.0 : 1.0 / sum;  // a fully masked row gives zeros
      [[unroll]] for (uint g = 0; g < DG; ++g) STORE_RUN(o_.v, oo, run_col(lane, g), dv, acc[g] * inv)
      if (lane == 0u) lse_.v[pc.off[4] + int(bh * pc.lq + i)] = sum == 0.0 ? NEG_INF : mx + log(sum);
    } else {
      const int gq = GQ_ROW(bh, i);
      [[unroll]] for (uint g = 0; g < DG; ++g) STORE_RUN(gq_.v, gq, run_col(lane, g), d, acc[g])
    }
    return;
  }

  // MODE 2: one key row per invocation; queries stream through shared memory.
  const uint j = row;
  vec4 kr[DG], vr[DG], gk[DG], gv[DG];
  const int ko = K_ROW(bh, min(j, pc.lk - 1u));
  const int vo = V_ROW(bh, min(j, pc.lk - 1u));
  [[unroll]] for (uint g = 0; g < DG; ++g) {
    kr[g] = LOAD_RUN(k_.v, k4_.v, ko, run_col(lane, g), d);
    vr[g] = LOAD_RUN(v_.v, v4_.v, vo, run_col(lane, g), dv);
    gk[g] = vec4(0.0);
    gv[g] = vec4(0.0);
  }
  // Causal: queries before the workgroup's first key see none of its keys.
  const uint qbegin = causal ? min(pc.lq, first_row) / TILE * TILE : 0u;
  const int qbase = Q_ROW(bh, 0u), gobase = GO_ROW(bh, 0u);
  const uint q_stride = row_stride(pc.qkv_slots, d), go_stride = row_stride(pc.out_slots, dv);
  for (uint i0 = qbegin; i0 < pc.lq; i0 += TILE) {
    barrier();
    LOAD_TILE(tile_a, q_.v, q4_.v, qbase, q_stride, i0, pc.lq, d)
    LOAD_TILE(tile_b, go_.v, go4_.v, gobase, go_stride, i0, pc.lq, dv)
    // D_i of the tile's queries: PER invocations per row, each a run of columns.
    {
      const uint PER = gl_WorkGroupSize.x / TILE, t = gl_LocalInvocationID.x / PER, part = gl_LocalInvocationID.x % PER;
      const uint i = i0 + t, span = (pc.dv + 4 * PER - 1) / (4 * PER) * 4;  // whole 16-byte units per part
      delta_part[gl_LocalInvocationID.x] =
          t < TILE && i < pc.lq ? row_delta(bh, i, min(part * span, pc.dv), min(part * span + span, pc.dv)) : 0.0;
      barrier();
      if (part == 0u && t < TILE) {
        float delta = 0.0;
        for (uint k = 0; k < PER; ++k) delta += delta_part[gl_LocalInvocationID.x + k];
        tile_delta[t] = delta;
        tile_lse[t] = i < pc.lq ? lse_.v[pc.off[4] + int(bh * pc.lq + i)] : NEG_INF;
      }
    }
    barrier();
    if (!in_range) continue;
    const uint n = min(TILE, pc.lq - i0);
    for (uint ii = 0; ii < n; ++ii) {
      const uint i = i0 + ii;
      const float lse = tile_lse[ii];
      if (lse == NEG_INF) continue;
      const float m = mask_term(bh, i, j);
      if (m == NEG_INF) continue;
      const uint t = ii * DU + lane;  // this lane's first unit of tile row ii
      float s = 0.0, dp = 0.0;
      [[unroll]] for (uint g = 0; g < DG; ++g) {
        s += dot(tile_a[t + LANES * g], kr[g]);
        dp += dot(tile_b[t + LANES * g], vr[g]);
      }
      const float p = exp(row_sum(s) * pc.scale + m - lse), z = dropout_factor(bh, i, j);
      const float ds = p * (row_sum(dp) * z - tile_delta[ii]) * pc.scale;
      const float pz = p * z;
      [[unroll]] for (uint g = 0; g < DG; ++g) {
        gv[g] += pz * tile_b[t + LANES * g];
        gk[g] += ds * tile_a[t + LANES * g];
      }
    }
  }
  if (!in_range) return;
  const int gko = GK_ROW(bh, j), gvo = GV_ROW(bh, j);
  [[unroll]] for (uint g = 0; g < DG; ++g) {
    STORE_RUN(gk_.v, gko, run_col(lane, g), d, gk[g])
    STORE_RUN(gv_.v, gvo, run_col(lane, g), dv, gv[g])
  }
}
