#version 450
// Reductions over any set of dims. One workgroup per output (tree in shared
// memory) when the reduced extent is large, one invocation per output
// otherwise, and many workgroups for one very long reduction (CHUNKED).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;  // REDUCE_*
layout(constant_id = 2) const uint DT_OUT = 0;
layout(constant_id = 3) const uint DT_IN = 0;
layout(constant_id = 4) const bool PER_GROUP = false;
// One output split over the workgroups: workgroup g reduces its run of the
// reduced elements into partial g (out[g]); a second launch combines them.
layout(constant_id = 5) const bool CHUNKED = false;
// PER_GROUP over contiguous rows (an output's reduced elements lie at base,
// base + 1, ...): ROW_LANES invocations an output, so a workgroup takes
// several short rows (a bias gradient's per-sample sums over 576 positions)
// instead of one. 0: off.
layout(constant_id = 6) const uint ROW_LANES = 0;

#define PUSH_REDUCE
#include "push_constants.h"

TENSOR(0)
TENSOR(1)

REAL nan_f() { return real_nan(); }

// Input offset of reduced element r (walking only the reduced dims).
int reduced_offset(uint r) {
  int off = 0;
  for (int d = int(pc.rank) - 1; d >= 0; --d) {
    if ((pc.reduced_mask & (1u << d)) == 0) continue;
    off += int(r % pc.shape[d]) * pc.stride_in[d];
    r /= pc.shape[d];
  }
  return off;
}

// Input base and output offset of output element o (walking the kept dims).
void output_offsets(uint o, out int base_in, out int off_out) {
  base_in = pc.offset_in;
  off_out = pc.offset_out;
  for (int d = int(pc.rank) - 1; d >= 0; --d) {
    if ((pc.reduced_mask & (1u << d)) != 0) continue;
    int idx = int(o % pc.shape[d]);
    o /= pc.shape[d];
    base_in += idx * pc.stride_in[d];
    off_out += idx * pc.stride_out[d];
  }
}

REAL combine(REAL acc, REAL v) {
  if (OP == REDUCE_SUM || OP == REDUCE_MEAN) return acc + v;
  if (is_nan_f(acc) || is_nan_f(v)) return nan_f();
  return OP == REDUCE_MAX ? max(acc, v) : min(acc, v);
}
REAL identity() {
  if (OP == REDUCE_MAX) return -real_inf();
  if (OP == REDUCE_MIN) return real_inf();
  return 0.0;
}
REAL finish(REAL acc) { return OP == REDUCE_MEAN ? acc / REAL(pc.n_red) : acc; }

shared REAL partial[gl_WorkGroupSize.x];

// The workgroup's tree over partial[]; the result in partial[0].
void tree() {
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s)
      partial[gl_LocalInvocationID.x] = combine(partial[gl_LocalInvocationID.x], partial[gl_LocalInvocationID.x + s]);
    barrier();
  }
}

void main() {
  if (CHUNKED) {
    const uint chunk = (pc.n_red + gl_NumWorkGroups.x - 1) / gl_NumWorkGroups.x;
    const uint first = gl_WorkGroupID.x * chunk, end = min(first + chunk, pc.n_red);
    REAL acc = identity();
    for (uint r = first + gl_LocalInvocationID.x; r < end; r += gl_WorkGroupSize.x)
      acc = combine(acc, load1(DT_IN, pc.offset_in + reduced_offset(r)));
    partial[gl_LocalInvocationID.x] = acc;
    tree();
    if (gl_LocalInvocationID.x == 0) store0(DT_OUT, pc.offset_out + gl_WorkGroupID.x, partial[0]);
    return;
  }
  if (PER_GROUP && ROW_LANES > 0) {
    const uint lane = gl_LocalInvocationID.x % ROW_LANES;
    const uint o = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * (gl_WorkGroupSize.x / ROW_LANES) +
                   gl_LocalInvocationID.x / ROW_LANES;
    const bool live = o < pc.n_out;
    int base = 0, off_out = 0;
    if (live) output_offsets(o, base, off_out);
    REAL acc = identity();
    if (live)
      for (uint r = lane; r < pc.n_red; r += ROW_LANES) acc = combine(acc, load1(DT_IN, base + int(r)));
    partial[gl_LocalInvocationID.x] = acc;
    barrier();
    for (uint s = ROW_LANES / 2; s > 0; s >>= 1) {
      if (lane < s)
        partial[gl_LocalInvocationID.x] = combine(partial[gl_LocalInvocationID.x], partial[gl_LocalInvocationID.x + s]);
      barrier();
    }
    if (live && lane == 0) store0(DT_OUT, off_out, finish(partial[gl_LocalInvocationID.x]));
    return;
  }
  if (PER_GROUP) {
    const uint o = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (o >= pc.n_out) return;  // uniform per group
    int base, off_out;
    output_offsets(o, base, off_out);
    REAL acc = identity();
    for (uint r = gl_LocalInvocationID.x; r < pc.n_red; r += gl_WorkGroupSize.x)
      acc = combine(acc, load1(DT_IN, base + reduced_offset(r)));
    partial[gl_LocalInvocationID.x] = acc;
    tree();
    if (gl_LocalInvocationID.x == 0) store0(DT_OUT, off_out, finish(partial[0]));
    return;
  }
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint o = gl_GlobalInvocationID.x; o < pc.n_out; o += step) {
    int base, off_out;
    output_offsets(o, base, off_out);
    if (OP == REDUCE_ARGMAX || OP == REDUCE_ARGMIN) {
      // One reduced dim: the first extreme wins; NaN counts as the extreme.
      REAL best = load1(DT_IN, base);
      uint best_i = 0;
      for (uint r = 1; r < pc.n_red; ++r) {
        REAL v = load1(DT_IN, base + reduced_offset(r));
        bool better = OP == REDUCE_ARGMAX ? v > best : v < best;
        if (better || (is_nan_f(v) && !is_nan_f(best))) { best = v; best_i = r; }
      }
      t0u.v[2 * off_out] = best_i;
      t0u.v[2 * off_out + 1] = 0u;
    } else {
      REAL acc = identity();
      for (uint r = 0; r < pc.n_red; ++r) acc = combine(acc, load1(DT_IN, base + reduced_offset(r)));
      store0(DT_OUT, off_out, finish(acc));
    }
  }
}
