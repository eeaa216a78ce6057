#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
// Element i of a random op draws counter (offset + i, 0, 0) under key = seed;
// the Vulkan shaders implement the same mapping so devices agree bit for bit.
#include <array>
#include <cmath>
#include <cstdint>

namespace rumus::philox {

inline std::array<std::uint32_t, 4> draw(std::uint64_t seed, std::uint64_t counter) {
  std::uint32_t c0 = std::uint32_t(counter), c1 = std::uint32_t(counter >> 32), c2 = 0, c3 = 0;
  std::uint32_t k0 = std::uint32_t(seed), k1 = std::uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = std::uint64_t(0xD2511F53u) * c0, p1 = std::uint64_t(0xCD9E8D57u) * c2;
    std::uint32_t n0 = std::uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = std::uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = std::uint32_t(p1);
    c3 = std::uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) with 24 bits, as float arithmetic on every device.
inline float uniform24(std::uint32_t r) { return float(r >> 8) * (1.0f / 16777216.0f); }

// Standard normal by Box-Muller from two draws.
inline float normal(std::uint32_t r0, std::uint32_t r1) {
  float u1 = 1.0f - uniform24(r0);  // (0, 1]
  float u2 = uniform24(r1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

}  // namespace rumus::philox
