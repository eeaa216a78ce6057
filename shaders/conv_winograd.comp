#version 450
// Winograd F(2x2, 3x3) for 3x3 convolutions of stride 1 on contiguous f32,
// f16 or bf16 operands (Lavin and Gray, 2015): each 2 x 2 output tile is
// A^T [(G g G^T) . (B^T d B)] A for its 4 x 4 input patch d, so the 36
// multiplications of a tile's direct convolution become 16, which the host
// runs as 16 products over the channels (gemm.comp). The three transforms:
//   MODE 0, weights: one item per (row, reduction) pair, U[16][rows][reduction] = G g G^T;
//   MODE 1, input:   one item per (channel, tile), V[16][reduction][tiles] = B^T d B, with zeros
//                    in the padding;
//   MODE 2, output:  one item per (row, tile), out = A^T m A from the products m[16][rows][tiles],
//                    plus the bias, then the ReLU when RELU; rows and columns past the output
//                    (an odd size) are not written.
// The weight gradient runs the forward's transforms backwards: each output
// gradient tile dy gives A dy A^T, 16 products sum (A dy A^T) . (B^T d B)
// over the tiles, and the sum s gives the kernel's gradient G^T s G:
//   MODE 3, output gradient: one item per (row, tile), D[16][rows][tiles] = A dy A^T, with
//                    zeros past the output (an odd size);
//   MODE 4, weight gradient: one item per (row, reduction) pair, the 3 x 3 gradient G^T s G
//                    from the sums s[16][rows][reduction].
// Neighbouring items are neighbouring tiles, so the transforms' writes (and
// MODE 2's reads) are contiguous. With QUADS (a sample's rows of tiles a
// multiple of 4, the products f32, f16 or bf16 on a quad) MODE 2 takes four
// neighbouring tiles an item: the products arrive in 16- or 8-byte quads, and
// rows of 8 outputs leave in two.
// The arithmetic is f32 whatever the dtypes: DT_SRC is what binding 1 holds
// (the tensor read, or the f32 products for MODES 2 and 4), DT_DST what
// binding 0 gets (a transform's workspace, which the host gives the
// products' input dtype, or the result tensor); the bias is the result's dtype.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "winograd.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool RELU = false;
layout(constant_id = 4) const uint DT_SRC = 0;  // DT_F32
layout(constant_id = 5) const uint DT_DST = 0;
layout(constant_id = 6) const bool QUADS = false;

#define PUSH_CONV_WINOGRAD
#include "push_constants.h"

TENSOR(0)  // dst
TENSOR(1)  // src
TENSOR(2)  // bias
layout(set = 0, binding = 0) buffer Q0 { vec4 v[]; } t0q;
layout(set = 0, binding = 0) buffer D0 { uvec2 v[]; } t0d;
layout(set = 0, binding = 1) buffer Q1 { vec4 v[]; } t1q;
layout(set = 0, binding = 1) buffer D1 { uvec2 v[]; } t1d;

float load_src(uint i) { return load1(DT_SRC, i); }
void store_dst(uint i, float v) { store0(DT_DST, i, v); }

// Elements [4 q, 4 q + 4) of the source or destination in one access.
vec4 load_src4(uint q) { return DT_SRC == DT_F32 ? t1q.v[q] : unpack_quad16(DT_SRC, t1d.v[q]); }
void store_dst4(uint q, vec4 v) {
  if (DT_DST == DT_F32) t0q.v[q] = v;
  else t0d.v[q] = pack_quad16(DT_DST, v);
}

void weights(uint i) {
  const uint r = i / pc.reduction, c = i % pc.reduction;
  float g[3][3];
  for (uint a = 0; a < 3; ++a)
    for (uint b = 0; b < 3; ++b)
      g[a][b] = pc.flip != 0 ? load_src(pc.off_src + (c * pc.rows + r) * 9 + (2 - a) * 3 + (2 - b))
                             : load_src(pc.off_src + (r * pc.reduction + c) * 9 + a * 3 + b);
  float t[4][3];  // G g
  for (uint b = 0; b < 3; ++b) {
    t[0][b] = g[0][b];
    t[1][b] = 0.5 * (g[0][b] + g[1][b] + g[2][b]);
    t[2][b] = 0.5 * (g[0][b] - g[1][b] + g[2][b]);
    t[3][b] = g[2][b];
  }
  const uint plane = pc.rows * pc.reduction;
  uint at = pc.off_dst + r * pc.reduction + c;
  for (uint a = 0; a < 4; ++a) {  // (G g) G^T
    store_dst(at, t[a][0]);
    store_dst(at + plane, 0.5 * (t[a][0] + t[a][1] + t[a][2]));
    store_dst(at + 2 * plane, 0.5 * (t[a][0] - t[a][1] + t[a][2]));
    store_dst(at + 3 * plane, t[a][2]);
    at += 4 * plane;
  }
}

void input_tile(uint i) {
  const uint c = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  const uint n = tile.x;
  const int y0 = int(tile.y) - pc.pad_h, x0 = int(tile.z) - pc.pad_w;
  const uint base = pc.off_src + (n * pc.reduction + c) * pc.height * pc.width;
  float d[4][4];
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int y = y0 + a, x = x0 + b;
      d[a][b] = y >= 0 && y < int(pc.height) && x >= 0 && x < int(pc.width) ? load_src(base + uint(y) * pc.width + uint(x))
                                                                            : 0.0;
    }
  float v[16];
  winograd_input(d, v);
  const uint plane = pc.reduction * pc.tiles;
  const uint at = pc.off_dst + c * pc.tiles + p;
  for (uint k = 0; k < 16; ++k) store_dst(at + k * plane, v[k]);
}

void output_tile(uint i) {
  const uint r = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  const uint n = tile.x, y0 = tile.y, x0 = tile.z;
  const uint plane = pc.rows * pc.tiles;
  float m[16];
  for (uint k = 0; k < 16; ++k) m[k] = load_src(pc.off_src + r * pc.tiles + p + k * plane);
  float y[2][2];
  winograd_output(m, y);
  const float bias = HAS_BIAS ? load2(DT_DST, pc.off_bias + r) : 0.0;
  const uint base = pc.off_dst + (n * pc.rows + r) * pc.out_h * pc.out_w;
  for (uint a = 0; a < 2; ++a) {
    if (y0 + a >= pc.out_h) break;
    for (uint b = 0; b < 2; ++b) {
      if (x0 + b >= pc.out_w) break;
      const float x = y[a][b] + bias;
      store_dst(base + (y0 + a) * pc.out_w + x0 + b, RELU ? max(x, 0.0) : x);
    }
  }
}

// QUADS: row r's outputs of tiles [4 g, 4 g + 4), one row of tiles, from quads
// of the products: A^T down each column of points, four tiles at once, then A
// along the rows (the order of winograd_output's operations).
void output_quad(uint i) {
  const uint quads = pc.tiles / 4, r = i / quads, p = 4 * (i % quads);
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  const uint n = tile.x, y0 = tile.y, x0 = tile.z;
  const uint plane = pc.rows * pc.tiles / 4, at = (pc.off_src + r * pc.tiles + p) / 4;
  vec4 s[2][4];  // s[a][b][t]: (A^T m)[a][b] of tile t
  [[unroll]] for (uint b = 0; b < 4; ++b) {
    const vec4 m0 = load_src4(at + b * plane), m1 = load_src4(at + (4 + b) * plane);
    const vec4 m2 = load_src4(at + (8 + b) * plane), m3 = load_src4(at + (12 + b) * plane);
    s[0][b] = m0 + m1 + m2;
    s[1][b] = m1 - m2 - m3;
  }
  const float bias = HAS_BIAS ? load2(DT_DST, pc.off_bias + r) : 0.0;
  const uint base = pc.off_dst + (n * pc.rows + r) * pc.out_h * pc.out_w;
  // Whole rows of 8 outputs on quads: two quad stores a row.
  const bool wide = pc.out_w % 8 == 0 && base % 4 == 0 && (DT_DST == DT_F32 || DT_DST == DT_F16 || DT_DST == DT_BF16);
  for (uint a = 0; a < 2; ++a) {
    if (y0 + a >= pc.out_h) break;
    vec4 y[2] = {s[a][0] + s[a][1] + s[a][2], s[a][1] - s[a][2] - s[a][3]};  // y[b][t]
    y[0] += bias;
    y[1] += bias;
    if (RELU) {
      y[0] = max(y[0], 0.0);
      y[1] = max(y[1], 0.0);
    }
    const uint row = base + (y0 + a) * pc.out_w + x0;
    if (wide) {
      store_dst4(row / 4, vec4(y[0][0], y[1][0], y[0][1], y[1][1]));
      store_dst4(row / 4 + 1, vec4(y[0][2], y[1][2], y[0][3], y[1][3]));
      continue;
    }
    [[unroll]] for (uint t = 0; t < 4; ++t)
      [[unroll]] for (uint b = 0; b < 2; ++b)
        if (x0 + 2 * t + b < pc.out_w) store_dst(row + 2 * t + b, y[b][t]);
  }
}

void output_gradient_tile(uint i) {
  const uint r = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  const uint n = tile.x, y0 = tile.y, x0 = tile.z;
  const uint base = pc.off_src + (n * pc.rows + r) * pc.out_h * pc.out_w;
  float dy[2][2];
  for (uint a = 0; a < 2; ++a)
    for (uint b = 0; b < 2; ++b)
      dy[a][b] = y0 + a < pc.out_h && x0 + b < pc.out_w ? load_src(base + (y0 + a) * pc.out_w + x0 + b) : 0.0;
  float g[16];
  winograd_output_gradient(dy, g);
  const uint plane = pc.rows * pc.tiles;
  const uint at = pc.off_dst + r * pc.tiles + p;
  for (uint k = 0; k < 16; ++k) store_dst(at + k * plane, g[k]);
}

void weight_gradient(uint i) {
  const uint r = i / pc.reduction, c = i % pc.reduction, plane = pc.rows * pc.reduction;
  float s[4][4];
  uint at = pc.off_src + r * pc.reduction + c;
  for (uint a = 0; a < 4; ++a)
    for (uint b = 0; b < 4; ++b) {
      s[a][b] = load_src(at);
      at += plane;
    }
  float t[3][4];  // G^T s
  for (uint b = 0; b < 4; ++b) {
    t[0][b] = s[0][b] + 0.5 * (s[1][b] + s[2][b]);
    t[1][b] = 0.5 * (s[1][b] - s[2][b]);
    t[2][b] = 0.5 * (s[1][b] + s[2][b]) + s[3][b];
  }
  const uint at_w = pc.off_dst + (r * pc.reduction + c) * 9;
  for (uint a = 0; a < 3; ++a) {  // (G^T s) G
    store_dst(at_w + a * 3, t[a][0] + 0.5 * (t[a][1] + t[a][2]));
    store_dst(at_w + a * 3 + 1, 0.5 * (t[a][1] - t[a][2]));
    store_dst(at_w + a * 3 + 2, 0.5 * (t[a][1] + t[a][2]) + t[a][3]);
  }
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += step) {
    if (MODE == 0) weights(i);
    else if (MODE == 1) input_tile(i);
    else if (MODE == 2) {
      if (QUADS) output_quad(i);
      else output_tile(i);
    } else if (MODE == 3) output_gradient_tile(i);
    else weight_gradient(i);
  }
}
