#pragma once
#include <cstdint>
#include <mutex>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Counter-based random stream (Philox4x32-10): a (seed, offset) pair fixes
// every number, so the CPU and the GPU draw identical values in parallel.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(std::uint64_t seed) { std::lock_guard lk(mu_); seed_ = seed; offset_ = 0; }
  std::uint64_t seed() const { std::lock_guard lk(mu_); return seed_; }
  std::uint64_t offset() const { std::lock_guard lk(mu_); return offset_; }
  void set_state(std::uint64_t seed, std::uint64_t offset) { std::lock_guard lk(mu_); seed_ = seed; offset_ = offset; }
  // Reserves `count` counters; returns the first.
  std::uint64_t advance(std::uint64_t count) { std::lock_guard lk(mu_); auto o = offset_; offset_ += count; return o; }

 private:
  mutable std::mutex mu_;  // also taken by the readers: manual_seed may run on another thread
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace rumus

RUMUS_API_END
