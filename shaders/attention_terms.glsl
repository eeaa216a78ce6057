// What the tiled attention kernels (attention_tiled, attention_blocked,
// attention_blocked_backward, attention_grid, attention_coopmat) share: the
// mask's term in a score, the dropout multiplier, and row access 16 bytes at
// a time. Included after the push constants (PUSH_ATTENTION); the row macros
// need the kernel's ALIGNED constant, row_delta its O and dO bindings
// (ATTENTION_ROW_DELTA), the blocked and grid kernels' tile helpers their DU
// and PER and a workgroup of 128 (ATTENTION_BLOCKED_TILES), and their sums
// over the 8 neighbouring lanes of a row subgroup shuffles
// (ATTENTION_ROW_SHUFFLES).

#define NEG_INF uintBitsToFloat(0xff800000u)

// Philox4x32-10, the mapping of src/backend/philox.hpp, random.comp and attention.comp.
#include "philox.glsl"

// The dropout multiplier of weight (i, j): weight e = (bh * lq + i) * lk + j
// takes word e % 4 of draw counter + e / 4. Consecutive calls along a row
// reuse the last draw (four weights per draw).
uint64_t cached_counter = ~0ul;
uvec4 cached_draw;
float dropout_factor(uint bh, uint i, uint j) {
  if (pc.dropout_threshold == 0u) return 1.0;
  const uint64_t e = (uint64_t(bh) * uint64_t(pc.lq) + uint64_t(i)) * uint64_t(pc.lk) + uint64_t(j);
  const uint64_t counter = (uint64_t(pc.counter_hi) << 32 | uint64_t(pc.counter_lo)) + (e >> 2);
  if (counter != cached_counter) {
    cached_counter = counter;
    cached_draw = philox(uvec2(pc.seed_lo, pc.seed_hi), uvec2(uint(counter), uint(counter >> 32)));
  }
  return (cached_draw[uint(e & 3ul)] >> 8) >= pc.dropout_threshold ? pc.keep_scale : 0.0;
}

// The dropout multipliers of weights (i, j + c), c < 4, for j % 4 == 0. Where
// lk % 4 == 0 the four share one draw, taken whole: against dropout_factor()
// per weight (a cached draw indexed by a variable) the attention kernels ran
// about 12 % faster on one GPU.
vec4 dropout_factors4(uint bh, uint i, uint j) {
  if (pc.dropout_threshold == 0u) return vec4(1.0);
  if (pc.lk % 4u != 0u)
    return vec4(dropout_factor(bh, i, j), dropout_factor(bh, i, j + 1u), dropout_factor(bh, i, j + 2u),
                dropout_factor(bh, i, j + 3u));
  const uint64_t e = (uint64_t(bh) * uint64_t(pc.lq) + uint64_t(i)) * uint64_t(pc.lk) + uint64_t(j);
  const uint64_t counter = (uint64_t(pc.counter_hi) << 32 | uint64_t(pc.counter_lo)) + (e >> 2);
  const uvec4 draw = philox(uvec2(pc.seed_lo, pc.seed_hi), uvec2(uint(counter), uint(counter >> 32)));
  return mix(vec4(0.0), vec4(pc.keep_scale), greaterThanEqual(draw >> 8u, uvec4(pc.dropout_threshold)));
}

// The row block and (batch, head) of this workgroup. Workgroups start in
// the order of their IDs, x fastest. Under a causal mask a block's work
// grows (query blocks) or falls (key blocks) with x, so blocks are handed
// out heaviest first across all heads: the last wave is then made of light
// blocks instead of a few long ones running on an idle GPU.
uvec2 attention_block(bool work_grows_with_x) {
  uint x = gl_WorkGroupID.x, bh = gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y;
  if (ATT_CAUSAL) {
    const uint heads = gl_NumWorkGroups.y * gl_NumWorkGroups.z, id = x + gl_NumWorkGroups.x * bh;
    x = id / heads;
    bh = id % heads;
    if (work_grows_with_x) x = gl_NumWorkGroups.x - 1u - x;
  }
  return uvec2(x, bh);
}

// The mask's contribution to score (i, j): -inf where masked or out of range.
float mask_term(uint bh, uint i, uint j) {
  if (i >= pc.lq || j >= pc.lk) return NEG_INF;
  if (ATT_CAUSAL && j > i) return NEG_INF;
  if (ATT_MASK_KIND == 0u) return 0.0;
  const uint b = bh / pc.heads, h = bh % pc.heads;
  const int m = pc.mask_off + int(b) * pc.mask_stride[0] + int(h) * pc.mask_stride[1] + int(i) * pc.mask_stride[2] +
                int(j) * pc.mask_stride[3];
  const float mv = load5(ATT_MASK_DT, uint(m));
  if (ATT_MASK_KIND == 1u) return mv == 0.0 ? NEG_INF : 0.0;
  return mv;
}

// Columns [col, col + 4) of the row at `at` of a matrix `width` wide; zeros
// past `width`. One 16-byte load when ALIGNED (src4: the binding's vec4 view).
#define SCALAR_AT(src, at, col, w, width) ((col) + (w) < (width) ? src[(at) + int((col) + (w))] : 0.0)
#define LOAD_RUN(src, src4, at, col, width)                                              \
  (ALIGNED ? ((col) < (width) ? src4[((at) + int(col)) / 4] : vec4(0.0))                 \
           : vec4(SCALAR_AT(src, at, col, 0, width), SCALAR_AT(src, at, col, 1, width),  \
                  SCALAR_AT(src, at, col, 2, width), SCALAR_AT(src, at, col, 3, width)))
#define STORE_RUN(dst, at, col, width, x) \
  [[unroll]] for (uint w = 0; w < 4; ++w) if ((col) + w < (width)) dst[(at) + int((col) + w)] = (x)[w];

#ifdef ATTENTION_ROW_DELTA
// dO_i . O_i over columns [c0, c1) of row i (16-byte loads when ALIGNED).
float row_delta(uint bh, uint i, uint c0, uint c1) {
  const int go = GO_ROW(bh, i), oo = O_ROW(bh, i);
  float acc = 0.0;
  if (ALIGNED) {
    for (uint c = c0; c < c1; c += 4) acc += dot(go4_.v[(go + int(c)) / 4], o4_.v[(oo + int(c)) / 4]);
  } else {
    for (uint c = c0; c < c1; ++c) acc += go_.v[go + int(c)] * o_.v[oo + int(c)];
  }
  return acc;
}
#endif

#ifdef ATTENTION_BLOCKED_TILES
// Where unit u of row `row` of a shared tile lives (DU units a row). Key
// tiles xor the unit with row / 4, so the 8 invocations reading rows 4a + c
// at one unit hit distinct banks; query tiles with row / 2, for 4
// invocations reading rows 2b + e.
uint key_at(uint row, uint u) { return row * DU + (u ^ ((row >> 2) & 7u)); }
uint query_at(uint row, uint u) { return row * DU + (u ^ ((row >> 1) & 7u)); }

// This invocation's share (PER units) of rows [first, first + 128 PER / DU)
// of a [rows, width] matrix at `base` (rows `stride` apart), into registers `regs`, and from there
// into a tile laid out by `at` (key_at or query_at).
#define FETCH_TILE(regs, src, src4, base, stride, first, rows, width)                             \
  [[unroll]] for (uint f = 0; f < PER; ++f) {                                                     \
    const uint e = gl_LocalInvocationID.x + 128u * f, r = e / DU, u = e % DU;                     \
    regs[f] = (first) + r < (rows) ? LOAD_RUN(src, src4, (base) + int(((first) + r) * (stride)), 4 * u, width) : vec4(0.0); \
  }
#define STORE_TILE(dst, regs, at)                                                                 \
  [[unroll]] for (uint f = 0; f < PER; ++f) {                                                     \
    const uint e = gl_LocalInvocationID.x + 128u * f;                                             \
    dst[at(e / DU, e % DU)] = regs[f];                                                            \
  }
#endif

#ifdef ATTENTION_ROW_SHUFFLES
// The sum (or maximum) over the 8 neighbouring invocations of a row: three xor shuffles.
float row_sum(float x) {
  x += subgroupShuffleXor(x, 1u);
  x += subgroupShuffleXor(x, 2u);
  return x + subgroupShuffleXor(x, 4u);
}
float row_max(float x) {
  x = max(x, subgroupShuffleXor(x, 1u));
  x = max(x, subgroupShuffleXor(x, 2u));
  return max(x, subgroupShuffleXor(x, 4u));
}
#endif
