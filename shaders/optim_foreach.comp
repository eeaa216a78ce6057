#version 450
// SGD updates of up to SLOTS parameters in one dispatch, as PyTorch's foreach
// optimizers: slot k holds a parameter (binding 4k), its gradient (4k + 1),
// its momentum buffer (4k + 2) and its per-step scalars (4k + 3: lr, first,
// and with SKIP the found-inf flag at 4), all contiguous f32 from element 0.
// Workgroups [first[k], first[k + 1]) update slot k; the update is optim.comp's.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SLOTS = 6;  // used slots; the host binds every slot
layout(constant_id = 2) const bool MOMENTUM = false;
layout(constant_id = 3) const bool NESTEROV = false;
layout(constant_id = 4) const bool FIRST = false;  // without SCALARS: the momentum buffer starts as the gradient
layout(constant_id = 5) const bool SCALARS = false;
layout(constant_id = 6) const bool SKIP = false;

#define PUSH_OPTIM_FOREACH
#include "push_constants.h"

#define SLOT(k)                                                                 \
  layout(set = 0, binding = 4 * k) buffer P##k { float p##k[]; };               \
  layout(set = 0, binding = 4 * k + 1) readonly buffer G##k { float g##k[]; };  \
  layout(set = 0, binding = 4 * k + 2) buffer M##k { float m##k[]; };           \
  layout(set = 0, binding = 4 * k + 3) readonly buffer S##k { float s##k[]; };
SLOT(0)
SLOT(1)
SLOT(2)
SLOT(3)
SLOT(4)
SLOT(5)

// Elements [begin, n) of slot k, `stride` apart.
#define UPDATE(k)                                                               \
  {                                                                             \
    if (SKIP && s##k[4] != 0.0) return;                                         \
    const float lr = SCALARS ? s##k[0] : pc.lr;                                 \
    const bool first = SCALARS ? s##k[1] != 0.0 : FIRST;                        \
    for (uint i = begin; i < pc.n[k]; i += stride) {                            \
      const float w = p##k[i];                                                  \
      float d = g##k[i];                                                        \
      if (pc.weight_decay != 0.0) d += pc.weight_decay * w;                     \
      if (MOMENTUM) {                                                           \
        const float b = first ? d : pc.momentum * m##k[i] + (1.0 - pc.dampening) * d; \
        m##k[i] = b;                                                            \
        d = NESTEROV ? d + pc.momentum * b : b;                                 \
      }                                                                         \
      p##k[i] = w - lr * d;                                                     \
    }                                                                           \
  }

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
    case 3: UPDATE(3) break;
    case 4: UPDATE(4) break;
    default: UPDATE(5) break;
  }
}
