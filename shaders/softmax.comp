#version 450
// Softmax / log-softmax along the last dim of contiguous [rows, cols]: one
// workgroup per row, max and sum reduced in shared memory.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const bool LOG = false;
layout(constant_id = 2) const bool BACKWARD = false;
layout(constant_id = 3) const uint DT = 0;

#define PUSH_SOFTMAX
#include "push_constants.h"

TENSOR(0)  // forward: out; backward: grad_in
TENSOR(1)  // forward: in; backward: grad_out
TENSOR(2)  // backward: forward output

shared REAL red[gl_WorkGroupSize.x];

REAL reduce_sum(REAL v) {
  red[gl_LocalInvocationID.x] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) red[gl_LocalInvocationID.x] += red[gl_LocalInvocationID.x + s];
    barrier();
  }
  REAL r = red[0];
  barrier();
  return r;
}

REAL reduce_max(REAL v) {
  red[gl_LocalInvocationID.x] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) red[gl_LocalInvocationID.x] = max(red[gl_LocalInvocationID.x], red[gl_LocalInvocationID.x + s]);
    barrier();
  }
  REAL r = red[0];
  barrier();
  return r;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= pc.rows) return;  // uniform per workgroup
  const uint lid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  const int base = int(row * pc.cols);
  if (!BACKWARD) {
    REAL mx = -real_inf();
    for (uint c = lid; c < pc.cols; c += n) mx = max(mx, load1(DT, pc.off1 + base + int(c)));
    mx = reduce_max(mx);
    if (isinf(mx) && mx < 0.0) mx = 0.0;  // an all -inf row stays finite until the division
    REAL s = 0.0;
    for (uint c = lid; c < pc.cols; c += n) s += exp_r(load1(DT, pc.off1 + base + int(c)) - mx);
    s = reduce_sum(s);
    if (LOG) {
      REAL lse = mx + log_r(s);
      for (uint c = lid; c < pc.cols; c += n) store0(DT, pc.off0 + base + int(c), load1(DT, pc.off1 + base + int(c)) - lse);
    } else {
      REAL inv = 1.0 / s;
      for (uint c = lid; c < pc.cols; c += n)
        store0(DT, pc.off0 + base + int(c), exp_r(load1(DT, pc.off1 + base + int(c)) - mx) * inv);
    }
  } else {
    REAL s = 0.0;
    for (uint c = lid; c < pc.cols; c += n) {
      REAL g = load1(DT, pc.off1 + base + int(c));
      s += LOG ? g : g * load2(DT, pc.off2 + base + int(c));
    }
    s = reduce_sum(s);
    for (uint c = lid; c < pc.cols; c += n) {
      REAL g = load1(DT, pc.off1 + base + int(c)), y = load2(DT, pc.off2 + base + int(c));
      store0(DT, pc.off0 + base + int(c), LOG ? g - exp_r(y) * s : y * (g - s));
    }
  }
}
