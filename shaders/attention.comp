#version 450
// Fused scaled dot-product attention (f32), memory linear in the sequence
// length: one invocation per query row (forward, grad_q) or key row
// (grad_k, grad_v) walks the other sequence, recomputing each score from q, k
// and the row logsumexp; no score matrix is ever stored.
//   MODE 0: forward. Pass 1 finds the row max and sum online, pass 2
//           accumulates softmax(s) v into the output row; writes lse.
//   MODE 1: grad_q[i] = scale * sum_j P_ij (dP_ij z_ij - D_i) k_j.
//   MODE 2: grad_v[j] = sum_i P_ij z_ij dO_i, grad_k[j] = scale * sum_i dS_ij q_i.
// D_i = dO_i . O_i; z is the dropout multiplier (Philox, as the CPU kernel).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;

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

#define NEG_INF uintBitsToFloat(0xff800000u)

// Philox4x32-10, the mapping of src/backend/philox.hpp and random.comp.
#include "philox.glsl"

float dropout_factor(uint bh, uint i, uint j) {
  if (pc.dropout_threshold == 0u) return 1.0;
  // Four consecutive weights per draw: weight e takes word e % 4 of counter offset + e / 4.
  const uint64_t e = (uint64_t(bh) * uint64_t(pc.lq) + uint64_t(i)) * uint64_t(pc.lk) + uint64_t(j);
  const uint64_t counter = (uint64_t(pc.counter_hi) << 32 | uint64_t(pc.counter_lo)) + (e >> 2);
  const uint r = philox(uvec2(pc.seed_lo, pc.seed_hi), uvec2(uint(counter), uint(counter >> 32)))[uint(e & 3ul)];
  return (r >> 8) >= pc.dropout_threshold ? pc.keep_scale : 0.0;
}

// Scaled, masked score of query i against key j; -inf where masked.
float score(uint bh, uint i, uint j) {
  if (ATT_CAUSAL && j > i) return NEG_INF;
  float add = 0.0;
  if (ATT_MASK_KIND != 0u) {
    const uint b = bh / pc.heads, h = bh % pc.heads;
    const int m = pc.mask_off + int(b) * pc.mask_stride[0] + int(h) * pc.mask_stride[1] + int(i) * pc.mask_stride[2] +
                  int(j) * pc.mask_stride[3];
    const float mv = load5(ATT_MASK_DT, uint(m));
    if (ATT_MASK_KIND == 1u) {
      if (mv == 0.0) return NEG_INF;
    } else {
      add = mv;
    }
  }
  const int qo = Q_ROW(bh, i), ko = K_ROW(bh, j);
  float dot = 0.0;
  for (uint c = 0; c < pc.d; ++c) dot += q_.v[qo + int(c)] * k_.v[ko + int(c)];
  return dot * pc.scale + add;
}

float delta_of(uint bh, uint i) {
  const int go = GO_ROW(bh, i), oo = O_ROW(bh, i);
  float s = 0.0;
  for (uint c = 0; c < pc.dv; ++c) s += go_.v[go + int(c)] * o_.v[oo + int(c)];
  return s;
}

float dp_of(uint bh, uint i, uint j) {
  const int go = GO_ROW(bh, i), vo = V_ROW(bh, j);
  float s = 0.0;
  for (uint c = 0; c < pc.dv; ++c) s += go_.v[go + int(c)] * v_.v[vo + int(c)];
  return s;
}

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint rows = MODE == 2u ? pc.lk : pc.lq;
  if (idx >= pc.bh * rows) return;
  const uint bh = idx / rows, r = idx % rows;

  if (MODE == 0u) {
    const uint i = r, kend = ATT_CAUSAL ? min(pc.lk, i + 1u) : pc.lk;
    float mx = NEG_INF, sum = 0.0;
    for (uint j = 0; j < kend; ++j) {
      const float s = score(bh, i, j);
      if (s == NEG_INF) continue;
      if (s > mx) {
        sum *= exp(mx - s);
        mx = s;
      }
      sum += exp(s - mx);
    }
    const int oo = O_ROW(bh, i);
    for (uint c = 0; c < pc.dv; ++c) o_.v[oo + int(c)] = 0.0;
    if (sum == 0.0) {
      lse_.v[pc.off[4] + int(bh * pc.lq + i)] = NEG_INF;
      return;
    }
    const float lse = mx + log(sum);
    lse_.v[pc.off[4] + int(bh * pc.lq + i)] = lse;
    for (uint j = 0; j < kend; ++j) {
      const float s = score(bh, i, j);
      if (s == NEG_INF) continue;
      const float w = exp(s - lse) * dropout_factor(bh, i, j);
      if (w == 0.0) continue;
      const int vo = V_ROW(bh, j);
      for (uint c = 0; c < pc.dv; ++c) o_.v[oo + int(c)] += w * v_.v[vo + int(c)];
    }
  } else if (MODE == 1u) {
    const uint i = r, kend = ATT_CAUSAL ? min(pc.lk, i + 1u) : pc.lk;
    const int gq = GQ_ROW(bh, i);
    for (uint c = 0; c < pc.d; ++c) gq_.v[gq + int(c)] = 0.0;
    const float lse = lse_.v[pc.off[4] + int(bh * pc.lq + i)];
    if (lse == NEG_INF) return;
    const float delta = delta_of(bh, i);
    for (uint j = 0; j < kend; ++j) {
      const float s = score(bh, i, j);
      if (s == NEG_INF) continue;
      const float p = exp(s - lse);
      const float ds = p * (dp_of(bh, i, j) * dropout_factor(bh, i, j) - delta) * pc.scale;
      const int ko = K_ROW(bh, j);
      for (uint c = 0; c < pc.d; ++c) gq_.v[gq + int(c)] += ds * k_.v[ko + int(c)];
    }
  } else {
    const uint j = r, qbegin = ATT_CAUSAL ? min(pc.lq, j) : 0u;
    const int gk = GK_ROW(bh, j), gv = GV_ROW(bh, j);
    for (uint c = 0; c < pc.d; ++c) gk_.v[gk + int(c)] = 0.0;
    for (uint c = 0; c < pc.dv; ++c) gv_.v[gv + int(c)] = 0.0;
    for (uint i = qbegin; i < pc.lq; ++i) {
      const float lse = lse_.v[pc.off[4] + int(bh * pc.lq + i)];
      if (lse == NEG_INF) continue;
      const float s = score(bh, i, j);
      if (s == NEG_INF) continue;
      const float p = exp(s - lse), z = dropout_factor(bh, i, j);
      const int go = GO_ROW(bh, i), qo = Q_ROW(bh, i);
      if (z != 0.0)
        for (uint c = 0; c < pc.dv; ++c) gv_.v[gv + int(c)] += p * z * go_.v[go + int(c)];
      const float ds = p * (dp_of(bh, i, j) * z - delta_of(bh, i)) * pc.scale;
      for (uint c = 0; c < pc.d; ++c) gk_.v[gk + int(c)] += ds * q_.v[qo + int(c)];
    }
  }
}
