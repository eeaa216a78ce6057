#version 450
// Winograd F(2x2, 3x3)'s weight gradient in one pass over the tiles, f32
// (conv_winograd.comp's MODES 1 and 3 and the 16 products without their
// workspaces): a workgroup takes 32 rows (the output gradient's channels), 32
// channels of the input and a slice of the tiles; per block of 8 tiles it
// transforms the output gradient (A dy A^T) and the input (B^T d B) into
// shared memory, and each invocation adds one of the 16 points' products for
// 8 rows x 8 channels. Each slice writes its sums, parts[slice][16][rows][reduction];
// the host adds the slices and conv_winograd.comp's MODE 4 turns the sums into
// the 3 x 3 gradient. The push constants are conv_winograd.comp's, with
// off_src the input's offset, off_bias the output gradient's (there is no
// bias here) and total the tiles of one slice.
layout(local_size_x = 256) in;

#define PUSH_CONV_WINOGRAD
#include "push_constants.h"
#include "winograd.glsl"

layout(set = 0, binding = 0) writeonly buffer Parts { float parts[]; };
layout(set = 0, binding = 1) readonly buffer In { float in_[]; };
layout(set = 0, binding = 2) readonly buffer Dy { float dy_[]; };

const uint RB = 32;  // rows per workgroup
const uint CB = 32;  // channels per workgroup
const uint TT = 8;   // tiles per block
// The block's transforms Ds[16][TT][RB] and Vs[16][TT][CB]: 32 KiB.
shared float ds[16 * TT * RB];
shared float vs[16 * TT * CB];

// Ds[.][t][r] = A dy A^T of tile p's 2 x 2 output gradient in row `row` (zeros past the output, the tiles or the rows).
void gradient_tile(uint t, uint r, uint p, uint row, uint p_end) {
  float g[2][2] = {{0.0, 0.0}, {0.0, 0.0}};
  if (p < p_end && row < pc.rows) {
    const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
    const uint n = tile.x, y0 = tile.y, x0 = tile.z;
    const uint base = pc.off_bias + (n * pc.rows + row) * pc.out_h * pc.out_w;
    for (uint a = 0; a < 2; ++a)
      for (uint b = 0; b < 2; ++b)
        if (y0 + a < pc.out_h && x0 + b < pc.out_w) g[a][b] = dy_[base + (y0 + a) * pc.out_w + x0 + b];
  }
  float v[16];
  winograd_output_gradient(g, v);
  for (uint k = 0; k < 16; ++k) ds[(k * TT + t) * RB + r] = v[k];
}

// Vs[.][t][c] = B^T d B of tile p's 4 x 4 input patch in channel `ch` (zeros past the image, the tiles or the channels).
void input_tile(uint t, uint c, uint p, uint ch, uint p_end) {
  float d[4][4];
  for (uint a = 0; a < 4; ++a)
    for (uint b = 0; b < 4; ++b) d[a][b] = 0.0;
  if (p < p_end && ch < pc.reduction) {
    const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
    const uint n = tile.x;
    const int y0 = int(tile.y) - pc.pad_h, x0 = int(tile.z) - pc.pad_w;
    const uint base = pc.off_src + (n * pc.reduction + ch) * pc.height * pc.width;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) {
        const int y = y0 + a, x = x0 + b;
        if (y >= 0 && y < int(pc.height) && x >= 0 && x < int(pc.width)) d[a][b] = in_[base + uint(y) * pc.width + uint(x)];
      }
  }
  float v[16];
  winograd_input(d, v);
  for (uint k = 0; k < 16; ++k) vs[(k * TT + t) * CB + c] = v[k];
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint slice = gl_WorkGroupID.x, row0 = gl_WorkGroupID.y * RB, c0 = gl_WorkGroupID.z * CB;
  const uint p_begin = slice * pc.total, p_end = min(pc.tiles, p_begin + pc.total);
  const uint point = tid / 16, rb = (tid % 16) / 4, cb = tid % 4;
  float acc[8][8];
  for (uint i = 0; i < 8; ++i)
    for (uint j = 0; j < 8; ++j) acc[i][j] = 0.0;

  for (uint p0 = p_begin; p0 < p_end; p0 += TT) {
    // RB * TT == CB * TT == 256: one tile of each transform per invocation.
    const uint t = tid % TT, k = tid / TT;
    gradient_tile(t, k, p0 + t, row0 + k, p_end);
    input_tile(t, k, p0 + t, c0 + k, p_end);
    barrier();
    for (uint tt = 0; tt < TT; ++tt) {
      float a[8], v[8];
      for (uint i = 0; i < 8; ++i) {
        a[i] = ds[(point * TT + tt) * RB + rb * 8 + i];
        v[i] = vs[(point * TT + tt) * CB + cb * 8 + i];
      }
      for (uint i = 0; i < 8; ++i)
        for (uint j = 0; j < 8; ++j) acc[i][j] += a[i] * v[j];
    }
    barrier();
  }

  const uint plane = pc.rows * pc.reduction;
  const uint base = (slice * 16 + point) * plane;
  for (uint i = 0; i < 8; ++i) {
    const uint r = row0 + rb * 8 + i;
    if (r >= pc.rows) break;
    for (uint j = 0; j < 8; ++j) {
      const uint c = c0 + cb * 8 + j;
      if (c < pc.reduction) parts[base + r * pc.reduction + c] = acc[i][j];
    }
  }
}
