#version 450
// The negative log-likelihood of class indices (src/backend/nll.hpp) over
// contiguous log-probabilities [rows, cols] and i64 targets [rows].
// Forward: one workgroup sums -log_probs[i, target[i]] over the counted rows
// and counts them; a target outside [0, cols) that is not ignore_index is
// skipped and recorded in the fault record, which the host checks at its
// next wait. Backward: one invocation per element of grad_in.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DT = 0;
layout(constant_id = 2) const bool BACKWARD = false;
layout(constant_id = 3) const bool MEAN = true;
layout(constant_id = 4) const bool SOFTMAX = false;  // backward: for the logits, through log_softmax

#define PUSH_NLL
#include "push_constants.h"

TENSOR(0)  // forward: the loss; backward: grad_in [rows, cols]
TENSOR(1)  // forward: the count; backward: grad_out (a scalar)
TENSOR(2)  // log_probs [rows, cols]
TENSOR(3)  // backward: the count
layout(set = 0, binding = 3) buffer Fault { uint seen; int index; uint n; uint kernel; } fault;  // forward
TENSOR(4)  // target [rows], i64

shared REAL red_sum[gl_WorkGroupSize.x];
shared uint red_count[gl_WorkGroupSize.x];

// The target of row i, and whether the row counts.
bool counted(uint i, out int t) {
  const int at = pc.off[4] + int(i);
  const uint lo = t4u.v[2 * at], hi = t4u.v[2 * at + 1];
  t = int(lo);
  if (lo == pc.ignore_lo && hi == pc.ignore_hi) return false;
  return hi == 0u && lo < pc.cols;
}

void main() {
  if (!BACKWARD) {
    const uint lid = gl_LocalInvocationID.x;
    REAL sum = 0.0;
    uint count = 0u;
    for (uint i = lid; i < pc.rows; i += gl_WorkGroupSize.x) {
      int t;
      if (counted(i, t)) {
        sum -= load2(DT, pc.off[2] + int(i * pc.cols) + t);
        ++count;
        continue;
      }
      const int at = pc.off[4] + int(i);
      const bool ignored = t4u.v[2 * at] == pc.ignore_lo && t4u.v[2 * at + 1] == pc.ignore_hi;
      if (!ignored && atomicExchange(fault.seen, 1u) == 0u) {
        fault.index = t;
        fault.n = pc.cols;
        fault.kernel = 5u;  // VulkanBackend::IndexKernel::nll_loss
      }
    }
    red_sum[lid] = sum;
    red_count[lid] = count;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
      if (lid < s) {
        red_sum[lid] += red_sum[lid + s];
        red_count[lid] += red_count[lid + s];
      }
      barrier();
    }
    if (lid == 0) {
      const REAL n = REAL(red_count[0]);
      store0(DT, pc.off[0], MEAN ? (red_count[0] == 0u ? real_nan() : red_sum[0] / n) : red_sum[0]);
      store1(DT, pc.off[1], n);
    }
    return;
  }
  const uint total = pc.rows * pc.cols;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const REAL g = load1(DT, pc.off[1]);
  const REAL scale = MEAN ? g / load3(DT, pc.off[3]) : g;
  for (uint e = gl_GlobalInvocationID.x; e < total; e += step) {
    const uint i = e / pc.cols, c = e % pc.cols;
    int t;
    REAL v = 0.0;
    if (counted(i, t)) {
      if (SOFTMAX) v = scale * exp_r(load2(DT, pc.off[2] + int(e)));
      if (uint(t) == c) v -= scale;
    }
    store0(DT, pc.off[0] + int(e), v);
  }
}
