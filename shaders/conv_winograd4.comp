#version 450
// Winograd F(4x4, 3x3) for 3x3 convolutions of stride 1 on contiguous f32,
// f16 or bf16 operands (Lavin and Gray, 2015), at the points 0, 1, -1, 2,
// -1/2 and infinity: each 4 x 4 output tile is A^T [(G g G^T) . (B^T d B)] A for its 6 x 6 input
// patch d, so the 144 multiplications of a tile's direct convolution become
// 36, which the host runs as 36 products over the channels (gemm.comp), on
// 2.25 transformed points a pixel where F(2x2, 3x3) (conv_winograd.comp)
// has 4. The forward's three transforms:
//   MODE 0, weights: one item per (row, reduction) pair, U[36][rows][reduction] = G g G^T;
//   MODE 1, input:   one item per (channel, tile), V[36][reduction][tiles] = B^T d B / 32, with
//                    zeros in the padding;
//   MODE 2, output:  one item per (row, tile), out = 32 A^T m A from the products
//                    m[36][rows][tiles], plus the bias, then the ReLU when RELU; rows and
//                    columns past the output are not written.
// The weight gradient runs them backwards, as conv_winograd.comp does:
//   MODE 3, output gradient: one item per (row, tile), D[36][rows][tiles] = A dy A^T / 64,
//                    with zeros past the output;
//   MODE 4, weight gradient: one item per (row, reduction) pair, the 3 x 3 gradient
//                    2048 G^T s G from the f32 sums s[36][rows][reduction].
// The points: with Lavin's 0, 1, -1, 2, -2 the input transform scales by up
// to 100, and f16 tiles' rounding errors reach 3e-2 of an output's rms;
// -1/2 for -2 keeps it to 49 and the errors to 1.5e-2 (2.6e-3 in rms),
// below those of bf16 tiles in F(2x2, 3x3).
// The scales keep 16-bit tiles in F(2x2, 3x3)'s range: B^T d B grows a
// value up to 49 times (F(2x2, 3x3): 4) and A dy A^T up to 225, so loss-scaled
// gradients would overflow f16 where F(2x2, 3x3) holds them; powers of two,
// they cost no precision.
// The arithmetic is f32 whatever the dtypes: DT_SRC is what binding 1 holds,
// DT_DST what binding 0 gets; the bias is the result's dtype.
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const bool HAS_BIAS = false;
layout(constant_id = 3) const bool RELU = false;
layout(constant_id = 4) const uint DT_SRC = 0;  // DT_F32
layout(constant_id = 5) const uint DT_DST = 0;

#define PUSH_CONV_WINOGRAD
#include "push_constants.h"

TENSOR(0)  // dst
TENSOR(1)  // src
TENSOR(2)  // bias
layout(set = 0, binding = 0) buffer Q0 { vec4 v[]; } t0q;
layout(set = 0, binding = 0) buffer D0 { uvec2 v[]; } t0d;

const float kInputScale = 1.0 / 32.0, kOutputGradientScale = 1.0 / 64.0;

float load_src(uint i) { return load1(DT_SRC, i); }
void store_dst(uint i, float v) { store0(DT_DST, i, v); }

// Elements [4 q, 4 q + 4) of the destination in one access.
void store_dst4(uint q, vec4 v) {
  if (DT_DST == DT_F32) t0q.v[q] = v;
  else t0d.v[q] = pack_quad16(DT_DST, v);
}

// Tile p, of tiles_h x tiles_w a sample: its sample and the top-left of its
// 4 x 4 outputs (the input patch starts there, less the padding).
uvec3 tile_of(uint p) {
  const uint per_sample = pc.tiles_h * pc.tiles_w, q = p % per_sample;
  return uvec3(p / per_sample, 4 * (q / pc.tiles_w), 4 * (q % pc.tiles_w));
}

// G g of three taps: G = [1 0 0; -1/3 -1/3 -1/3; 1/3 -1/3 1/3; 1/15 2/15 4/15;
// -16/15 8/15 -4/15; 0 0 1].
float[6] kernel_1d(float g0, float g1, float g2) {
  const float even = g0 + g2;
  return float[6](g0, -(even + g1) * (1.0 / 3.0), (even - g1) * (1.0 / 3.0), (g0 + 2.0 * g1 + 4.0 * g2) * (1.0 / 15.0),
                  (2.0 * g1 - 4.0 * g0 - g2) * (4.0 / 15.0), g2);
}

// B^T d of six points: B^T = [1 3/2 -2 -3/2 1 0; 0 -1 -5/2 -1/2 1 0; 0 1 1/2 -5/2 1 0;
// 0 -1/2 -1 1/2 1 0; 0 2 -1 -2 1 0; 0 1 3/2 -2 -3/2 1].
float[6] input_1d(float d0, float d1, float d2, float d3, float d4, float d5) {
  return float[6](d0 + d4 - 2.0 * d2 + 1.5 * (d1 - d3), d4 - d1 - 2.5 * d2 - 0.5 * d3,
                  d1 + d4 + 0.5 * d2 - 2.5 * d3, d4 - d2 + 0.5 * (d3 - d1), d4 - d2 + 2.0 * (d1 - d3),
                  d1 + d5 - 2.0 * d3 + 1.5 * (d2 - d4));
}

// A^T m of six points: A^T = [1 1 1 1 1 0; 0 1 -1 2 -1/2 0; 0 1 1 4 1/4 0;
// 0 1 -1 8 -1/8 1].
vec4 output_1d(float m0, float m1, float m2, float m3, float m4, float m5) {
  const float s12 = m1 + m2, d12 = m1 - m2;
  return vec4(m0 + s12 + m3 + m4, d12 + 2.0 * m3 - 0.5 * m4, s12 + 4.0 * m3 + 0.25 * m4,
              d12 + 8.0 * m3 - 0.125 * m4 + m5);
}

// A v of a column of 4 output gradients (A^T's transpose).
float[6] output_gradient_1d(float v0, float v1, float v2, float v3) {
  return float[6](v0, v0 + v1 + v2 + v3, v0 - v1 + v2 - v3, v0 + 2.0 * v1 + 4.0 * v2 + 8.0 * v3,
                  v0 - 0.5 * v1 + 0.25 * v2 - 0.125 * v3, v3);
}

// G^T s of six points.
vec3 weight_gradient_1d(float s0, float s1, float s2, float s3, float s4, float s5) {
  const float third = 1.0 / 3.0, fifteenth = 1.0 / 15.0;
  return vec3(s0 + third * (s2 - s1) + fifteenth * (s3 - 16.0 * s4), fifteenth * (2.0 * s3 + 8.0 * s4) - third * (s1 + s2),
              third * (s2 - s1) + fifteenth * (4.0 * s3 - 4.0 * s4) + s5);
}

void weights(uint i) {
  const uint r = i / pc.reduction, c = i % pc.reduction;
  float t[6][3];  // G g
  for (uint b = 0; b < 3; ++b) {
    float g[3];
    for (uint a = 0; a < 3; ++a)
      g[a] = pc.flip != 0 ? load_src(pc.off_src + (c * pc.rows + r) * 9 + (2 - a) * 3 + (2 - b))
                          : load_src(pc.off_src + (r * pc.reduction + c) * 9 + a * 3 + b);
    const float[6] col = kernel_1d(g[0], g[1], g[2]);
    [[unroll]] for (uint a = 0; a < 6; ++a) t[a][b] = col[a];
  }
  const uint plane = pc.rows * pc.reduction;
  uint at = pc.off_dst + r * pc.reduction + c;
  [[unroll]] for (uint a = 0; a < 6; ++a) {  // (G g) G^T
    const float[6] row = kernel_1d(t[a][0], t[a][1], t[a][2]);
    [[unroll]] for (uint b = 0; b < 6; ++b) store_dst(at + b * plane, row[b]);
    at += 6 * plane;
  }
}

void input_tile(uint i) {
  const uint c = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = tile_of(p);
  const int y0 = int(tile.y) - pc.pad_h, x0 = int(tile.z) - pc.pad_w;
  const uint base = pc.off_src + (tile.x * pc.reduction + c) * pc.height * pc.width;
  float s[6][6];  // d B, row by row of the patch
  [[unroll]] for (int a = 0; a < 6; ++a) {
    const int y = y0 + a;
    float d[6];
    [[unroll]] for (int b = 0; b < 6; ++b) {
      const int x = x0 + b;
      d[b] = y >= 0 && y < int(pc.height) && x >= 0 && x < int(pc.width) ? load_src(base + uint(y) * pc.width + uint(x))
                                                                        : 0.0;
    }
    s[a] = input_1d(d[0], d[1], d[2], d[3], d[4], d[5]);
  }
  const uint plane = pc.reduction * pc.tiles;
  const uint at = pc.off_dst + c * pc.tiles + p;
  [[unroll]] for (uint b = 0; b < 6; ++b) {  // B^T (d B), column by column
    const float[6] v = input_1d(s[0][b], s[1][b], s[2][b], s[3][b], s[4][b], s[5][b]);
    [[unroll]] for (uint a = 0; a < 6; ++a) store_dst(at + (6 * a + b) * plane, kInputScale * v[a]);
  }
}

void output_tile(uint i) {
  const uint r = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = tile_of(p);
  const uint y0 = tile.y, x0 = tile.z;
  const uint plane = pc.rows * pc.tiles, at = pc.off_src + r * pc.tiles + p;
  vec4 s[6];  // s[b][a]: (A^T m)[a][b], column b of points
  [[unroll]] for (uint b = 0; b < 6; ++b) {
    float m[6];
    [[unroll]] for (uint a = 0; a < 6; ++a) m[a] = load_src(at + (6 * a + b) * plane);
    s[b] = output_1d(m[0], m[1], m[2], m[3], m[4], m[5]);
  }
  const float bias = HAS_BIAS ? load2(DT_DST, pc.off_bias + r) : 0.0;
  const uint base = pc.off_dst + (tile.x * pc.rows + r) * pc.out_h * pc.out_w;
  // Whole rows of 4 outputs on quads: one store a row.
  const bool quad = pc.out_w % 4 == 0 && base % 4 == 0;
  [[unroll]] for (uint a = 0; a < 4; ++a) {
    if (y0 + a >= pc.out_h) break;
    vec4 y = output_1d(s[0][a], s[1][a], s[2][a], s[3][a], s[4][a], s[5][a]) * (1.0 / kInputScale) + bias;
    if (RELU) y = max(y, 0.0);
    const uint row = base + (y0 + a) * pc.out_w + x0;
    if (quad) {
      store_dst4(row / 4, y);
      continue;
    }
    [[unroll]] for (uint b = 0; b < 4; ++b)
      if (x0 + b < pc.out_w) store_dst(row + b, y[b]);
  }
}

void output_gradient_tile(uint i) {
  const uint r = i / pc.tiles, p = i % pc.tiles;
  const uvec3 tile = tile_of(p);
  const uint y0 = tile.y, x0 = tile.z;
  const uint base = pc.off_src + (tile.x * pc.rows + r) * pc.out_h * pc.out_w;
  float t[6][4];  // A dy, column by column of the tile
  [[unroll]] for (uint b = 0; b < 4; ++b) {
    float dy[4];
    [[unroll]] for (uint a = 0; a < 4; ++a)
      dy[a] = y0 + a < pc.out_h && x0 + b < pc.out_w ? load_src(base + (y0 + a) * pc.out_w + x0 + b) : 0.0;
    const float[6] col = output_gradient_1d(dy[0], dy[1], dy[2], dy[3]);
    [[unroll]] for (uint a = 0; a < 6; ++a) t[a][b] = col[a];
  }
  const uint plane = pc.rows * pc.tiles, at = pc.off_dst + r * pc.tiles + p;
  [[unroll]] for (uint a = 0; a < 6; ++a) {  // (A dy) A^T, row by row
    const float[6] g = output_gradient_1d(t[a][0], t[a][1], t[a][2], t[a][3]);
    [[unroll]] for (uint b = 0; b < 6; ++b) store_dst(at + (6 * a + b) * plane, kOutputGradientScale * g[b]);
  }
}

void weight_gradient(uint i) {
  const uint r = i / pc.reduction, c = i % pc.reduction, plane = pc.rows * pc.reduction;
  const uint at = pc.off_src + r * pc.reduction + c;
  vec3 t[6];  // t[b]: (G^T s)[.][b], column b of points
  [[unroll]] for (uint b = 0; b < 6; ++b) {
    float s[6];
    [[unroll]] for (uint a = 0; a < 6; ++a) s[a] = load_src(at + (6 * a + b) * plane);
    t[b] = weight_gradient_1d(s[0], s[1], s[2], s[3], s[4], s[5]);
  }
  const uint at_w = pc.off_dst + (r * pc.reduction + c) * 9;
  [[unroll]] for (uint a = 0; a < 3; ++a) {  // (G^T s) G, row by row
    const vec3 w = weight_gradient_1d(t[0][a], t[1][a], t[2][a], t[3][a], t[4][a], t[5][a]) *
                   (1.0 / (kInputScale * kOutputGradientScale));
    [[unroll]] for (uint b = 0; b < 3; ++b) store_dst(at_w + a * 3 + b, w[b]);
  }
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < pc.total; i += step) {
    if (MODE == 0) weights(i);
    else if (MODE == 1) input_tile(i);
    else if (MODE == 2) output_tile(i);
    else if (MODE == 3) output_gradient_tile(i);
    else weight_gradient(i);
  }
}
