#version 450
// Winograd F(2x2, 3x3) in one pass, f32 (conv_winograd.comp's forward and
// data passes without their workspaces): a workgroup takes 32 tiles and 32
// rows; per block of 4 channels it transforms the tiles' input patches
// (B^T d B) into shared memory beside the matching slice of U = G g G^T
// (conv_winograd.comp's MODE 0, [16][rows][reduction]), and each invocation
// adds one of the 16 points' products for 8 rows x 8 tiles while its loads
// for the next block are in flight. At the end the
// products meet in shared memory, half the rows at a time, for the output
// transform A^T m A, the bias and the ReLU. Where the reduction is short (32
// or 64 channels) the unfused path's products are bound by writing and
// reading its transformed tiles; here they never leave the chip.
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool HAS_BIAS = false;
layout(constant_id = 1) const bool RELU = false;

#define PUSH_CONV_WINOGRAD
#include "push_constants.h"
#include "winograd.glsl"

layout(set = 0, binding = 0) writeonly buffer Out { float out_[]; };
layout(set = 0, binding = 1) readonly buffer In { float in_[]; };
layout(set = 0, binding = 2) readonly buffer U { float u_[]; };
layout(set = 0, binding = 3) readonly buffer Bias { float bias_[]; };

const uint TT = 32;  // tiles per workgroup
const uint RB = 32;  // rows per workgroup
const uint CK = 4;   // channels per block
// The block's transformed tiles Vs[16][CK][TT] and weights Us[16][CK][RB],
// then (reused) half the rows' products Ms[16][RB / 2][TT].
shared float sh[16 * (RB / 2) * TT];
const uint US = 16 * CK * TT;  // where Us starts

// This invocation's part of a block, loaded a block ahead so that the loads
// are in flight during the products: the 4 x 4 patch of tile t in channel c
// (tid < CK x TT), or 16 values of U (the others).
float raw[16];
// The patch's tile, fixed for the whole reduction: its sample's base, whether it
// is a tile at all, and which of its 16 inputs lie inside the image.
uint patch_base, patch_inside;
int patch_y0, patch_x0;

void locate_patch(uint tile0) {
  const uint p = tile0 + gl_LocalInvocationID.x % TT;
  patch_inside = 0;
  if (p >= pc.tiles) return;
  const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
  patch_base = pc.off_src + tile.x * pc.reduction * pc.height * pc.width;
  patch_y0 = int(tile.y) - pc.pad_h;
  patch_x0 = int(tile.z) - pc.pad_w;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      const int y = patch_y0 + a, x = patch_x0 + b;
      if (y >= 0 && y < int(pc.height) && x >= 0 && x < int(pc.width)) patch_inside |= 1u << (4 * a + b);
    }
}

void load_block(uint c0, uint row0) {
  const uint tid = gl_LocalInvocationID.x;
  if (tid < CK * TT) {
    const uint ch = c0 + tid / TT;
    const uint inside = ch < pc.reduction ? patch_inside : 0u;
    const uint base = patch_base + ch * pc.height * pc.width;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        raw[4 * a + b] = (inside & (1u << (4 * a + b))) != 0
                             ? in_[base + uint(patch_y0 + a) * pc.width + uint(patch_x0 + b)]
                             : 0.0;
  } else {  // U[p][row0 + r][c0 + c], consecutive channels together
    for (uint q = 0; q < 16; ++q) {
      const uint j = tid - CK * TT + q * (256 - CK * TT);
      const uint c = j % CK, r = (j / CK) % RB, p = j / (CK * RB);
      const uint row = row0 + r, ch = c0 + c;
      raw[q] = row < pc.rows && ch < pc.reduction ? u_[(p * pc.rows + row) * pc.reduction + ch] : 0.0;
    }
  }
}

// Vs[.][c][t] = B^T d B of the loaded patches; Us[p][c][r] = the loaded U.
void store_block() {
  const uint tid = gl_LocalInvocationID.x;
  if (tid < CK * TT) {
    const uint t = tid % TT, c = tid / TT;
    float d[4][4];
    for (uint a = 0; a < 4; ++a)
      for (uint b = 0; b < 4; ++b) d[a][b] = raw[4 * a + b];
    float v[16];
    winograd_input(d, v);
    for (uint k = 0; k < 16; ++k) sh[(k * CK + c) * TT + t] = v[k];
  } else {
    for (uint q = 0; q < 16; ++q) {
      const uint j = tid - CK * TT + q * (256 - CK * TT);
      const uint c = j % CK, r = (j / CK) % RB, p = j / (CK * RB);
      sh[US + (p * CK + c) * RB + r] = raw[q];
    }
  }
}

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint tile0 = pc.total + gl_WorkGroupID.x * TT, row0 = gl_WorkGroupID.y * RB;
  // This invocation's point and its 8 rows x 8 tiles of it.
  const uint point = tid / 16, rb = (tid % 16) / 4, tb = tid % 4;
  float acc[8][8];
  for (uint i = 0; i < 8; ++i)
    for (uint j = 0; j < 8; ++j) acc[i][j] = 0.0;

  if (tid < CK * TT) locate_patch(tile0);
  load_block(0, row0);
  for (uint c0 = 0; c0 < pc.reduction; c0 += CK) {
    store_block();
    barrier();
    if (c0 + CK < pc.reduction) load_block(c0 + CK, row0);
    for (uint c = 0; c < CK; ++c) {
      float a[8], v[8];
      for (uint i = 0; i < 8; ++i) {
        a[i] = sh[US + (point * CK + c) * RB + rb * 8 + i];
        v[i] = sh[(point * CK + c) * TT + tb * 8 + i];
      }
      for (uint i = 0; i < 8; ++i)
        for (uint j = 0; j < 8; ++j) acc[i][j] += a[i] * v[j];
    }
    barrier();
  }

  for (uint half_ = 0; half_ < 2; ++half_) {
    if (rb / 2 == half_)  // this invocation's rows are in this half
      for (uint i = 0; i < 8; ++i)
        for (uint j = 0; j < 8; ++j) sh[(point * (RB / 2) + (rb % 2) * 8 + i) * TT + tb * 8 + j] = acc[i][j];
    barrier();
    for (uint k = tid; k < (RB / 2) * TT; k += 256) {
      const uint rl = k / TT, t = k % TT, r = row0 + half_ * (RB / 2) + rl, p = tile0 + t;
      if (r >= pc.rows || p >= pc.tiles) continue;
      float m[16];
      for (uint k = 0; k < 16; ++k) m[k] = sh[(k * (RB / 2) + rl) * TT + t];
      float y[2][2];
      winograd_output(m, y);
      const float bias = HAS_BIAS ? bias_[pc.off_bias + r] : 0.0;
      const uvec3 tile = winograd_tile(p, pc.tiles_h, pc.tiles_w);
      const uint n = tile.x, y0 = tile.y, x0 = tile.z;
      const uint base = pc.off_dst + (n * pc.rows + r) * pc.out_h * pc.out_w;
      for (uint a = 0; a < 2; ++a) {
        if (y0 + a >= pc.out_h) break;
        for (uint b = 0; b < 2; ++b) {
          if (x0 + b >= pc.out_w) break;
          const float x = y[a][b] + bias;
          out_[base + (y0 + a) * pc.out_w + x0 + b] = RELU ? max(x, 0.0) : x;
        }
      }
    }
    barrier();
  }
}
