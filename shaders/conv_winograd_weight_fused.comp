#version 450
// Winograd F(2x2, 3x3)'s weight gradient in one pass over the tiles, f32
// (conv_winograd.comp's MODES 1 and 3 and the 16 products without their
// workspaces): a workgroup takes 32 rows (the output gradient's channels), 32
// channels of the input and a slice of the tiles; per block of 8 tiles it
// transforms the output gradient (A dy A^T) and the input (B^T d B) into
// shared memory, and each invocation adds one of the 16 points' products for
// 8 rows x 8 channels while its loads for the next block are in flight. Each
// slice writes its sums, parts[slice][16][rows][reduction]; the host adds the
// slices and conv_winograd.comp's MODE 4 turns the sums into the 3 x 3
// gradient. The push constants are conv_winograd.comp's, with off_src the
// input's offset, off_bias the output gradient's (the name is the forward's)
// and total the tiles of one slice. With HAS_BIAS, the workgroups of the
// first channel block also sum the output gradient over their tiles, the
// bias gradient's slice: bias_parts[slice][rows].
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool HAS_BIAS = false;

#define PUSH_CONV_WINOGRAD
#include "push_constants.h"
#include "winograd.glsl"

layout(set = 0, binding = 0) writeonly buffer Parts { float parts[]; };
layout(set = 0, binding = 1) readonly buffer In { float in_[]; };
layout(set = 0, binding = 2) readonly buffer Dy { float dy_[]; };
layout(set = 0, binding = 3) writeonly buffer BiasParts { float bias_parts[]; };

const uint RB = 32;  // rows per workgroup
const uint CB = 32;  // channels per workgroup
const uint TT = 8;   // tiles per block
// The block's transforms Ds[16][TT][RB] and Vs[16][TT][CB]: 32 KiB.
shared float ds[16 * TT * RB];
shared float vs[16 * TT * CB];

// This invocation's part of a block, loaded a block ahead so that the loads
// are in flight during the products: tile t's 2 x 2 output gradient in row
// row0 + k and its 4 x 4 input patch in channel c0 + k (zeros past the
// output, the image, the tiles, the rows or the channels).
float raw_g[4], raw_d[16];

void load_block(uint p0, uint row0, uint c0, uint p_end) {
  const uint t = gl_LocalInvocationID.x % TT, k = gl_LocalInvocationID.x / TT, p = p0 + t;
  for (uint i = 0; i < 4; ++i) raw_g[i] = 0.0;
  for (uint i = 0; i < 16; ++i) raw_d[i] = 0.0;
  if (p >= p_end) return;
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  const uint n = tile.x, row = row0 + k, ch = c0 + k;
  if (row < pc.rows) {
    const uint base = pc.off_bias + (n * pc.rows + row) * pc.out_h * pc.out_w;
    for (uint a = 0; a < 2; ++a)
      for (uint b = 0; b < 2; ++b)
        if (tile.y + a < pc.out_h && tile.z + b < pc.out_w)
          raw_g[2 * a + b] = dy_[base + (tile.y + a) * pc.out_w + tile.z + b];
  }
  if (ch < pc.reduction) {
    const int y0 = int(tile.y) - pc.pad_h, x0 = int(tile.z) - pc.pad_w;
    const uint base = pc.off_src + (n * pc.reduction + ch) * pc.height * pc.width;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b) {
        const int y = y0 + a, x = x0 + b;
        if (y >= 0 && y < int(pc.height) && x >= 0 && x < int(pc.width))
          raw_d[4 * a + b] = in_[base + uint(y) * pc.width + uint(x)];
      }
  }
}

// Ds[.][t][k] = A dy A^T and Vs[.][t][k] = B^T d B of the loaded block.
void store_block() {
  const uint t = gl_LocalInvocationID.x % TT, k = gl_LocalInvocationID.x / TT;
  float g[2][2] = {{raw_g[0], raw_g[1]}, {raw_g[2], raw_g[3]}};
  float v[16];
  winograd_output_gradient(g, v);
  for (uint i = 0; i < 16; ++i) ds[(i * TT + t) * RB + k] = v[i];
  float d[4][4];
  for (uint a = 0; a < 4; ++a)
    for (uint b = 0; b < 4; ++b) d[a][b] = raw_d[4 * a + b];
  winograd_input(d, v);
  for (uint i = 0; i < 16; ++i) vs[(i * TT + t) * CB + k] = v[i];
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint slice = gl_WorkGroupID.x, row0 = gl_WorkGroupID.y * RB, c0 = gl_WorkGroupID.z * CB;
  const uint p_begin = slice * pc.total, p_end = min(pc.tiles, p_begin + pc.total);
  const uint point = tid / 16, rb = (tid % 16) / 4, cb = tid % 4;
  float acc[8][8];
  for (uint i = 0; i < 8; ++i)
    for (uint j = 0; j < 8; ++j) acc[i][j] = 0.0;
  float acc_bias = 0.0;  // HAS_BIAS: row row0 + tid / TT's output gradient over this invocation's tiles

  // RB * TT == CB * TT == 256: one tile of each transform per invocation.
  load_block(p_begin, row0, c0, p_end);
  for (uint p0 = p_begin; p0 < p_end; p0 += TT) {
    if (HAS_BIAS) acc_bias += (raw_g[0] + raw_g[1]) + (raw_g[2] + raw_g[3]);
    store_block();
    barrier();
    if (p0 + TT < p_end) load_block(p0 + TT, row0, c0, p_end);
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

  if (HAS_BIAS && gl_WorkGroupID.z == 0) {  // the bias gradient's slice: the TT invocations of a row added
    barrier();
    ds[tid] = acc_bias;
    barrier();
    if (tid < RB && row0 + tid < pc.rows) {
      float sum = 0.0;
      for (uint t = 0; t < TT; ++t) sum += ds[tid * TT + t];
      bias_parts[slice * pc.rows + row0 + tid] = sum;
    }
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
