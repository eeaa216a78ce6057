#version 450
// Batched SGEMM, C = alpha * op(A) op(B) + beta * C (+ bias), row-major with leading
// dims. A workgroup computes a BM x BN tile; each invocation an 8 x 8 block
// held as 2 x 2 vec4 quads half a tile apart (conflict-free shared reads).
// Sliced K (KSLICES > 1): as many groups of invocations share the tile, each
// multiplying its own part of every K-slice, and their sums meet in shared
// memory at the end. Thin products (64 x 64 tiles) get the occupancy of small
// blocks that way while keeping 8 x 8 blocks' few shared reads per multiply.
// Aligned shapes fetch the next K-slice into registers (vec4 loads) while the
// current one is used; ragged ones load bounds-checked scalars straight into
// shared memory (staging them in registers measured far slower on an H200).
//
// A and B may hold f16 or bf16 (IN_TYPE) and C f16 or bf16 (OUT_TYPE): they
// are converted on load and store, and the arithmetic stays f32 (f32
// accumulation). Specialisation constants, so the f32 pipeline compiles to the
// same code as without them.
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
layout(local_size_x_id = 0) in;  // (BM / 8) * (BN / 8) * KSLICES
layout(constant_id = 1) const uint BM = 128;
layout(constant_id = 2) const uint BN = 128;
layout(constant_id = 3) const uint BK = 16;
layout(constant_id = 4) const bool TRANS_A = false;
layout(constant_id = 5) const bool TRANS_B = false;
layout(constant_id = 6) const bool ALIGNED = false;  // tiles divide M, N, K; leading dims, offsets % 4 == 0
layout(constant_id = 7) const uint IN_TYPE = 0;   // A and B: 0 f32, 1 f16, 2 bf16
layout(constant_id = 8) const uint OUT_TYPE = 0;  // C: the same codes
// A bias vector (binding 3, C's type) added to every row of C: linear's bias
// in the epilogue, instead of a copy into C before the product.
layout(constant_id = 9) const bool HAS_BIAS = false;
// Groups of invocations splitting each K-slice (BK % KSLICES == 0; the host
// keeps BM * BK / THREADS between 4 and 16).
layout(constant_id = 10) const uint KSLICES = 1;
// max(C, 0) last: linear_relu's ReLU in the epilogue.
layout(constant_id = 11) const bool RELU = false;

// Split-K: workgroup z = batch * splits + s sums K-range [s * k_chunk, (s + 1) * k_chunk).
// - Without SLICES_MEET each slice writes its own C (batch_c apart) and the
//   host adds the slices in another pass.
// - With SLICES_MEET (gemm.cpp) each slice stores its sums in binding 4 and
//   counts itself in its tile's counter (binding 5). The tile's last slice
//   adds all of them in slice order (the bits do not depend on which finished
//   last), runs the epilogue (beta, bias, ReLU, C's type) and sets the counter
//   back to 0 for the next launch: one dispatch and no barrier for the sum.
layout(constant_id = 12) const bool SLICES_MEET = false;
// Ragged shapes whose rows are whole vec4s (each operand's contiguous extent,
// its leading dim and offsets % 4 == 0, as the K-slices): the same vec4
// fetches as ALIGNED, each bounds-checked, instead of checked scalars (the
// MLP's 784-wide products; the edge tiles and the last K-step load zeros past
// the matrices).
layout(constant_id = 13) const bool VEC4 = false;
#define PUSH_GEMM
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer A1 { float a1[]; };
layout(set = 0, binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 0) readonly buffer AH { uint16_t ah[]; };
layout(set = 0, binding = 0) readonly buffer AH4 { uvec2 ah4[]; };
layout(set = 0, binding = 1) readonly buffer B1 { float b1[]; };
layout(set = 0, binding = 1) readonly buffer B4 { vec4 b4[]; };
layout(set = 0, binding = 1) readonly buffer BH { uint16_t bh[]; };
layout(set = 0, binding = 1) readonly buffer BH4 { uvec2 bh4[]; };
layout(set = 0, binding = 2) buffer C1 { float c1[]; };
layout(set = 0, binding = 2) buffer C4 { vec4 c4[]; };
layout(set = 0, binding = 2) buffer CH { uint16_t ch[]; };
layout(set = 0, binding = 2) buffer CH4 { uvec2 ch4[]; };
layout(set = 0, binding = 3) readonly buffer Z1 { float z1[]; };
layout(set = 0, binding = 3) readonly buffer Z4 { vec4 z4[]; };
layout(set = 0, binding = 3) readonly buffer ZH { uint16_t zh[]; };
layout(set = 0, binding = 3) readonly buffer ZH4 { uvec2 zh4[]; };
layout(set = 0, binding = 4) coherent buffer Parts { vec4 parts[]; };
layout(set = 0, binding = 5) coherent buffer Counters { uint counters[]; };
shared bool last_slice;

// 16-bit conversions: one element, or four packed in a uvec2 (element 4i in the low half of .x).
float from16(uint type, uint h) { return type == 1u ? unpackHalf2x16(h).x : uintBitsToFloat(h << 16); }
vec4 from16x4(uint type, uvec2 w) {
  if (type == 1u) return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
  return vec4(uintBitsToFloat(w.x << 16), uintBitsToFloat(w.x & 0xffff0000u), uintBitsToFloat(w.y << 16),
              uintBitsToFloat(w.y & 0xffff0000u));
}
uint to_bf16(float x) {
  uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN stays NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;        // round to nearest even
}
uint to16(uint type, float x) { return type == 1u ? packHalf2x16(vec2(x, 0.0)) & 0xffffu : to_bf16(x); }
uvec2 to16x4(uint type, vec4 v) {
  if (type == 1u) return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  return uvec2(to_bf16(v.x) | (to_bf16(v.y) << 16), to_bf16(v.z) | (to_bf16(v.w) << 16));
}

float load_a(uint i) {
  if (IN_TYPE == 0u) return a1[i];
  return from16(IN_TYPE, uint(ah[i]));
}
float load_b(uint i) {
  if (IN_TYPE == 0u) return b1[i];
  return from16(IN_TYPE, uint(bh[i]));
}
vec4 load_a4(uint i4) {
  if (IN_TYPE == 0u) return a4[i4];
  return from16x4(IN_TYPE, ah4[i4]);
}
vec4 load_b4(uint i4) {
  if (IN_TYPE == 0u) return b4[i4];
  return from16x4(IN_TYPE, bh4[i4]);
}
float load_c(uint i) {
  if (OUT_TYPE == 0u) return c1[i];
  return from16(OUT_TYPE, uint(ch[i]));
}
vec4 load_c4(uint i4) {
  if (OUT_TYPE == 0u) return c4[i4];
  return from16x4(OUT_TYPE, ch4[i4]);
}
float load_bias(uint n) {
  if (!HAS_BIAS) return 0.0;
  if (OUT_TYPE == 0u) return z1[pc.offset_bias + n];
  return from16(OUT_TYPE, uint(zh[pc.offset_bias + n]));
}
vec4 load_bias4(uint n) {  // n and offset_bias % 4 == 0
  if (!HAS_BIAS) return vec4(0.0);
  if (OUT_TYPE == 0u) return z4[(pc.offset_bias + n) / 4];
  return from16x4(OUT_TYPE, zh4[(pc.offset_bias + n) / 4]);
}
void store_c(uint i, float v) {
  if (OUT_TYPE == 0u) c1[i] = v;
  else ch[i] = uint16_t(to16(OUT_TYPE, v));
}
void store_c4(uint i4, vec4 v) {
  if (OUT_TYPE == 0u) c4[i4] = v;
  else ch4[i4] = to16x4(OUT_TYPE, v);
}

const uint TILE_THREADS = (BM / 8) * (BN / 8);  // invocations of one group
const uint THREADS = TILE_THREADS * KSLICES;
const uint AS = BM / 4 + 1;  // k-major rows of vec4, padded
const uint BS = BN / 4;
const uint LA = BM * BK / THREADS;  // A elements each invocation fetches per slice
const uint LB = BN * BK / THREADS;
shared vec4 As[BK * AS];
shared vec4 Bs[BK * BS];
const uint RED = KSLICES == 1u ? 1u : TILE_THREADS * 16u;
shared vec4 red[RED];  // one group's 8 x 8 blocks at a time, for the first group to add

float ra[16];
float rb[16];
uint base_a, base_b, bm, bn, k_end, next_k;

// A(m, k) and B(k, n) of this batch; zero outside the matrices.
float get_a(uint m, uint k) {
  if (m >= pc.M || k >= k_end) return 0.0;
  return load_a(base_a + (TRANS_A ? k * pc.lda + m : m * pc.lda + k));
}
float get_b(uint k, uint n) {
  if (k >= k_end || n >= pc.N) return 0.0;
  return load_b(base_b + (TRANS_B ? n * pc.ldb + k : k * pc.ldb + n));
}

// Tile-local coordinates of fetch p: consecutive invocations walk the
// contiguous direction of each matrix so global reads coalesce.
uvec2 a_coord(uint idx) { return TRANS_A ? uvec2(idx % BM, idx / BM) : uvec2(idx / BK, idx % BK); }
uvec2 b_coord(uint idx) { return TRANS_B ? uvec2(idx % BK, idx / BK) : uvec2(idx / BN, idx % BN); }

void fetch(uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  if (ALIGNED || VEC4) {
    for (uint p = 0; p < LA / 4; ++p) {
      uint idx = tid + p * THREADS;
      vec4 v = vec4(0.0);
      if (TRANS_A) {
        uint k = idx / (BM / 4), m = (idx % (BM / 4)) * 4;
        if (ALIGNED || (k0 + k < k_end && bm + m < pc.M)) v = load_a4((base_a + (k0 + k) * pc.lda + bm + m) / 4);
      } else {
        uint m = idx / (BK / 4), k = (idx % (BK / 4)) * 4;
        if (ALIGNED || (bm + m < pc.M && k0 + k < k_end)) v = load_a4((base_a + (bm + m) * pc.lda + k0 + k) / 4);
      }
      ra[4 * p] = v.x; ra[4 * p + 1] = v.y; ra[4 * p + 2] = v.z; ra[4 * p + 3] = v.w;
    }
    for (uint p = 0; p < LB / 4; ++p) {
      uint idx = tid + p * THREADS;
      vec4 v = vec4(0.0);
      if (TRANS_B) {
        uint n = idx / (BK / 4), k = (idx % (BK / 4)) * 4;
        if (ALIGNED || (bn + n < pc.N && k0 + k < k_end)) v = load_b4((base_b + (bn + n) * pc.ldb + k0 + k) / 4);
      } else {
        uint k = idx / (BN / 4), n = (idx % (BN / 4)) * 4;
        if (ALIGNED || (k0 + k < k_end && bn + n < pc.N)) v = load_b4((base_b + (k0 + k) * pc.ldb + bn + n) / 4);
      }
      rb[4 * p] = v.x; rb[4 * p + 1] = v.y; rb[4 * p + 2] = v.z; rb[4 * p + 3] = v.w;
    }
  } else {
    next_k = k0;  // stash() loads it
  }
}

void put_a(uint m, uint k, float v) { As[k * AS + m / 4][m % 4] = v; }
void put_b(uint k, uint n, float v) { Bs[k * BS + n / 4][n % 4] = v; }

void stash() {
  const uint tid = gl_LocalInvocationID.x;
  if (ALIGNED || VEC4) {
    for (uint p = 0; p < LA / 4; ++p) {
      uint idx = tid + p * THREADS;
      vec4 v = vec4(ra[4 * p], ra[4 * p + 1], ra[4 * p + 2], ra[4 * p + 3]);
      if (TRANS_A) { uint k = idx / (BM / 4), m4 = idx % (BM / 4); As[k * AS + m4] = v; }
      else { uint m = idx / (BK / 4), k = (idx % (BK / 4)) * 4; for (uint j = 0; j < 4; ++j) put_a(m, k + j, v[j]); }
    }
    for (uint p = 0; p < LB / 4; ++p) {
      uint idx = tid + p * THREADS;
      vec4 v = vec4(rb[4 * p], rb[4 * p + 1], rb[4 * p + 2], rb[4 * p + 3]);
      if (TRANS_B) { uint n = idx / (BK / 4), k = (idx % (BK / 4)) * 4; for (uint j = 0; j < 4; ++j) put_b(k + j, n, v[j]); }
      else { uint k = idx / (BN / 4), n4 = idx % (BN / 4); Bs[k * BS + n4] = v; }
    }
  } else {
    [[unroll]] for (uint p = 0; p < LA; ++p) {
      uvec2 mk = a_coord(tid + p * THREADS);
      put_a(mk.x, mk.y, get_a(bm + mk.x, next_k + mk.y));
    }
    [[unroll]] for (uint p = 0; p < LB; ++p) {
      uvec2 kn = b_coord(tid + p * THREADS);
      put_b(kn.x, kn.y, get_b(next_k + kn.x, bn + kn.y));
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint group = tid / TILE_THREADS, tt = tid % TILE_THREADS;
  const uint tx = tt % (BN / 8), ty = tt / (BN / 8);
  const uint z = gl_WorkGroupID.z / pc.splits, split = gl_WorkGroupID.z % pc.splits;
  bm = gl_WorkGroupID.y * BM;
  bn = gl_WorkGroupID.x * BN;
  base_a = pc.offset_a + z * pc.batch_a;
  base_b = pc.offset_b + z * pc.batch_b;
  const uint k_begin = split * pc.k_chunk;
  k_end = min(pc.K, k_begin + pc.k_chunk);

  vec4 acc[16];  // quad row h, row r (0..3), quad column q at 2 * r + 8 * h + q
  for (uint i = 0; i < 16; ++i) acc[i] = vec4(0.0);

  fetch(k_begin);
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    stash();
    barrier();
    if (k0 + BK < k_end) fetch(k0 + BK);
    for (uint kk = 0; kk < BK / KSLICES; ++kk) {
      const uint k = group * (BK / KSLICES) + kk;
      vec4 a0 = As[k * AS + ty], a1v = As[k * AS + ty + BM / 8];
      vec4 b0 = Bs[k * BS + tx], b1v = Bs[k * BS + tx + BN / 8];
      for (uint r = 0; r < 4; ++r) {
        acc[2 * r] += a0[r] * b0;
        acc[2 * r + 1] += a0[r] * b1v;
        acc[2 * r + 8] += a1v[r] * b0;
        acc[2 * r + 9] += a1v[r] * b1v;
      }
    }
    barrier();
  }
  if (KSLICES > 1u) {  // the other groups' sums into the first group's, one group at a time
    for (uint s = 1; s < KSLICES; ++s) {
      if (group == s) [[unroll]] for (uint i = 0; i < 16; ++i) red[i * TILE_THREADS + tt] = acc[i];
      barrier();
      if (group == 0u) [[unroll]] for (uint i = 0; i < 16; ++i) acc[i] += red[i * TILE_THREADS + tt];
      barrier();
    }
    if (!SLICES_MEET && group != 0u) return;
  }
  uint c_index = gl_WorkGroupID.z;  // a slice's own C without SLICES_MEET
  if (SLICES_MEET) {
    c_index = z;
    if (pc.splits > 1u) {
      const uint tile = (z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
      const uint first = tile * pc.splits;  // slice s's vec4 i of invocation tt: ((first + s) * 16 + i) * TILE_THREADS + tt
      if (group == 0u) [[unroll]] for (uint i = 0; i < 16; ++i) parts[((first + split) * 16u + i) * TILE_THREADS + tt] = acc[i];
      memoryBarrierBuffer();  // the sums reach the device before the count does
      barrier();
      if (tid == 0u) last_slice = atomicAdd(counters[tile], 1u) == pc.splits - 1u;
      barrier();
      if (!last_slice) return;  // uniform: a shared flag
      memoryBarrierBuffer();
      if (group == 0u) {
        [[unroll]] for (uint i = 0; i < 16; ++i) acc[i] = vec4(0.0);
        for (uint s = 0; s < pc.splits; ++s)
          [[unroll]] for (uint i = 0; i < 16; ++i) acc[i] += parts[((first + s) * 16u + i) * TILE_THREADS + tt];
      }
      if (tid == 0u) counters[tile] = 0u;
    }
    if (group != 0u) return;
  }

  const uint base_c = pc.offset_c + c_index * pc.batch_c;
  if (ALIGNED) {
    for (uint h = 0; h < 2; ++h) {
      for (uint r = 0; r < 4; ++r) {
        uint m = bm + ty * 4 + h * (BM / 2) + r;
        for (uint q = 0; q < 2; ++q) {
          const uint n = bn + tx * 4 + q * (BN / 2), at = base_c + m * pc.ldc + n;
          vec4 v = pc.alpha * acc[2 * r + 8 * h + q];
          if (pc.beta != 0.0) v += pc.beta * load_c4(at / 4);
          if (HAS_BIAS) v += load_bias4(n);
          if (RELU) v = mix(vec4(0.0), v, greaterThan(v, vec4(0.0)));  // NaN -> 0, as the relu kernel
          store_c4(at / 4, v);
        }
      }
    }
    return;
  }
  // Ragged edges: fully unrolled, so acc stays in registers (measured 13x faster on an H200).
  [[unroll]] for (uint h = 0; h < 2; ++h) {
    [[unroll]] for (uint r = 0; r < 4; ++r) {
      uint m = bm + ty * 4 + h * (BM / 2) + r;
      if (m >= pc.M) continue;
      [[unroll]] for (uint q = 0; q < 2; ++q) {
        uint n = bn + tx * 4 + q * (BN / 2);
        vec4 v = pc.alpha * acc[2 * r + 8 * h + q];
        uint at = base_c + m * pc.ldc + n;
        [[unroll]] for (uint j = 0; j < 4; ++j) {
          if (n + j < pc.N) {
            float x = (pc.beta != 0.0 ? v[j] + pc.beta * load_c(at + j) : v[j]) + load_bias(n + j);
            if (RELU) x = x > 0.0 ? x : 0.0;
            store_c(at + j, x);
          }
        }
      }
    }
  }
}
