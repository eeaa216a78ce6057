#version 450
// Fused optimizer updates over contiguous f32 tensors: one pass per parameter.
// OPTIMIZER_UNSCALE is mixed precision's gradient check before the update:
// p = g * lr (lr holding 1 / scale, or s[off_s] with SCALARS), and m[off_m] = 1
// if any result is inf or NaN. OPTIMIZER_UPDATE_SCALE is its next scale, by
// one invocation: p[off_p] the scale, m[off_m] the growth count, g[off_g] the
// found-inf flag; lr, momentum and dampening hold the growth factor, the
// backoff factor and the growth interval.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;  // OPTIMIZER_*
layout(constant_id = 2) const bool MOMENTUM = false;
layout(constant_id = 3) const bool NESTEROV = false;
layout(constant_id = 4) const bool FIRST = false;      // SGD: momentum buffer starts as the gradient
layout(constant_id = 5) const bool DECOUPLED = false;  // AdamW
// The per-step values come from binding 4 (lr, first / lr, c1, c2, first),
// written before each run, so a captured step replays with current values.
layout(constant_id = 6) const bool SCALARS = false;
// Mixed precision on the device: s[off_s + 4] is the found-inf flag, and the
// update writes nothing where it is set (the step is skipped without a host read).
layout(constant_id = 7) const bool SKIP = false;

#include "rumus_codes.glsl"
#define PUSH_OPTIM
#include "push_constants.h"

layout(set = 0, binding = 0) buffer P { float p[]; };
layout(set = 0, binding = 1) readonly buffer G { float g[]; };
layout(set = 0, binding = 2) buffer M { float m[]; };
layout(set = 0, binding = 3) buffer V { float v[]; };
layout(set = 0, binding = 4) readonly buffer S { float s[]; };

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const float lr = SCALARS ? s[pc.off_s] : pc.lr;
  if (KIND == OPTIMIZER_UNSCALE) {
    bool bad = false;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += step) {
      const float x = g[pc.off_g + i] * lr;
      p[pc.off_p + i] = x;
      bad = bad || isinf(x) || isnan(x);
    }
    if (bad) m[pc.off_m] = 1.0;  // every writer stores the same value: no atomics needed
    return;
  }
  if (KIND == OPTIMIZER_UPDATE_SCALE) {
    if (gl_GlobalInvocationID.x != 0) return;
    const float scale = p[pc.off_p];
    if (g[pc.off_g] > 0.0) {
      p[pc.off_p] = scale * pc.momentum;
      m[pc.off_m] = 0.0;
      return;
    }
    const float counted = m[pc.off_m] + 1.0;
    const bool grow = counted == pc.dampening;
    // Saturates at the largest finite f32: an inf scale would turn every scaled loss into inf.
    if (grow) p[pc.off_p] = min(scale * pc.lr, uintBitsToFloat(0x7f7fffffu));
    m[pc.off_m] = grow ? 0.0 : counted;
    return;
  }
  if (SKIP && s[pc.off_s + 4] != 0.0) return;
  const float c1 = SCALARS ? s[pc.off_s + 1] : pc.c1;
  const float c2 = SCALARS ? s[pc.off_s + 2] : pc.c2;
  // SGD: the momentum buffer starts as the gradient; Adam: the moments start at zero (not read).
  const bool first = SCALARS ? s[pc.off_s + (KIND == OPTIMIZER_SGD ? 1 : 3)] != 0.0 : FIRST;
  // SGD's momentum and dampening follow a schedule at each replay too.
  const float momentum = SCALARS && KIND == OPTIMIZER_SGD ? s[pc.off_s + 2] : pc.momentum;
  const float dampening = SCALARS && KIND == OPTIMIZER_SGD ? s[pc.off_s + 3] : pc.dampening;
  for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += step) {
    float w = p[pc.off_p + i];
    float d = g[pc.off_g + i];
    if (KIND == OPTIMIZER_SGD) {
      if (pc.weight_decay != 0.0) d += pc.weight_decay * w;
      if (MOMENTUM) {
        float b = first ? d : momentum * m[pc.off_m + i] + (1.0 - dampening) * d;
        m[pc.off_m + i] = b;
        d = NESTEROV ? d + momentum * b : b;
      }
      p[pc.off_p + i] = w - lr * d;
    } else {
      if (DECOUPLED) w *= 1.0 - lr * pc.weight_decay;
      else if (pc.weight_decay != 0.0) d += pc.weight_decay * w;
      // Zero moments give exactly these values: beta * 0 + x == x.
      float mi = first ? (1.0 - pc.beta1) * d : pc.beta1 * m[pc.off_m + i] + (1.0 - pc.beta1) * d;
      float vi = first ? (1.0 - pc.beta2) * d * d : pc.beta2 * v[pc.off_v + i] + (1.0 - pc.beta2) * d * d;
      m[pc.off_m + i] = mi;
      v[pc.off_v + i] = vi;
      p[pc.off_p + i] = w - lr / c1 * mi / (sqrt(vi / c2) + pc.eps);
    }
  }
}
