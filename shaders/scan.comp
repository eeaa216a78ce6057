#version 450
// Inclusive prefix sums or products along the middle dim of contiguous
// [outer, n, inner] views: one workgroup per (outer, inner) column, which it
// walks in chunks of 512 elements. Each chunk is scanned work-efficiently in
// shared memory (Blelloch: an up-sweep of partial results, then a down-sweep
// into an exclusive scan), and the running result of earlier chunks is
// carried into it.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;

#define PUSH_SCAN
#include "push_constants.h"

TENSOR(0)  // out
TENSOR(1)  // in

#define CHUNK 512u
shared REAL part[CHUNK];

REAL combine(REAL a, REAL b) { return pc.op == 0u ? a + b : a * b; }

void main() {
  const uint t = gl_LocalInvocationID.x, columns = pc.outer * pc.inner;
  const REAL identity = pc.op == 0u ? REAL(0.0) : REAL(1.0);
  for (uint c = gl_WorkGroupID.x; c < columns; c += gl_NumWorkGroups.x) {
    const uint base = (c / pc.inner) * pc.n * pc.inner + c % pc.inner;
    REAL carry = identity;
    for (uint start = 0u; start < pc.n; start += CHUNK) {
      for (uint h = 0u; h < 2u; ++h) {
        const uint j = start + 2u * t + h;
        part[2u * t + h] = j < pc.n ? load1(DT, uint(pc.off_in) + base + j * pc.inner) : identity;
      }
      uint stride = 1u;
      for (uint d = CHUNK / 2u; d > 0u; d >>= 1u) {  // up-sweep
        barrier();
        if (t < d) {
          const uint a = stride * (2u * t + 1u) - 1u, b = stride * (2u * t + 2u) - 1u;
          part[b] = combine(part[a], part[b]);
        }
        stride <<= 1u;
      }
      barrier();
      const REAL total = part[CHUNK - 1u];
      barrier();
      if (t == 0u) part[CHUNK - 1u] = identity;
      for (uint d = 1u; d < CHUNK; d <<= 1u) {  // down-sweep
        stride >>= 1u;
        barrier();
        if (t < d) {
          const uint a = stride * (2u * t + 1u) - 1u, b = stride * (2u * t + 2u) - 1u;
          const REAL left = part[a];
          part[a] = part[b];
          part[b] = combine(part[b], left);
        }
      }
      barrier();
      for (uint h = 0u; h < 2u; ++h) {  // inclusive: the exclusive result with the element itself
        const uint j = start + 2u * t + h;
        if (j < pc.n) {
          const uint at = base + j * pc.inner;
          store0(DT, uint(pc.off_out) + at, combine(carry, combine(part[2u * t + h], load1(DT, uint(pc.off_in) + at))));
        }
      }
      carry = combine(carry, total);
      barrier();
    }
  }
}
