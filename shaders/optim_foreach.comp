#version 450
// Fused updates of up to SLOTS parameters in one dispatch, as PyTorch's
// foreach optimizers. SGD: slot k holds a parameter (binding 4k), its
// gradient (4k + 1), its momentum buffer (4k + 2) and its per-step scalars
// (4k + 3). ADAM: the parameter (5k), gradient (5k + 1), exp_avg (5k + 2),
// exp_avg_sq (5k + 3) and scalars (5k + 4). All contiguous f32 from element 0;
// the scalars are optim.comp's (lr, first / lr, c1, c2, first; with SKIP the
// found-inf flag at 4). UNSCALE (mixed precision's check, optim.comp's
// OPTIMIZER_UNSCALE): slot k writes out (4k) = grad (4k + 1) * the factor at
// element 0 of 4k + 3, and sets element 0 of 4k + 2, the found-inf flag every
// slot binds, to 1 where a result is inf or NaN. Workgroups
// [first[k], first[k + 1]) update slot k, with optim.comp's arithmetic.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SLOTS = 1;  // used slots; the host binds every slot
layout(constant_id = 2) const bool MOMENTUM = false;
layout(constant_id = 3) const bool NESTEROV = false;
layout(constant_id = 4) const bool FIRST = false;  // without SCALARS: the state starts from the gradient
layout(constant_id = 5) const bool SCALARS = false;
layout(constant_id = 6) const bool SKIP = false;
layout(constant_id = 7) const bool DECOUPLED = false;  // AdamW

#define PUSH_OPTIM_FOREACH
#include "push_constants.h"

#ifdef ADAM
#define PER_SLOT 5
#define SLOT(k)                                                                        \
  layout(set = 0, binding = PER_SLOT * k) buffer P##k { float p##k[]; };               \
  layout(set = 0, binding = PER_SLOT * k + 1) readonly buffer G##k { float g##k[]; };  \
  layout(set = 0, binding = PER_SLOT * k + 2) buffer M##k { float m##k[]; };           \
  layout(set = 0, binding = PER_SLOT * k + 3) buffer V##k { float v##k[]; };           \
  layout(set = 0, binding = PER_SLOT * k + 4) readonly buffer S##k { float s##k[]; };
#else
#define PER_SLOT 4
#define SLOT(k)                                                                        \
  layout(set = 0, binding = PER_SLOT * k) buffer P##k { float p##k[]; };               \
  layout(set = 0, binding = PER_SLOT * k + 1) readonly buffer G##k { float g##k[]; };  \
  layout(set = 0, binding = PER_SLOT * k + 2) buffer M##k { float m##k[]; };           \
  layout(set = 0, binding = PER_SLOT * k + 3) readonly buffer S##k { float s##k[]; };
#endif

SLOT(0)
SLOT(1)
SLOT(2)
SLOT(3)
#ifndef ADAM
SLOT(4)
SLOT(5)
#endif

// Elements [begin, n[k]) of slot k, `stride` apart.
#ifdef ADAM
#define UPDATE(k)                                                                              \
  {                                                                                            \
    if (SKIP && s##k[4] != 0.0) return;                                                        \
    const float lr = SCALARS ? s##k[0] : pc.lr;                                                \
    const float c1 = SCALARS ? s##k[1] : pc.c1;                                                \
    const float c2 = SCALARS ? s##k[2] : pc.c2;                                                \
    const bool first = SCALARS ? s##k[3] != 0.0 : FIRST;                                       \
    for (uint i = begin; i < pc.n[k]; i += stride) {                                           \
      float w = p##k[i];                                                                       \
      float d = g##k[i];                                                                       \
      if (DECOUPLED) w *= 1.0 - lr * pc.weight_decay;                                          \
      else if (pc.weight_decay != 0.0) d += pc.weight_decay * w;                               \
      const float mi = first ? (1.0 - pc.beta1) * d : pc.beta1 * m##k[i] + (1.0 - pc.beta1) * d; \
      const float vi = first ? (1.0 - pc.beta2) * d * d : pc.beta2 * v##k[i] + (1.0 - pc.beta2) * d * d; \
      m##k[i] = mi;                                                                            \
      v##k[i] = vi;                                                                            \
      p##k[i] = w - lr / c1 * mi / (sqrt(vi / c2) + pc.eps);                                   \
    }                                                                                          \
  }
#elif defined(UNSCALE)
#define UPDATE(k)                                                                              \
  {                                                                                            \
    const float inv = s##k[0];                                                                 \
    bool bad = false;                                                                          \
    for (uint i = begin; i < pc.n[k]; i += stride) {                                           \
      const float x = g##k[i] * inv;                                                           \
      p##k[i] = x;                                                                             \
      bad = bad || isinf(x) || isnan(x);                                                       \
    }                                                                                          \
    if (bad) m##k[0] = 1.0; /* every writer stores the same value */                          \
  }
#else
#define UPDATE(k)                                                                              \
  {                                                                                            \
    if (SKIP && s##k[4] != 0.0) return;                                                        \
    const float lr = SCALARS ? s##k[0] : pc.lr;                                                \
    const bool first = SCALARS ? s##k[1] != 0.0 : FIRST;                                       \
    const float momentum = SCALARS ? s##k[2] : pc.momentum;                                    \
    const float dampening = SCALARS ? s##k[3] : pc.dampening;                                  \
    for (uint i = begin; i < pc.n[k]; i += stride) {                                           \
      const float w = p##k[i];                                                                 \
      float d = g##k[i];                                                                       \
      if (pc.weight_decay != 0.0) d += pc.weight_decay * w;                                    \
      if (MOMENTUM) {                                                                          \
        const float b = first ? d : momentum * m##k[i] + (1.0 - dampening) * d;                \
        m##k[i] = b;                                                                           \
        d = NESTEROV ? d + momentum * b : b;                                                   \
      }                                                                                        \
      p##k[i] = w - lr * d;                                                                    \
    }                                                                                          \
  }
#endif

void main() {
  const uint group = gl_WorkGroupID.x;
  uint slot = 0;
  for (uint k = 1; k < SLOTS; ++k)
    if (group >= pc.first[k]) slot = k;
  const uint end = slot + 1 < SLOTS ? pc.first[slot + 1] : gl_NumWorkGroups.x;
  const uint begin = (group - pc.first[slot]) * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
  const uint stride = (end - pc.first[slot]) * gl_WorkGroupSize.x;
  switch (slot) {
    case 0: UPDATE(0) break;
    case 1: UPDATE(1) break;
    case 2: UPDATE(2) break;
#ifdef ADAM
    default: UPDATE(3) break;
#else
    case 3: UPDATE(3) break;
    case 4: UPDATE(4) break;
    default: UPDATE(5) break;
#endif
  }
}
