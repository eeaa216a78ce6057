#version 450
// Row gather along the middle dim of contiguous 3-D views:
// out[o, j, k] = src[o, index[o', j], k], one invocation per element.
// Built again with -DPER_ELEMENT as gather: index shaped as out,
// out[o, j, k] = src[o, index[o, j, k], k].
// Rows outside [0, n) give zeros and are recorded in the fault record, which
// the host checks at its next wait (a GPU kernel cannot throw).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint DT = 0;
layout(constant_id = 2) const uint ELEM_BYTES = 4;  // copies raw elements

#ifndef KERNEL_CODE
#define KERNEL_CODE 1u  // VulkanBackend::IndexKernel
#endif

#define PUSH_INDEX
#include "push_constants.h"

TENSOR(0)  // out [outer, m, inner]
TENSOR(1)  // src [outer, n, inner]
TENSOR(2)  // index, i64
layout(set = 0, binding = 3) buffer Fault { uint seen; int index; uint n; uint kernel; } fault;

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += step) {
    uint k = i % pc.inner, t = i / pc.inner;
    uint j = t % pc.m, o = t / pc.m;
    #ifdef PER_ELEMENT
    int at = pc.off_index + int(i);
#else
    int at = pc.off_index + int((pc.index_outer == 1 ? 0 : o) * pc.m + j);
#endif
    int row = int(t2u.v[2 * at]);
    bool valid = t2u.v[2 * at + 1] == 0u && row >= 0 && uint(row) < pc.n;
    int big = int((o * pc.n + uint(row)) * pc.inner + k);
    int dst = pc.off_small + int(i);
    if (!valid) {
      store0(DT, dst, 0.0);
      if (atomicExchange(fault.seen, 1u) == 0u) { fault.index = row; fault.n = pc.n; fault.kernel = KERNEL_CODE; }
      continue;
    }
    int src = pc.off_big + big;
    if (ELEM_BYTES == 1) t0b.v[dst] = t1b.v[src];
    else if (ELEM_BYTES == 2) t0h.v[dst] = t1h.v[src];
    else if (ELEM_BYTES == 4) t0u.v[dst] = t1u.v[src];
    else { t0u.v[2 * dst] = t1u.v[2 * src]; t0u.v[2 * dst + 1] = t1u.v[2 * src + 1]; }
  }
}
