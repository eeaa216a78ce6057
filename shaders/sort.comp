#version 450
// Bitonic sort of each row of a contiguous [rows, n] view, in passes over the
// whole grid (the host runs every (k, j) pass in order). The row's positions
// are sorted in `indices` by the values they name, so every step compares
// (value, position) keys: equal values keep their order (stable) and NaN
// sorts as the largest value. Every block is sorted ascending in key order and
// merged from its mirror pairs first, so the rows padded to a power of two
// only ever compare real positions with padding that stays where it is: those
// pairs are skipped, and nothing past n is stored.
//
// Passes whose pairs lie within blocks of 512 positions run in shared memory,
// one workgroup per (row, block), many passes per dispatch: stage 3 sorts each
// block from scratch (every block size up to 512), stage 4 runs the passes
// j = 256 ... 1 of a merge of blocks of k > 512. Only the passes with j >= 512
// go through global memory, one dispatch each.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;

#define PUSH_SORT
#include "push_constants.h"

TENSOR(0)  // values, in's dtype
TENSOR(1)  // indices, i64
TENSOR(2)  // in

uint position(uint at) { return t1u.v[2u * (uint(pc.off_indices) + at)]; }
void set_position(uint at, uint p) {
  t1u.v[2u * (uint(pc.off_indices) + at)] = p;
  t1u.v[2u * (uint(pc.off_indices) + at) + 1u] = 0u;
}

// Whether (va, pa) must come after (vb, pb) in the row's order.
bool after(REAL va, uint pa, REAL vb, uint pb) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return pc.descending != 0u ? nb : na;
  if (!na && va != vb) return pc.descending != 0u ? va < vb : va > vb;
  return pa > pb;
}

#define BLOCK 512u
shared REAL block_value[BLOCK];
shared uint block_position[BLOCK];

// One compare-exchange pass over the block held in shared memory, whose first
// position in the row is `first`; invocation t takes one pair.
void block_pass(uint t, uint first, uint k, uint j, bool flip) {
  uint a, b;
  if (flip) {
    const uint half_k = k / 2u, q = t % half_k;
    a = (t / half_k) * k + q;
    b = (t / half_k) * k + k - 1u - q;
  } else {
    a = (t / j) * 2u * j + t % j;
    b = a + j;
  }
  if (first + b < pc.n &&
      after(block_value[a], block_position[a], block_value[b], block_position[b])) {
    const REAL v = block_value[a];
    const uint p = block_position[a];
    block_value[a] = block_value[b];
    block_position[a] = block_position[b];
    block_value[b] = v;
    block_position[b] = p;
  }
}

void block_stages() {
  const uint t = gl_LocalInvocationID.x, size = min(pc.padded, BLOCK), blocks = pc.padded / size;
  for (uint g = gl_WorkGroupID.x; g < pc.rows * blocks; g += gl_NumWorkGroups.x) {
    const uint row = g / blocks, first = (g % blocks) * size, in_row = uint(pc.off_in) + row * pc.n;
    for (uint e = t; e < size; e += gl_WorkGroupSize.x) {
      const uint at = first + e;
      if (at < pc.n) {
        block_position[e] = pc.stage == 3u ? at : position(row * pc.n + at);
        block_value[e] = load2(DT, in_row + block_position[e]);
      }
    }
    barrier();
    const bool pairing = t < size / 2u;
    if (pc.stage == 3u) {
      for (uint k = 2u; k <= size; k <<= 1u) {
        if (pairing) block_pass(t, first, k, 0u, true);
        barrier();
        for (uint j = k / 4u; j > 0u; j >>= 1u) {
          if (pairing) block_pass(t, first, k, j, false);
          barrier();
        }
      }
    } else {
      for (uint j = BLOCK / 2u; j > 0u; j >>= 1u) {
        if (pairing) block_pass(t, first, pc.k, j, false);
        barrier();
      }
    }
    for (uint e = t; e < size; e += gl_WorkGroupSize.x)
      if (first + e < pc.n) set_position(row * pc.n + first + e, block_position[e]);
    barrier();
  }
}

void main() {
  if (pc.stage >= 3u) {
    block_stages();
    return;
  }
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (pc.stage == 2u) {
    for (uint i = gl_GlobalInvocationID.x; i < pc.rows * pc.n; i += step)
      store0(DT, uint(pc.off_values) + i, load2(DT, uint(pc.off_in) + (i / pc.n) * pc.n + position(i)));
    return;
  }
  const uint half_row = pc.padded / 2u;
  for (uint i = gl_GlobalInvocationID.x; i < pc.rows * half_row; i += step) {
    const uint row = i / half_row, p = i % half_row;
    uint a, b;
    if (pc.flip != 0u) {  // the block's q-th element against its mirror
      const uint half_k = pc.k / 2u, q = p % half_k;
      a = (p / half_k) * pc.k + q;
      b = (p / half_k) * pc.k + pc.k - 1u - q;
    } else {
      a = (p / pc.j) * 2u * pc.j + p % pc.j;
      b = a + pc.j;
    }
    if (b >= pc.n) continue;  // padding: larger than everything, never moves
    const uint at_a = row * pc.n + a, at_b = row * pc.n + b;
    const uint pa = position(at_a), pb = position(at_b);
    const uint in_row = uint(pc.off_in) + row * pc.n;
    if (after(load2(DT, in_row + pa), pa, load2(DT, in_row + pb), pb)) {
      set_position(at_a, pb);
      set_position(at_b, pa);
    }
  }
}
