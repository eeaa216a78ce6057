#version 450
// One LSTM time step's gate math (src/backend/lstm.hpp), one invocation per
// (batch row, hidden unit): MODE 0 the forward, MODE 1 the backward. The four
// gates of unit j of row r sit at r * 4H + {0, H, 2H, 3H} + j (i, f, g, o).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint DT = 0;
layout(constant_id = 1) const uint MODE = 0;

#define PUSH_LSTM
#include "push_constants.h"

// Forward: 0 h', 1 c', 2 act, 3 xp, 4 hp, 5 c (6 unused).
// Backward: 0 d_gates, 1 d_c, 2 dh', 3 dc' (read when has_dc), 4 act, 5 c, 6 c'.
TENSOR(0)
TENSOR(1)
TENSOR(2)
TENSOR(3)
TENSOR(4)
TENSOR(5)
TENSOR(6)

#ifdef RUMUS_F64
REAL tanh_of(REAL x) { return tanh_d(x); }
#else
REAL tanh_of(REAL x) { return tanh(clamp(x, -15.0, 15.0)); }  // some drivers overflow exp for large |x|
#endif
REAL sigmoid_of(REAL x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp_r(-x));
  REAL e = exp_r(x);
  return e / (1.0 + e);
}

uint at(uint operand, uint i) { return uint(pc.off[operand]) + i; }

void main() {
  const uint n = pc.batch * pc.hidden, h = pc.hidden;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint e = gl_GlobalInvocationID.x; e < n; e += step) {
    const uint gate = (e / h) * 4u * h + e % h;
    if (MODE == 0u) {
      REAL i = sigmoid_of(load3(DT, at(3, gate)) + load4(DT, at(4, gate)));
      REAL f = sigmoid_of(load3(DT, at(3, gate + h)) + load4(DT, at(4, gate + h)));
      REAL g = tanh_of(load3(DT, at(3, gate + 2u * h)) + load4(DT, at(4, gate + 2u * h)));
      REAL o = sigmoid_of(load3(DT, at(3, gate + 3u * h)) + load4(DT, at(4, gate + 3u * h)));
      REAL c_next = f * load5(DT, at(5, e)) + i * g;
      store2(DT, at(2, gate), i);
      store2(DT, at(2, gate + h), f);
      store2(DT, at(2, gate + 2u * h), g);
      store2(DT, at(2, gate + 3u * h), o);
      store1(DT, at(1, e), c_next);
      store0(DT, at(0, e), o * tanh_of(c_next));
    } else {
      REAL i = load4(DT, at(4, gate)), f = load4(DT, at(4, gate + h));
      REAL g = load4(DT, at(4, gate + 2u * h)), o = load4(DT, at(4, gate + 3u * h));
      REAL tc = tanh_of(load6(DT, at(6, e)));
      REAL dh = load2(DT, at(2, e));
      // The cell state's gradient: through h' = o tanh(c'), and from c' directly.
      REAL dcs = dh * o * (1.0 - tc * tc) + (pc.has_dc != 0u ? load3(DT, at(3, e)) : REAL(0.0));
      store0(DT, at(0, gate), dcs * g * i * (1.0 - i));
      store0(DT, at(0, gate + h), dcs * load5(DT, at(5, e)) * f * (1.0 - f));
      store0(DT, at(0, gate + 2u * h), dcs * i * (1.0 - g * g));
      store0(DT, at(0, gate + 3u * h), dh * tc * o * (1.0 - o));
      store1(DT, at(1, e), dcs * f);
    }
  }
}
