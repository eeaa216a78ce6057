#version 450
// Sum, mean, max or min down the columns of [batch, rows, columns]
// matrices whose columns are contiguous: a bias gradient (the sum over the
// rows of [tokens, features]) and the split-K slices of a GEMM. A
// workgroup takes LX column units (4 elements each when ALIGNED, else one)
// and a run of rows; its 256 / LX invocations per unit take every
// (256 / LX)-th row of the run, eight rows' loads in flight at a time (one
// load per loop trip waited on memory every row), then add up through
// shared memory. Runs split over several workgroups (y) write partial rows
// that a second launch of this kernel reduces (f32 partials). Inputs and
// outputs are f32, f16 or bf16; the arithmetic is f32.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint OP = 0;  // REDUCE_SUM, _MEAN, _MAX or _MIN
layout(constant_id = 2) const uint LX = 64;  // column units per workgroup: a power of two up to 64
// Offsets, strides and the column count % 4 == 0: units of 4 elements, read at once.
layout(constant_id = 3) const bool ALIGNED = false;
layout(constant_id = 4) const uint DT_IN = DT_F32;  // DT_F32, DT_F16 or DT_BF16
layout(constant_id = 5) const uint DT_OUT = DT_F32;
const uint LY = 256u / LX;     // invocations per unit
const uint W = ALIGNED ? 4 : 1;  // elements per unit

#define PUSH_COLUMN_REDUCE
#include "push_constants.h"

layout(set = 0, binding = 0) writeonly buffer O1 { float v[]; } o1;
layout(set = 0, binding = 0) writeonly buffer O4 { vec4 v[]; } o4;
layout(set = 0, binding = 0) writeonly buffer OH { uint16_t v[]; } oh;
layout(set = 0, binding = 0) writeonly buffer OH4 { uvec2 v[]; } oh4;
layout(set = 0, binding = 1) readonly buffer I1 { float v[]; } i1;
layout(set = 0, binding = 1) readonly buffer I4 { vec4 v[]; } i4;
layout(set = 0, binding = 1) readonly buffer IH { uint16_t v[]; } ih;
layout(set = 0, binding = 1) readonly buffer IH4 { uvec2 v[]; } ih4;

// 16-bit values to f32 and back: one in the low half of a word, or four in a uvec2.
float from16(uint h) { return DT_IN == DT_F16 ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16); }
uint to16(float x) {
  return DT_OUT == DT_F16 ? packHalf2x16(vec2(x, 0.0)) & 0xffffu : uint(float_to_bf16(x));
}

// Unaligned units use lane x only; the other lanes carry the identity along.
vec4 identity() {
  if (OP == REDUCE_MAX) return vec4(uintBitsToFloat(0xff800000u));
  if (OP == REDUCE_MIN) return vec4(uintBitsToFloat(0x7f800000u));
  return vec4(0.0);
}
vec4 combine(vec4 acc, vec4 x) {
  if (OP == REDUCE_SUM || OP == REDUCE_MEAN) return acc + x;
  const vec4 m = OP == REDUCE_MAX ? max(acc, x) : min(acc, x);
  // NaN wins, as on the CPU (GLSL's max and min may drop it); acc + x is NaN there.
  return mix(m, acc + x, bvec4(uvec4(isnan(acc)) | uvec4(isnan(x))));
}
vec4 load_unit(int at) {
  if (DT_IN == DT_F32) return ALIGNED ? i4.v[at / 4] : vec4(i1.v[at], identity().yzw);
  if (!ALIGNED) return vec4(from16(uint(ih.v[at])), identity().yzw);
  const uvec2 w = ih4.v[at / 4];
  return vec4(from16(w.x & 0xffffu), from16(w.x >> 16), from16(w.y & 0xffffu), from16(w.y >> 16));
}
void store_unit(int at, vec4 x) {
  if (DT_OUT == DT_F32) {
    if (ALIGNED) o4.v[at / 4] = x;
    else o1.v[at] = x.x;
  } else if (ALIGNED) {
    oh4.v[at / 4] = uvec2(to16(x.x) | to16(x.y) << 16, to16(x.z) | to16(x.w) << 16);
  } else {
    oh.v[at] = uint16_t(to16(x.x));
  }
}

shared vec4 part[256];

void main() {
  const uint lid = gl_LocalInvocationID.x, lx = lid % LX, ly = lid / LX;
  const uint u = gl_WorkGroupID.x * LX + lx, z = gl_WorkGroupID.z;
  const uint first = gl_WorkGroupID.y * pc.run, end = min(pc.rows, first + pc.run);
  vec4 acc = identity();
  if (u < pc.units) {
    const int base = pc.offset_in + int(z) * pc.batch_stride_in + int(u * W);
    uint r = first + ly;
    for (; r + 7u * LY < end; r += 8u * LY) {
      vec4 x[8];
      [[unroll]] for (uint k = 0; k < 8; ++k) x[k] = load_unit(base + int(r + k * LY) * pc.row_stride);
      [[unroll]] for (uint k = 0; k < 8; ++k) acc = combine(acc, x[k]);
    }
    for (; r < end; r += LY) acc = combine(acc, load_unit(base + int(r) * pc.row_stride));
  }
  part[lid] = acc;
  barrier();
  for (uint s = LY / 2u; s > 0u; s >>= 1) {
    if (ly < s) part[lid] = combine(part[lid], part[lid + s * LX]);
    barrier();
  }
  if (ly != 0u || u >= pc.units) return;
  vec4 result = part[lx];
  if (pc.divide_by != 0u) result /= float(pc.divide_by);
  const int at = pc.offset_out + int(z) * pc.batch_stride_out + int(gl_WorkGroupID.y) * pc.part_stride + int(u * W);
  store_unit(at, result);
}
