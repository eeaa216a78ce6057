#version 450
// Every pointwise kernel: fill, copy/cast, unary, binary, where. The op and the
// dtypes are specialization constants, so each pipeline is branch-free.
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0;    // UNARY_* or BINARY_*, per KIND
layout(constant_id = 2) const uint DT_OUT = 0;
layout(constant_id = 3) const uint DT_A = 0;
layout(constant_id = 4) const uint DT_B = 0;
layout(constant_id = 5) const uint DT_C = 0;
layout(constant_id = 6) const bool CONTIGUOUS = false;  // every operand dense in logical order
layout(constant_id = 7) const uint ELEM_BYTES = 4;      // raw copies only
layout(constant_id = 8) const uint KIND = 0;            // POINTWISE_*
// CONTIGUOUS 4-byte copies, and fills, casts, unary and binary ops whose
// operands are each f32 or f16, offsets multiples of 4: an invocation
// takes four elements in one 16-byte (f16: 8-byte) access per operand.
layout(constant_id = 9) const bool QUADS = false;

#define PUSH_POINTWISE
#include "push_constants.h"

TENSOR(0)
TENSOR(1)
TENSOR(2)
TENSOR(3)
layout(set = 0, binding = 0) buffer Q0 { vec4 v[]; } t0q;
layout(set = 0, binding = 1) buffer Q1 { vec4 v[]; } t1q;
layout(set = 0, binding = 2) buffer Q2 { vec4 v[]; } t2q;
layout(set = 0, binding = 0) buffer W0 { uvec4 v[]; } t0w;
layout(set = 0, binding = 1) buffer W1 { uvec4 v[]; } t1w;
layout(set = 0, binding = 0) buffer D0 { uvec2 v[]; } t0d;
layout(set = 0, binding = 1) buffer D1 { uvec2 v[]; } t1d;
layout(set = 0, binding = 2) buffer D2 { uvec2 v[]; } t2d;


#ifdef RUMUS_F64
const double SQRT1_2 = 0.70710678118654752440lf, INV_SQRT_2PI = 0.39894228040143267794lf,
             SQRT_2_OVER_PI = 0.79788456080286535588lf, GELU_C = 0.044715lf;
#else
const float SQRT1_2 = 0.70710678118654752440, INV_SQRT_2PI = 0.39894228040143267794,
            SQRT_2_OVER_PI = 0.79788456080286535588, GELU_C = 0.044715;
#endif

// The scalar parameters: float, or the doubles' words in the f64 variant.
#ifdef RUMUS_F64
REAL param0() { return packDouble2x32(uvec2(pc.p0_lo, pc.p0_hi)); }
REAL param1() { return packDouble2x32(uvec2(pc.p1_lo, pc.p1_hi)); }
REAL erf_of(REAL x) { return erf_d(x); }
REAL tanh_of(REAL x) { return tanh_d(x); }
REAL pow_of(REAL x, REAL y) { return pow_d(x, y); }
#else
REAL param0() { return pc.p0; }
REAL param1() { return pc.p1; }
float erf_of(float x) {  // Abramowitz & Stegun 7.1.26, |error| < 1.5e-7
  float t = 1.0 / (1.0 + 0.3275911 * abs(x));
  float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return x < 0.0 ? -y : y;
}
float tanh_of(float x) { return tanh(clamp(x, -15.0, 15.0)); }  // some drivers overflow exp for large |x|
float pow_of(float x, float y) {  // C semantics: negative bases need integer exponents
  if (y == 0.0) return 1.0;
  if (x == 0.0) return y > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  if (x > 0.0) return pow(x, y);
  if (floor(y) != y) return uintBitsToFloat(0x7fc00000u);
  float r = pow(-x, y);
  return mod(y, 2.0) == 1.0 ? -r : r;
}
#endif
#include "math_special.glsl"
REAL sigmoid_of(REAL x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp_r(-x));
  REAL e = exp_r(x);
  return e / (1.0 + e);
}
bool is_nan(REAL x) { return x != x; }

REAL unary(REAL x) {
  switch (OP) {
    case UNARY_NEG: return -x;
    case UNARY_EXP: return exp_r(x);
    case UNARY_LOG: return log_r(x);
    case UNARY_SQRT: return sqrt(x);
    case UNARY_ABS: return abs(x);
    case UNARY_RELU: return x > 0.0 ? x : 0.0;
    case UNARY_SIGMOID: return sigmoid_of(x);
    case UNARY_TANH: return tanh_of(x);
    case UNARY_GELU: return 0.5 * x * (1.0 + erf_of(x * SQRT1_2));
    case UNARY_GELU_TANH: return 0.5 * x * (1.0 + tanh_of(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    case UNARY_SILU: return x * sigmoid_of(x);
    case UNARY_HARDSWISH: return x <= -3.0 ? 0.0 : x >= 3.0 ? x : x * (x + 3.0) / 6.0;
    case UNARY_LEAKY_RELU: return x > 0.0 ? x : x * param0();
    case UNARY_POW_SCALAR: return pow_of(x, param0());
    case UNARY_CLAMP:
      if (!is_nan(param0()) && x < param0()) x = param0();
      if (!is_nan(param1()) && x > param1()) x = param1();
      return x;
    case UNARY_SIGN: return REAL((x > 0.0 ? 1 : 0) - (x < 0.0 ? 1 : 0));
    case UNARY_SQUARE: return x * x;
    case UNARY_RECIPROCAL: return 1.0 / x;
    case UNARY_RSQRT: return 1.0 / sqrt(x);
    case UNARY_ADD_SCALAR: return x + param0();
    case UNARY_MUL_SCALAR: return x * param0();
    case UNARY_FLOOR: return floor(x);
    case UNARY_CEIL: return ceil(x);
    case UNARY_TRUNC: return trunc(x);
    case UNARY_ROUND: return roundEven(x);  // half to even, as PyTorch
    case UNARY_SIN: return sin_r(x);
    case UNARY_COS: return cos_r(x);
    case UNARY_TAN: return tan_r(x);
    case UNARY_ASIN: return asin_r(x);
    case UNARY_ACOS: return acos_r(x);
    case UNARY_ATAN: return atan_r(x);
    case UNARY_SINH: return sinh_r(x);
    case UNARY_COSH: return cosh_r(x);
    case UNARY_ASINH: return asinh_r(x);
    case UNARY_ACOSH: return acosh_r(x);
    case UNARY_ATANH: return atanh_r(x);
    case UNARY_ERF: return erf_of(x);
    case UNARY_ERFC: return erfc_r(x);
    case UNARY_ERFINV: return erfinv_r(x);
    case UNARY_LOG1P: return log1p_r(x);
    case UNARY_EXPM1: return expm1_r(x);
    case UNARY_LOG2: return log2_r(x);
    case UNARY_LOG10: return log10_r(x);
    case UNARY_EXP2: return exp2_r(x);
  }
  return 0.0;
}

REAL binary(REAL a, REAL b) {
  switch (OP) {
    case BINARY_ADD: return a + b;
    case BINARY_SUB: return a - b;
    case BINARY_MUL: return a * b;
    case BINARY_DIV: return a / b;
    case BINARY_POW: return pow_of(a, b);
    case BINARY_MAXIMUM: return a > b || is_nan(a) ? a : b;
    case BINARY_MINIMUM: return a < b || is_nan(a) ? a : b;
    case BINARY_EQ: return a == b ? 1.0 : 0.0;
    case BINARY_NE: return a != b ? 1.0 : 0.0;
    case BINARY_LT: return a < b ? 1.0 : 0.0;
    case BINARY_LE: return a <= b ? 1.0 : 0.0;
    case BINARY_GT: return a > b ? 1.0 : 0.0;
    case BINARY_GE: return a >= b ? 1.0 : 0.0;
    case BINARY_RELU_BACKWARD: return b > 0.0 ? a : 0.0;
    case BINARY_SIGMOID_BACKWARD: return a * b * (1.0 - b);
    case BINARY_TANH_BACKWARD: return a * (1.0 - b * b);
    case BINARY_GELU_BACKWARD: {
      REAL cdf = 0.5 * (1.0 + erf_of(b * SQRT1_2));
      REAL pdf = INV_SQRT_2PI * exp_r(-0.5 * b * b);
      return a * (cdf + b * pdf);
    }
    case BINARY_GELU_TANH_BACKWARD: {
      REAL t = tanh_of(SQRT_2_OVER_PI * (b + GELU_C * b * b * b));
      REAL dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * b * b);
      return a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * dinner);
    }
    case BINARY_SILU_BACKWARD: {
      REAL s = sigmoid_of(b);
      return a * s * (1.0 + b * (1.0 - s));
    }
    case BINARY_HARDSWISH_BACKWARD: return b < -3.0 ? 0.0 : b <= 3.0 ? a * (b / 3.0 + 0.5) : a;
    case BINARY_LEAKY_RELU_BACKWARD: return b > 0.0 ? a : a * param0();
    case BINARY_CLAMP_BACKWARD: return (is_nan(param0()) || b >= param0()) && (is_nan(param1()) || b <= param1()) ? a : 0.0;
    case BINARY_ABS_BACKWARD: return b > 0.0 ? a : (b < 0.0 ? -a : 0.0);
  }
  return 0.0;
}

// A QUADS operand's four values: f32 in one 16-byte access, f16 in one of 8.
vec4 quad_a(uint q) { return DT_A == DT_F16 ? unpack_quad16(DT_F16, t1d.v[q]) : t1q.v[q]; }
vec4 quad_b(uint q) { return DT_B == DT_F16 ? unpack_quad16(DT_F16, t2d.v[q]) : t2q.v[q]; }
void quad_out(uint q, vec4 v) {
  if (DT_OUT == DT_F16) t0d.v[q] = pack_quad16(DT_F16, v);
  else t0q.v[q] = v;
}

// Elements [4 q, 4 q + 4) of a QUADS dispatch.
void quad(uint q) {
  const uint q0 = uint(pc.offset[0]) / 4u + q, q1 = uint(pc.offset[1]) / 4u + q, q2 = uint(pc.offset[2]) / 4u + q;
  if (KIND == POINTWISE_FILL) {
    quad_out(q0, vec4(pc.p0));
  } else if (KIND == POINTWISE_RAW_COPY) {
    t0w.v[q0] = t1w.v[q1];
  } else if (KIND == POINTWISE_CAST) {  // f32 <-> f16
    quad_out(q0, quad_a(q1));
  } else if (KIND == POINTWISE_UNARY) {
    const vec4 a = quad_a(q1);
    quad_out(q0, vec4(float(unary(a.x)), float(unary(a.y)), float(unary(a.z)), float(unary(a.w))));
  } else if (KIND == POINTWISE_BINARY) {
    const vec4 a = quad_a(q1), b = quad_b(q2);
    quad_out(q0, vec4(float(binary(a.x, b.x)), float(binary(a.y, b.y)), float(binary(a.z, b.z)),
                      float(binary(a.w, b.w))));
  }
}

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  // QUADS: whole quads first; the last n % 4 elements take the general loop.
  if (QUADS)
    for (uint q = gl_GlobalInvocationID.x; q < pc.n / 4u; q += step) quad(q);
  for (uint i = QUADS ? pc.n / 4u * 4u + gl_GlobalInvocationID.x : gl_GlobalInvocationID.x; i < pc.n; i += step) {
    int o0 = pc.offset[0], o1 = pc.offset[1], o2 = pc.offset[2], o3 = pc.offset[3];
    if (CONTIGUOUS) {
      o0 += int(i); o1 += int(i); o2 += int(i); o3 += int(i);
    } else {
      uint r = i;
      for (int d = int(pc.rank) - 1; d >= 0; --d) {
        int idx = int(r % pc.shape[d]);
        r /= pc.shape[d];
        o0 += idx * pc.stride[d];
        o1 += idx * pc.stride[PW_DIMS + d];
        o2 += idx * pc.stride[2 * PW_DIMS + d];
        o3 += idx * pc.stride[3 * PW_DIMS + d];
      }
    }
    if (KIND == POINTWISE_FILL) {
      // A value, not arithmetic: saturates.
      if (DT_OUT == DT_U8) t0b.v[o0] = uint8_t(sat_u8(pc.p0));
      else if (DT_OUT == DT_I8) t0b.v[o0] = uint8_t(uint(sat_small(pc.p0, -128.0, 127.0)));
      else if (DT_OUT == DT_I16) t0h.v[o0] = uint16_t(uint(sat_small(pc.p0, -32768.0, 32767.0)) & 0xffffu);
      else store0(DT_OUT, o0, REAL(pc.p0));
    } else if (KIND == POINTWISE_FILL64) {  // p0, p1 hold the bits
      t0u.v[2 * o0] = floatBitsToUint(pc.p0);
      t0u.v[2 * o0 + 1] = floatBitsToUint(pc.p1);
    } else if (KIND == POINTWISE_RAW_COPY) {
      if (ELEM_BYTES == 1) t0b.v[o0] = t1b.v[o1];
      else if (ELEM_BYTES == 2) t0h.v[o0] = t1h.v[o1];
      else if (ELEM_BYTES == 4) t0u.v[o0] = t1u.v[o1];
      else { t0u.v[2 * o0] = t1u.v[2 * o1]; t0u.v[2 * o0 + 1] = t1u.v[2 * o1 + 1]; }
    } else if (KIND == POINTWISE_CAST) {
      if (DT_OUT == DT_F64 && DT_A == DT_I64 || DT_OUT == DT_I64 && DT_A == DT_F64) {
        // Wide conversions go through 64-bit types, not float.
        uvec2 w = uvec2(t1u.v[2 * o1], t1u.v[2 * o1 + 1]);
        if (DT_OUT == DT_F64) w = unpackDouble2x32(double(packInt2x32(ivec2(w))));
        else w = uvec2(unpackInt2x32(sat_i64(packDouble2x32(w))));
        t0u.v[2 * o0] = w.x; t0u.v[2 * o0 + 1] = w.y;
      } else if (DT_OUT == DT_F64 || DT_OUT == DT_I64) {
        REAL x = load1(DT_A, o1);
        if (DT_A == DT_I32) {  // exact for every i32
          int v = int(t1u.v[o1]);
          uvec2 w = DT_OUT == DT_F64 ? unpackDouble2x32(double(v)) : uvec2(unpackInt2x32(int64_t(v)));
          t0u.v[2 * o0] = w.x; t0u.v[2 * o0 + 1] = w.y;
        } else {
          store0(DT_OUT, o0, x);
        }
      } else if ((DT_OUT == DT_U8 || DT_OUT == DT_I8 || DT_OUT == DT_I16) &&
                 (DT_A == DT_F32 || DT_A == DT_F64 || DT_A == DT_F16 || DT_A == DT_BF16)) {
        // float -> small integers saturates; integers wrap
        const REAL x = load1(DT_A, o1);
        if (DT_OUT == DT_U8) t0b.v[o0] = uint8_t(sat_u8(x));
        else if (DT_OUT == DT_I8) t0b.v[o0] = uint8_t(uint(sat_small(x, -128.0, 127.0)));
        else t0h.v[o0] = uint16_t(uint(sat_small(x, -32768.0, 32767.0)) & 0xffffu);
      } else {
        store0(DT_OUT, o0, load1(DT_A, o1));
      }
    } else if (KIND == POINTWISE_WHERE) {
      store0(DT_OUT, o0, load1(DT_A, o1) != 0.0 ? load2(DT_B, o2) : load3(DT_C, o3));
    } else if (KIND == POINTWISE_UNARY) {
      store0(DT_OUT, o0, unary(load1(DT_A, o1)));
    } else {
      store0(DT_OUT, o0, binary(load1(DT_A, o1), load2(DT_B, o2)));
    }
  }
}
