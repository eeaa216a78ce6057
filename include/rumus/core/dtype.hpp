#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <string_view>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// The dtype codes, in order. The Vulkan shaders get the same numbering
// (DT_F32 = 0u, ...) generated from this list at build time. `boolean` is
// PyTorch's torch.bool (one byte, 0 or 1), named "bool".
#define RUMUS_DTYPES(X) X(f32) X(f64) X(f16) X(bf16) X(i32) X(i64) X(u8) X(boolean) X(i8) X(i16)

#define RUMUS_DTYPE_ENTRY(name) name,
enum class DType : std::uint8_t { RUMUS_DTYPES(RUMUS_DTYPE_ENTRY) };
#undef RUMUS_DTYPE_ENTRY

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f64: case DType::i64: return 8;
    case DType::f16: case DType::bf16: case DType::i16: return 2;
    case DType::u8: case DType::boolean: case DType::i8: return 1;
  }
  return 0;
}
constexpr std::string_view dtype_name(DType t) {
  if (t == DType::boolean) return "bool";
  switch (t) {
#define RUMUS_DTYPE_NAME(name) \
  case DType::name:            \
    return #name;
    RUMUS_DTYPES(RUMUS_DTYPE_NAME)
#undef RUMUS_DTYPE_NAME
  }
  return "?";
}
// Prints the name, as dtype_name: "f32".
std::ostream& operator<<(std::ostream& os, DType t);
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
// f16 or bf16: stored in 16 bits, computed in f32.
constexpr bool is_16bit_float(DType t) { return t == DType::f16 || t == DType::bf16; }

// 16-bit float storage types. Arithmetic happens in float; these only convert.
struct Half {
  std::uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};
struct BFloat16 {
  std::uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    std::uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { bits = 0x7fc0; return; }  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  explicit operator float() const {
    std::uint32_t u = std::uint32_t(bits) << 16; float f; std::memcpy(&f, &u, 4); return f;
  }
};

inline Half::Half(float f) {
  std::uint32_t x; std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t mant = x & 0x7fffffu;
  int exp = int((x >> 23) & 0xff);
  if (exp == 0xff) { bits = std::uint16_t(sign | 0x7c00u | (mant ? 0x200u : 0u)); return; }
  int e = exp - 127 + 15;
  if (e >= 0x1f) { bits = std::uint16_t(sign | 0x7c00u); return; }
  if (e <= 0) {
    if (e < -10) { bits = std::uint16_t(sign); return; }
    mant |= 0x800000u;
    int shift = 14 - e;
    std::uint32_t half = mant >> shift;
    std::uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    bits = std::uint16_t(sign | half);
    return;
  }
  std::uint32_t half = sign | (std::uint32_t(e) << 10) | (mant >> 13);
  std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  bits = std::uint16_t(half);
}
inline Half::operator float() const {
  std::uint32_t sign = std::uint32_t(bits & 0x8000u) << 16;
  std::uint32_t exp = (bits >> 10) & 0x1fu, mant = bits & 0x3ffu, out;
  if (exp == 0) {
    if (mant == 0) out = sign;
    else {
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400u));
      out = sign | (std::uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f; std::memcpy(&f, &out, 4); return f;
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<Half>() { return DType::f16; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
template <> constexpr DType dtype_of<std::int8_t>() { return DType::i8; }
template <> constexpr DType dtype_of<std::int16_t>() { return DType::i16; }

}  // namespace rumus

RUMUS_API_END
