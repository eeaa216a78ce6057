#version 450
// Counter-based random numbers: element i draws Philox4x32-10 at counter
// (offset + i, 0, 0) under key = seed, the same mapping as the CPU backend;
// bernoulli takes word i % 4 of counter offset + i / 4 (four elements a draw).
// With DROPOUT, the bernoulli mask is also applied: result = x * mask in the
// same pass (dropout's forward), every operand of the output's dtype.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;  // RANDOM_*
layout(constant_id = 2) const uint DT_OUT = 0;
// Seed and counter from binding 1 (seed lo, hi, counter lo, hi), written
// before each run: a captured draw takes fresh numbers at every replay.
layout(constant_id = 3) const bool STATE = false;
layout(constant_id = 4) const bool DROPOUT = false;

#define PUSH_RANDOM
#include "push_constants.h"

TENSOR(0)
layout(set = 0, binding = 1) readonly buffer State { uint state[]; };
TENSOR(2)  // DROPOUT: x
TENSOR(3)  // DROPOUT: x * mask
// f32 views four elements wide: a bernoulli draw's quad in one 16-byte access.
layout(set = 0, binding = 0) buffer Q0 { vec4 v[]; } t0q;
layout(set = 0, binding = 2) readonly buffer Q2 { vec4 v[]; } t2q;
layout(set = 0, binding = 3) buffer Q3 { vec4 v[]; } t3q;

#include "philox.glsl"

// The affine parameters: the f64 variant maps with doubles, as the CPU does for f64.
#ifdef RUMUS_F64
REAL param_a() { return packDouble2x32(uvec2(pc.a_lo, pc.a_hi)); }
REAL param_b() { return packDouble2x32(uvec2(pc.b_lo, pc.b_hi)); }
#else
REAL param_a() { return pc.a; }
REAL param_b() { return pc.b; }
#endif

REAL as_stored(REAL x) {
  if (DT_OUT == DT_F16) return REAL(unpackHalf2x16(packHalf2x16(vec2(float(x), 0.0))).x);
  if (DT_OUT == DT_BF16) return REAL(uintBitsToFloat(uint(float_to_bf16(float(x))) << 16));
  return x;
}

float uniform24(uint r) { return float(r >> 8) * (1.0 / 16777216.0); }

uvec4 draw(uint i) {
  const uvec2 key = STATE ? uvec2(state[0], state[1]) : uvec2(pc.seed_lo, pc.seed_hi);
  const uvec2 counter = STATE ? uvec2(state[2], state[3]) : uvec2(pc.counter_lo, pc.counter_hi);
  uint carry;
  uint lo = uaddCarry(counter.x, i, carry);
  return philox(key, uvec2(lo, counter.y + carry));
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (KIND == RANDOM_BERNOULLI) {  // pc.b where the draw's top 24 bits fall below the host's exact threshold
    const bool quads = DT_OUT == DT_F32 && pc.offset_out % 4u == 0u &&
                       (!DROPOUT || (pc.offset_in % 4u == 0u && pc.offset_result % 4u == 0u));
    for (uint q = gl_GlobalInvocationID.x; q < (pc.n + 3u) / 4u; q += step) {
      uvec4 r = draw(q);
      if (quads && 4u * q + 3u < pc.n) {
        const vec4 m = mix(vec4(0.0), vec4(float(param_b())), lessThan(r >> 8, uvec4(pc.range_lo)));
        t0q.v[pc.offset_out / 4u + q] = m;
        if (DROPOUT) t3q.v[pc.offset_result / 4u + q] = t2q.v[pc.offset_in / 4u + q] * m;
        continue;
      }
      for (uint j = 0u; j < 4u && 4u * q + j < pc.n; ++j) {
        const uint i = 4u * q + j;
        const REAL m = (r[j] >> 8) < pc.range_lo ? param_b() : REAL(0.0);
        store0(DT_OUT, pc.offset_out + i, m);
        // The mask as stored (rounded to a 16-bit dtype), as a multiply by the mask tensor would read it.
        if (DROPOUT) store3(DT_OUT, pc.offset_result + i, load2(DT_OUT, pc.offset_in + i) * as_stored(m));
      }
    }
    return;
  }
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += step) {
    uvec4 r = draw(i);
    uint o = pc.offset_out + i;
    if (KIND == RANDOM_UNIFORM) {
      store0(DT_OUT, o, param_a() + (param_b() - param_a()) * REAL(uniform24(r.x)));
    } else if (KIND == RANDOM_NORMAL) {
      float u1 = 1.0 - uniform24(r.x), u2 = uniform24(r.y);
      // The standard normal in float, as the CPU draws it for every dtype.
      float z = sqrt(-2.0 * log(u1)) * cos(6.28318530717958647692 * u2);
      store0(DT_OUT, o, param_a() + param_b() * REAL(z));
    } else {
      uint64_t bits = (uint64_t(r.x) << 32) | uint64_t(r.y);
      uint64_t range = (uint64_t(pc.range_hi) << 32) | uint64_t(pc.range_lo);
      int64_t v = ((int64_t(pc.low_hi) << 32) | int64_t(uint(pc.low_lo))) + int64_t(bits % range);
      if (DT_OUT == DT_I64) {
        ivec2 w = unpackInt2x32(v);
        t0u.v[2 * o] = uint(w.x);
        t0u.v[2 * o + 1] = uint(w.y);
      } else if (DT_OUT == DT_I32) {
        t0u.v[o] = uint(int(v));
      } else {
        store0(DT_OUT, o, REAL(v));
      }
    }
  }
}
