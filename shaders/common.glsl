// Shared by every kernel: the codes shared with C++ (generated) and typed
// views of one storage-buffer binding, so a kernel can load and store any dtype.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

#include "rumus_codes.glsl"

uint16_t float_to_bf16(float x) {
  uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t(0x7fc0u);  // NaN stays NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);        // round to nearest even
}

// Float to integer saturates and NaN gives 0, as on the CPU (saturate_cast.hpp):
// GLSL leaves conversions of values out of the target's range undefined.
int sat_i32(float x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return 0x7fffffff;
  if (x < -2147483648.0) return int(0x80000000u);
  return int(x);
}
int64_t sat_i64(double x) {
  if (x != x) return 0l;
  if (x >= 9223372036854775808.0lf) return 0x7fffffffffffffffl;
  if (x < -9223372036854775808.0lf) return int64_t(0x8000000000000000ul);
  return int64_t(x);
}
uint sat_u8(float x) {
  if (!(x > 0.0)) return 0u;  // NaN too
  if (x >= 255.0) return 255u;
  return uint(x);
}

// REAL is the arithmetic type: float, or double in the f64 variant of a shader
// (compiled again with -DRUMUS_F64 as <name>_f64). Literals without the lf
// suffix are float: constants not exact in float need one of each.
#ifdef RUMUS_F64
#define REAL double
int sat_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0lf) return 0x7fffffff;
  if (x < -2147483648.0lf) return int(0x80000000u);
  return int(x);
}
uint sat_u8(double x) {
  if (!(x > 0.0lf)) return 0u;  // NaN too
  if (x >= 255.0lf) return 255u;
  return uint(x);
}
REAL real_inf() { return packDouble2x32(uvec2(0u, 0x7ff00000u)); }
REAL real_nan() { return packDouble2x32(uvec2(0u, 0x7ff80000u)); }
#include "math_f64.glsl"
REAL exp_r(REAL x) { return exp_d(x); }
REAL log_r(REAL x) { return log_d(x); }
#else
#define REAL float
REAL real_inf() { return uintBitsToFloat(0x7f800000u); }
REAL real_nan() { return uintBitsToFloat(0x7fc00000u); }
REAL exp_r(REAL x) { return exp(x); }
REAL log_r(REAL x) { return log(x); }
#endif

// A float to i8 or i16 ([lo, hi] its range), saturating as sat_i32.
int sat_small(REAL x, REAL lo, REAL hi) {
  if (x != x) return 0;
  return int(clamp(x, lo, hi));
}

// TENSOR(B) declares binding B as float/uint/u16/u8 arrays plus loadB/storeB,
// which convert through REAL (the arithmetic type of every kernel).
#define TENSOR(B)                                                                  \
  layout(set = 0, binding = B) buffer T##B##f { float v[]; } t##B##f;              \
  layout(set = 0, binding = B) buffer T##B##u { uint v[]; } t##B##u;               \
  layout(set = 0, binding = B) buffer T##B##h { uint16_t v[]; } t##B##h;           \
  layout(set = 0, binding = B) buffer T##B##b { uint8_t v[]; } t##B##b;            \
  REAL load##B(uint dt, uint i) {                                                  \
    if (dt == DT_F32) return REAL(t##B##f.v[i]);                                   \
    if (dt == DT_F64) return REAL(packDouble2x32(uvec2(t##B##u.v[2 * i], t##B##u.v[2 * i + 1]))); \
    if (dt == DT_F16) return REAL(unpackHalf2x16(uint(t##B##h.v[i])).x);           \
    if (dt == DT_BF16) return REAL(uintBitsToFloat(uint(t##B##h.v[i]) << 16));     \
    if (dt == DT_I32) return REAL(int(t##B##u.v[i]));                              \
    if (dt == DT_I64) return REAL(packInt2x32(ivec2(t##B##u.v[2 * i], t##B##u.v[2 * i + 1]))); \
    if (dt == DT_I16) return REAL(int(uint(t##B##h.v[i]) << 16) >> 16);  /* sign-extended */ \
    if (dt == DT_I8) return REAL(int(uint(t##B##b.v[i]) << 24) >> 24);                         \
    return REAL(uint(t##B##b.v[i]));  /* u8, bool */                               \
  }                                                                                \
  void store##B(uint dt, uint i, REAL x) {                                         \
    if (dt == DT_F32) { t##B##f.v[i] = float(x); return; }                         \
    if (dt == DT_F64) { uvec2 w = unpackDouble2x32(double(x)); t##B##u.v[2 * i] = w.x; t##B##u.v[2 * i + 1] = w.y; return; } \
    if (dt == DT_F16) { t##B##h.v[i] = uint16_t(packHalf2x16(vec2(float(x), 0.0)) & 0xffffu); return; } \
    if (dt == DT_BF16) { t##B##h.v[i] = float_to_bf16(float(x)); return; }        \
    if (dt == DT_I32) { t##B##u.v[i] = uint(sat_i32(x)); return; }                 \
    if (dt == DT_I64) { ivec2 w = unpackInt2x32(sat_i64(double(x))); t##B##u.v[2 * i] = uint(w.x); t##B##u.v[2 * i + 1] = uint(w.y); return; } \
    if (dt == DT_BOOLEAN) { t##B##b.v[i] = uint8_t(x != REAL(0) ? 1u : 0u); return; }  /* NaN is true */ \
    if (dt == DT_I16) { t##B##h.v[i] = uint16_t(uint(sat_i32(x)) & 0xffffu); return; } \
    t##B##b.v[i] = uint8_t(uint(sat_i32(x)));  /* u8 and i8 arithmetic wraps, as on the CPU */ \
  }

bool is_nan_f(REAL x) { return x != x; }

// Four f16 or bf16 values (dt) in 8 bytes, value 0 in the low half of .x:
// the quads of 16-bit tensors that kernels load and store 8 bytes at a time.
vec4 unpack_quad16(uint dt, uvec2 h) {
  if (dt == DT_F16) return vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
  return uintBitsToFloat(uvec4(h.x << 16, h.x & 0xffff0000u, h.y << 16, h.y & 0xffff0000u));
}
uvec2 pack_quad16(uint dt, vec4 v) {
  if (dt == DT_F16) return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
  return uvec2(uint(float_to_bf16(v.x)) | uint(float_to_bf16(v.y)) << 16,
               uint(float_to_bf16(v.z)) | uint(float_to_bf16(v.w)) << 16);
}
