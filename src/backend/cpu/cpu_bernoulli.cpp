// Dropout's mask is drawn every training step; Philox's 32x32->64-bit
// multiplies vectorise with AVX2 and AVX-512, so the loop is compiled for both
// as well as for the baseline, and the widest the CPU runs is chosen once.
//
// The choice is an ordinary function pointer, not target_clones: those resolve
// through an ifunc, which the dynamic loader runs before a sanitizer runtime is
// initialised (a ThreadSanitizer build crashed there at start-up).
#include "cpu_bernoulli.hpp"

#include "../philox.hpp"

namespace rumus::cpu {

namespace {
using Kernel = void (*)(float*, const float*, float*, std::int64_t, std::int64_t, std::uint64_t, std::uint64_t,
                        std::uint32_t, float);

// One definition per instruction set. The loop is spelled in each function
// (a macro, not a shared inline helper) so that flatten inlines philox::draw
// into it under both GCC and clang, which compiles the draw for that set.
// Each draw gives four elements: whole quads first (the loop that vectorises), then the tail.
// With x, y = x * o in the same pass (dropout's forward).
#define RUMUS_BERNOULLI_KERNEL(name, ...)                                                                        \
  __VA_ARGS__ void name(float* o, const float* x, float* y, std::int64_t begin, std::int64_t end,                \
                        std::uint64_t seed, std::uint64_t offset, std::uint32_t limit, float value) {            \
    const std::int64_t quads_end = begin + (end - begin) / 4 * 4;                                                \
    if (x) {                                                                                                     \
      for (std::int64_t i = begin; i < quads_end; i += 4) {                                                      \
        const auto r = philox::draw(seed, offset + std::uint64_t(i / 4));                                        \
        for (int j = 0; j < 4; ++j) {                                                                            \
          o[i + j] = (r[j] >> 8) < limit ? value : 0.0f;                                                         \
          y[i + j] = x[i + j] * o[i + j];                                                                        \
        }                                                                                                        \
      }                                                                                                          \
    } else {                                                                                                     \
      for (std::int64_t i = begin; i < quads_end; i += 4) {                                                      \
        const auto r = philox::draw(seed, offset + std::uint64_t(i / 4));                                        \
        for (int j = 0; j < 4; ++j) o[i + j] = (r[j] >> 8) < limit ? value : 0.0f;                               \
      }                                                                                                          \
    }                                                                                                            \
    if (quads_end < end) {                                                                                       \
      const auto r = philox::draw(seed, offset + std::uint64_t(quads_end / 4));                                  \
      for (std::int64_t i = quads_end; i < end; ++i) {                                                           \
        o[i] = (r[i - quads_end] >> 8) < limit ? value : 0.0f;                                                   \
        if (x) y[i] = x[i] * o[i];                                                                               \
      }                                                                                                          \
    }                                                                                                            \
  }

#if defined(__x86_64__) || defined(__i386__)
RUMUS_BERNOULLI_KERNEL(bernoulli_avx512, [[gnu::target("avx512f"), gnu::flatten]])
RUMUS_BERNOULLI_KERNEL(bernoulli_avx2, [[gnu::target("avx2"), gnu::flatten]])
#endif
RUMUS_BERNOULLI_KERNEL(bernoulli_baseline, [[gnu::flatten]])
#undef RUMUS_BERNOULLI_KERNEL

Kernel choose_kernel() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return bernoulli_avx512;
  if (__builtin_cpu_supports("avx2")) return bernoulli_avx2;
#endif
  return bernoulli_baseline;
}
}  // namespace

void bernoulli_f32(float* o, std::int64_t begin, std::int64_t end, std::uint64_t seed, std::uint64_t offset,
                   std::uint32_t limit, float value, const float* x, float* y) {
  static const Kernel kernel = choose_kernel();  // thread-safe, once
  kernel(o, x, y, begin, end, seed, offset, limit, value);
}

}  // namespace rumus::cpu
