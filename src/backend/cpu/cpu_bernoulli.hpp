// Dropout's f32 mask kernel, compiled for several instruction sets (cpu_bernoulli.cpp).
#pragma once
#include <cstdint>

namespace rumus::cpu {

// For i in [begin, end): o[i] = value if word i % 4 of Philox draw (seed,
// offset + i / 4) falls below `limit` (on its top 24 bits), else 0. `begin`
// is a multiple of 4. With x, also y[i] = x[i] * o[i], in the same pass.
void bernoulli_f32(float* o, std::int64_t begin, std::int64_t end, std::uint64_t seed, std::uint64_t offset,
                   std::uint32_t limit, float value, const float* x = nullptr, float* y = nullptr);

}  // namespace rumus::cpu
