#version 450
// Inclusive prefix sums or products along the middle dim of contiguous
// [outer, n, inner] views: one workgroup per (outer, inner) column, which it
// walks in chunks of 512 elements. Each chunk is scanned work-efficiently in
// shared memory (Blelloch: an up-sweep of partial results, then a down-sweep
// into an exclusive scan), and the running result of earlier chunks is
// carried into it. Every combination keeps its operands' order, so the
// variant built with -DEXTREME (cumextreme) scans (value, index) pairs for
// the running maximum or minimum, where the later of two equal values wins
// and NaN is above every number.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;

#define PUSH_SCAN
#include "push_constants.h"

TENSOR(0)  // out (values)
TENSOR(1)  // in
#ifdef EXTREME
TENSOR(2)  // indices, i64
#endif

#define CHUNK 512u
shared REAL part[CHUNK];

#ifdef EXTREME
shared int part_index[CHUNK];
// Whether the later value v2 takes over from v1 (pc.op: 0 max, 1 min).
bool later_wins(REAL v1, REAL v2) {
  return v2 != v2 || (v1 == v1 && (pc.op == 0u ? v2 >= v1 : v2 <= v1));
}
REAL identity_value() { return pc.op == 0u ? -real_inf() : real_inf(); }
// part[b] = part[a] then part[b] (a's elements come first).
void combine_into(uint a, uint b) {
  if (!later_wins(part[a], part[b])) {
    part[b] = part[a];
    part_index[b] = part_index[a];
  }
}
#else
REAL combine(REAL a, REAL b) { return pc.op == 0u ? a + b : a * b; }
REAL identity_value() { return pc.op == 0u ? REAL(0.0) : REAL(1.0); }
#endif

void main() {
  const uint t = gl_LocalInvocationID.x, columns = pc.outer * pc.inner;
  const REAL identity = identity_value();
  for (uint c = gl_WorkGroupID.x; c < columns; c += gl_NumWorkGroups.x) {
    const uint base = (c / pc.inner) * pc.n * pc.inner + c % pc.inner;
    REAL carry = identity;
#ifdef EXTREME
    int carry_index = -1;
#endif
    for (uint start = 0u; start < pc.n; start += CHUNK) {
      for (uint h = 0u; h < 2u; ++h) {
        const uint j = start + 2u * t + h;
        part[2u * t + h] = j < pc.n ? load1(DT, uint(pc.off_in) + base + j * pc.inner) : identity;
#ifdef EXTREME
        part_index[2u * t + h] = j < pc.n ? int(j) : -1;
#endif
      }
      uint stride = 1u;
      for (uint d = CHUNK / 2u; d > 0u; d >>= 1u) {  // up-sweep
        barrier();
        if (t < d) {
          const uint a = stride * (2u * t + 1u) - 1u, b = stride * (2u * t + 2u) - 1u;
#ifdef EXTREME
          combine_into(a, b);
#else
          part[b] = combine(part[a], part[b]);
#endif
        }
        stride <<= 1u;
      }
      barrier();
      const REAL total = part[CHUNK - 1u];
#ifdef EXTREME
      const int total_index = part_index[CHUNK - 1u];
#endif
      barrier();
      if (t == 0u) {
        part[CHUNK - 1u] = identity;
#ifdef EXTREME
        part_index[CHUNK - 1u] = -1;
#endif
      }
      for (uint d = 1u; d < CHUNK; d <<= 1u) {  // down-sweep
        stride >>= 1u;
        barrier();
        if (t < d) {
          const uint a = stride * (2u * t + 1u) - 1u, b = stride * (2u * t + 2u) - 1u;
          const REAL left = part[a];
          part[a] = part[b];
#ifdef EXTREME
          const int left_index = part_index[a];
          part_index[a] = part_index[b];
          if (later_wins(part[b], left)) {
            part[b] = left;
            part_index[b] = left_index;
          }
#else
          part[b] = combine(part[b], left);
#endif
        }
      }
      barrier();
      for (uint h = 0u; h < 2u; ++h) {  // inclusive: the exclusive result with the element itself
        const uint j = start + 2u * t + h;
        if (j < pc.n) {
          const uint at = base + j * pc.inner;
          const REAL x = load1(DT, uint(pc.off_in) + at);
#ifdef EXTREME
          REAL v = carry;
          int index = carry_index;
          if (later_wins(v, part[2u * t + h])) {
            v = part[2u * t + h];
            index = part_index[2u * t + h];
          }
          if (later_wins(v, x)) {
            v = x;
            index = int(j);
          }
          store0(DT, uint(pc.off_out) + at, v);
          const uint slot = 2u * (uint(pc.off_indices) + at);
          t2u.v[slot] = uint(index);
          t2u.v[slot + 1u] = index < 0 ? 0xffffffffu : 0u;
#else
          store0(DT, uint(pc.off_out) + at, combine(carry, combine(part[2u * t + h], x)));
#endif
        }
      }
#ifdef EXTREME
      if (later_wins(carry, total)) {
        carry = total;
        carry_index = total_index;
      }
#else
      carry = combine(carry, total);
#endif
      barrier();
    }
  }
}
