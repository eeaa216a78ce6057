#version 450
// Row scatter-add along the middle dim of contiguous 3-D f32 (f64) views:
// out[o, index[o', j], k] += src[o, j, k]. Rows may repeat, so float atomics
// (VK_EXT_shader_atomic_float); rows outside [0, n) are skipped and recorded
// in the fault record, which the host checks at its next wait.
// Built again with -DPER_ELEMENT as scatter_add (and its variants): index
// shaped as src, out[o, index[o, j, k], k] += src[o, j, k].
// The f64 variants add doubles: by atomicAdd (shaderBufferFloat64AtomicAdd), or
// (RUMUS_F64_CAS) by a compare-and-swap loop on the 64-bit words for devices
// with 64-bit integer atomics only. RUMUS_F32_CAS is the same loop on 32-bit
// words (core Vulkan), for devices without float atomics.
#ifdef RUMUS_F64_CAS
#define RUMUS_F64
#extension GL_EXT_shader_atomic_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#elif !defined(RUMUS_F32_CAS)
#extension GL_EXT_shader_atomic_float : require
#endif

layout(local_size_x_id = 0) in;

#ifndef KERNEL_CODE
#define KERNEL_CODE 2u  // VulkanBackend::IndexKernel
#endif

#define PUSH_INDEX
#include "push_constants.h"

#if defined(RUMUS_F64_CAS)
layout(set = 0, binding = 0) buffer Out { uint64_t out_[]; };
layout(set = 0, binding = 1) readonly buffer Src { double src[]; };
void add_to(int at, double v) {
  uint64_t seen = out_[at], expected;
  do {
    expected = seen;
    seen = atomicCompSwap(out_[at], expected, doubleBitsToUint64(uint64BitsToDouble(expected) + v));
  } while (seen != expected);
}
#elif defined(RUMUS_F32_CAS)
layout(set = 0, binding = 0) buffer Out { uint out_[]; };
layout(set = 0, binding = 1) readonly buffer Src { float src[]; };
void add_to(int at, float v) {
  uint seen = out_[at], expected;
  do {
    expected = seen;
    seen = atomicCompSwap(out_[at], expected, floatBitsToUint(uintBitsToFloat(expected) + v));
  } while (seen != expected);
}
#elif defined(RUMUS_F64)
layout(set = 0, binding = 0) buffer Out { double out_[]; };
layout(set = 0, binding = 1) readonly buffer Src { double src[]; };
#else
layout(set = 0, binding = 0) buffer Out { float out_[]; };
layout(set = 0, binding = 1) readonly buffer Src { float src[]; };
#endif
#if defined(RUMUS_F64) && !defined(RUMUS_F64_CAS)
void add_to(int at, double v) { atomicAdd(out_[at], v); }
#elif !defined(RUMUS_F64) && !defined(RUMUS_F32_CAS)
void add_to(int at, float v) { atomicAdd(out_[at], v); }
#endif
layout(set = 0, binding = 2) readonly buffer Index { uint index[]; };  // i64 as word pairs
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
    int row = int(index[2 * at]);
    if (index[2 * at + 1] != 0u || row < 0 || uint(row) >= pc.n) {
      if (atomicExchange(fault.seen, 1u) == 0u) { fault.index = row; fault.n = pc.n; fault.kernel = KERNEL_CODE; }
      continue;
    }
    add_to(pc.off_big + int((o * pc.n + uint(row)) * pc.inner + k), src[pc.off_small + int(i)]);
  }
}
