// Dropout's f32 mask kernel, compiled for several instruction sets (cpu_bernoulli.cpp).
#pragma once
#include <cstdint>

namespace rumus::cpu {

// o[i] = 1 if Philox draw (seed, offset + i) falls below `limit` (on its top 24 bits), else 0, for i in [begin, end).
void bernoulli_f32(float* o, std::int64_t begin, std::int64_t end, std::uint64_t seed, std::uint64_t offset,
                   std::uint32_t limit);

}  // namespace rumus::cpu
