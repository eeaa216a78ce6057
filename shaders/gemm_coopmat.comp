#version 450
// f16 GEMM on the matrix units through cooperative matrices (VK_NV_cooperative_matrix):
// C = alpha * op(A) op(B) + beta * C, row-major with leading dims, A and B f16,
// accumulation in f32, C f32 or f16. A workgroup computes a BM x BN tile; each
// subgroup a WM x WN part of it as (WM / LM) x (WN / LN) accumulators of the
// device's LM x LN x LK shape. Slices of BK along K go global -> registers ->
// shared, double-buffered: the next slice is fetched and stored into the other
// buffer while the current one is multiplied, one barrier per slice.
// Tiles are stored in shared memory in the operand's own orientation and read
// back row- or column-major, so transposes cost nothing. Edges that do not
// divide the tile are zero-padded on load and bounds-checked on store.
// Split-K (few tiles, long K): workgroup z = batch * splits + s sums K-range
// [s * k_chunk, (s + 1) * k_chunk) into its own f32 slice of C (batch_c
// apart); the host adds the slices.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;  // (BM / WM) * (BN / WN) * SUBGROUP
layout(constant_id = 1) const uint LM = 16;  // one matrix-unit product: LM x LK times LK x LN
layout(constant_id = 2) const uint LN = 8;
layout(constant_id = 3) const uint LK = 16;
layout(constant_id = 4) const uint BM = 128;
layout(constant_id = 5) const uint BN = 128;
layout(constant_id = 6) const uint WM = 64;
layout(constant_id = 7) const uint WN = 64;
layout(constant_id = 8) const bool TRANS_A = false;
layout(constant_id = 9) const bool TRANS_B = false;
layout(constant_id = 10) const bool C_F16 = false;
// Leading dims, offsets, batch strides and M, N, K all % 8 == 0: 16-byte loads,
// each wholly inside or outside the matrix, and direct stores of whole tiles.
layout(constant_id = 11) const bool ALIGNED = false;
layout(constant_id = 12) const uint SUBGROUP = 32;
layout(constant_id = 13) const uint BK = 32;  // 32 or 64: longer rows of A per fetch

#define PUSH_GEMM
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer A8 { uvec4 a8[]; };
layout(set = 0, binding = 0) readonly buffer A1 { float16_t a1[]; };
layout(set = 0, binding = 1) readonly buffer B8 { uvec4 b8[]; };
layout(set = 0, binding = 1) readonly buffer B1 { float16_t b1[]; };
layout(set = 0, binding = 2) buffer C32 { float c32[]; };
layout(set = 0, binding = 2) buffer C16 { float16_t c16[]; };

const uint THREADS = (BM / WM) * (BN / WN) * SUBGROUP;
// Shared tiles in units of 8 halves (uvec4), rows padded by one unit against bank conflicts.
const uint A_ROWS = TRANS_A ? BK : BM;
const uint A_UNITS = (TRANS_A ? BM : BK) / 8;
const uint A_STRIDE = A_UNITS + 1;
const uint B_ROWS = TRANS_B ? BN : BK;
const uint B_UNITS = (TRANS_B ? BK : BN) / 8;
const uint B_STRIDE = B_UNITS + 1;
const uint LOADS_A = A_ROWS * A_UNITS / THREADS;
const uint LOADS_B = B_ROWS * B_UNITS / THREADS;
const uint A_SIZE = A_ROWS * A_STRIDE;
const uint B_SIZE = B_ROWS * B_STRIDE;
shared uvec4 As[2 * A_SIZE];
shared uvec4 Bs[2 * B_SIZE];
// One accumulator per subgroup at a time, for the bounds-checked store.
shared float Cs[(THREADS / SUBGROUP) * LM * LN];

uvec4 ra[LOADS_A];
uvec4 rb[LOADS_B];
uint base_a, base_b, bm, bn;

// 8 consecutive halves of a row-major matrix (rows x cols, leading dim ld) from
// (row, col); zeros outside it.
uvec4 load8(bool is_a, uint base, uint ld, uint row, uint col, uint rows, uint cols) {
  if (ALIGNED) {
    if (row >= rows || col >= cols) return uvec4(0);
    uint at = (base + row * ld + col) / 8;
    return is_a ? a8[at] : b8[at];
  }
  float16_t h[8];
  [[unroll]] for (uint j = 0; j < 8; ++j) {
    h[j] = float16_t(0.0);
    if (row < rows && col + j < cols) {
      uint at = base + row * ld + col + j;
      h[j] = is_a ? a1[at] : b1[at];
    }
  }
  return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])),
               packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7])));
}

// Consecutive invocations take consecutive units of a row: coalesced reads.
void fetch(uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint p = 0; p < LOADS_A; ++p) {
    uint idx = tid + p * THREADS, r = idx / A_UNITS, u = idx % A_UNITS;
    ra[p] = TRANS_A ? load8(true, base_a, pc.lda, k0 + r, bm + 8 * u, pc.K, pc.M)
                    : load8(true, base_a, pc.lda, bm + r, k0 + 8 * u, pc.M, pc.K);
  }
  [[unroll]] for (uint p = 0; p < LOADS_B; ++p) {
    uint idx = tid + p * THREADS, r = idx / B_UNITS, u = idx % B_UNITS;
    rb[p] = TRANS_B ? load8(false, base_b, pc.ldb, bn + r, k0 + 8 * u, pc.N, pc.K)
                    : load8(false, base_b, pc.ldb, k0 + r, bn + 8 * u, pc.K, pc.N);
  }
}

void stash(uint buf) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint p = 0; p < LOADS_A; ++p) {
    uint idx = tid + p * THREADS;
    As[buf * A_SIZE + (idx / A_UNITS) * A_STRIDE + idx % A_UNITS] = ra[p];
  }
  [[unroll]] for (uint p = 0; p < LOADS_B; ++p) {
    uint idx = tid + p * THREADS;
    Bs[buf * B_SIZE + (idx / B_UNITS) * B_STRIDE + idx % B_UNITS] = rb[p];
  }
}

const uint FM = WM / LM;  // accumulators per subgroup: FM x FN
const uint FN = WN / LN;

void main() {
  const uint warp = gl_LocalInvocationID.x / SUBGROUP, lane = gl_LocalInvocationID.x % SUBGROUP;
  // Tiles in groups of 8 rows of tiles, column by column inside a group, so
  // workgroups running together share A and B slices in the L2 cache.
  const uint grid_m = (pc.M + BM - 1) / BM, grid_n = (pc.N + BN - 1) / BN;
  const uint pid = gl_WorkGroupID.x, per_group = 8 * grid_n;
  const uint first_m = (pid / per_group) * 8, group_m = min(grid_m - first_m, 8u);
  const uint tile_m = first_m + (pid % per_group) % group_m, tile_n = (pid % per_group) / group_m;
  bm = tile_m * BM;
  bn = tile_n * BN;
  const uint z = gl_WorkGroupID.z / pc.splits, split = gl_WorkGroupID.z % pc.splits;
  const uint k_begin = split * pc.k_chunk, k_end = min(pc.K, k_begin + pc.k_chunk);  // k_chunk % BK == 0
  base_a = pc.offset_a + z * pc.batch_a;
  base_b = pc.offset_b + z * pc.batch_b;
  const uint wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;

  fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> acc[FM][FN];
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, LM, LN>(0.0);

  uint buf = 0;
  if (k_begin < k_end) {
    fetch(k_begin);
    stash(0);
  }
  barrier();
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    const bool more = k0 + BK < k_end;
    if (more) fetch(k0 + BK);
    const uint sa = buf * A_SIZE, sb = buf * B_SIZE;
    [[unroll]] for (uint kk = 0; kk < BK; kk += LK) {
      fcoopmatNV<16, gl_ScopeSubgroup, LM, LK> fa[FM];
      fcoopmatNV<16, gl_ScopeSubgroup, LK, LN> fb[FN];
      [[unroll]] for (uint i = 0; i < FM; ++i) {
        uint m = wm + i * LM;
        if (TRANS_A) coopMatLoadNV(fa[i], As, sa + kk * A_STRIDE + m / 8, A_STRIDE, true);
        else coopMatLoadNV(fa[i], As, sa + m * A_STRIDE + kk / 8, A_STRIDE, false);
      }
      [[unroll]] for (uint j = 0; j < FN; ++j) {
        uint n = wn + j * LN;
        if (TRANS_B) coopMatLoadNV(fb[j], Bs, sb + n * B_STRIDE + kk / 8, B_STRIDE, true);
        else coopMatLoadNV(fb[j], Bs, sb + kk * B_STRIDE + n / 8, B_STRIDE, false);
      }
      [[unroll]] for (uint i = 0; i < FM; ++i)
        [[unroll]] for (uint j = 0; j < FN; ++j) acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
    }
    // The other buffer was last read before the previous barrier.
    if (more) stash(buf ^ 1);
    barrier();
    buf ^= 1;
  }

  const uint base_c = pc.offset_c + gl_WorkGroupID.z * pc.batch_c;  // z * batch_c without split-K
  const float alpha = pc.alpha, beta = pc.beta;
  if (ALIGNED && bm + BM <= pc.M && bn + BN <= pc.N) {
    // Whole tile inside C: each accumulator straight to memory.
    [[unroll]] for (uint i = 0; i < FM; ++i)
      [[unroll]] for (uint j = 0; j < FN; ++j) {
        uint at = base_c + (bm + wm + i * LM) * pc.ldc + bn + wn + j * LN;
        fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> v = acc[i][j] * alpha;
        if (C_F16) {
          if (beta != 0.0) {
            fcoopmatNV<16, gl_ScopeSubgroup, LM, LN> old;
            coopMatLoadNV(old, c16, at, pc.ldc, false);
            v = v + fcoopmatNV<32, gl_ScopeSubgroup, LM, LN>(old) * beta;
          }
          fcoopmatNV<16, gl_ScopeSubgroup, LM, LN> h = fcoopmatNV<16, gl_ScopeSubgroup, LM, LN>(v);
          coopMatStoreNV(h, c16, at, pc.ldc, false);
        } else {
          if (beta != 0.0) {
            fcoopmatNV<32, gl_ScopeSubgroup, LM, LN> old;
            coopMatLoadNV(old, c32, at, pc.ldc, false);
            v = v + old * beta;
          }
          coopMatStoreNV(v, c32, at, pc.ldc, false);
        }
      }
    return;
  }
  // Edges: each accumulator through this subgroup's shared slot, then element by element.
  const uint slot = warp * LM * LN;
  [[unroll]] for (uint i = 0; i < FM; ++i)
    [[unroll]] for (uint j = 0; j < FN; ++j) {
      coopMatStoreNV(acc[i][j], Cs, slot, LN, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < LM * LN; e += SUBGROUP) {
        uint m = bm + wm + i * LM + e / LN, n = bn + wn + j * LN + e % LN;
        if (m < pc.M && n < pc.N) {
          uint at = base_c + m * pc.ldc + n;
          float v = alpha * Cs[slot + e];
          if (C_F16) {
            if (beta != 0.0) v += beta * float(c16[at]);
            c16[at] = float16_t(v);
          } else {
            if (beta != 0.0) v += beta * c32[at];
            c32[at] = v;
          }
        }
      }
      subgroupBarrier();  // the slot is read before the next accumulator overwrites it
    }
}
