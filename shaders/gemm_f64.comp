#version 450
// Double-precision GEMM: C = alpha op(A) op(B) + beta C, batched over z.
// A plain 32 x 32 tile per workgroup of 16 x 16 invocations (2 x 2 outputs
// each), K staged through shared memory; rates of f64 differ too much between
// devices for tuning to pay (gemm.comp is the tuned f32 one).
layout(local_size_x = 16, local_size_y = 16) in;
layout(constant_id = 0) const bool TRANS_A = false;
layout(constant_id = 1) const bool TRANS_B = false;

#define PUSH_GEMM_F64
#include "push_constants.h"

layout(set = 0, binding = 0) readonly buffer A { double a[]; };
layout(set = 0, binding = 1) readonly buffer B { double b[]; };
layout(set = 0, binding = 2) buffer C { double c[]; };

const uint T = 32, TK = 16;
shared double As[TK][T + 1];  // As[k][m]
shared double Bs[TK][T + 1];  // Bs[k][n]

void main() {
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint lid = ty * 16 + tx;
  const uint bm = gl_WorkGroupID.y * T, bn = gl_WorkGroupID.x * T;
  const uint base_a = pc.offset_a + gl_WorkGroupID.z * pc.batch_a;
  const uint base_b = pc.offset_b + gl_WorkGroupID.z * pc.batch_b;
  double acc[2][2] = {{0.0lf, 0.0lf}, {0.0lf, 0.0lf}};
  for (uint k0 = 0; k0 < pc.K; k0 += TK) {
    // 512 elements of each slice, two per invocation.
    for (uint p = lid; p < T * TK; p += 256) {
      uint m = TRANS_A ? p % T : p / TK, k = TRANS_A ? p / T : p % TK;
      uint gm = bm + m, gk = k0 + k;
      As[k][m] = gm < pc.M && gk < pc.K ? a[base_a + (TRANS_A ? gk * pc.lda + gm : gm * pc.lda + gk)] : 0.0lf;
      uint n = TRANS_B ? p / TK : p % T, kb = TRANS_B ? p % TK : p / T;
      uint gn = bn + n, gkb = k0 + kb;
      Bs[kb][n] = gn < pc.N && gkb < pc.K ? b[base_b + (TRANS_B ? gn * pc.ldb + gkb : gkb * pc.ldb + gn)] : 0.0lf;
    }
    barrier();
    for (uint k = 0; k < TK; ++k) {
      double a0 = As[k][ty], a1 = As[k][ty + 16], b0 = Bs[k][tx], b1 = Bs[k][tx + 16];
      acc[0][0] = fma(a0, b0, acc[0][0]);
      acc[0][1] = fma(a0, b1, acc[0][1]);
      acc[1][0] = fma(a1, b0, acc[1][0]);
      acc[1][1] = fma(a1, b1, acc[1][1]);
    }
    barrier();
  }
  const double alpha = packDouble2x32(uvec2(pc.alpha_lo, pc.alpha_hi));
  const double beta = packDouble2x32(uvec2(pc.beta_lo, pc.beta_hi));
  const uint base_c = pc.offset_c + gl_WorkGroupID.z * pc.batch_c;
  for (uint i = 0; i < 2; ++i) {
    uint m = bm + ty + 16 * i;
    if (m >= pc.M) continue;
    for (uint j = 0; j < 2; ++j) {
      uint n = bn + tx + 16 * j;
      if (n >= pc.N) continue;
      uint at = base_c + m * pc.ldc + n;
      double v = alpha * acc[i][j];
      c[at] = beta != 0.0lf ? v + beta * c[at] : v;  // beta 0 ignores C (NaN included), as BLAS
    }
  }
}
