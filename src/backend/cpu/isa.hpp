#pragma once
// Hot CPU loops compiled three times, for AVX-512, AVX2 and baseline x86-64,
// and chosen once at run time from the CPU's features (the library itself is
// built for baseline x86-64, so it runs on any x86-64 CPU). A plain function
// pointer picked on first use, not ifunc/target_clones: those resolve before
// sanitizer runtimes start.
//
// Two forms. For a loop written inline, with_isa([&]() RUMUS_INLINE { ... })
// runs the lambda compiled for the chosen instruction set (the lambda, and what
// it calls inline, is compiled again inside each variant). For a named loop:
//
//   RUMUS_CPU_ISA_VARIANTS(sgd_f32, const SgdLoop<float>&, sgd_loop<float>)
//
// defines `void sgd_f32(const SgdLoop<float>& args, std::int64_t begin, std::int64_t end)`
// running body(args, begin, end), where body is an always-inline template
// compiled anew inside each variant.
#include <cstdint>

namespace rumus::cpu {

enum class Isa { baseline, avx2, avx512 };

inline Isa cpu_isa() {
  static const Isa isa = [] {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
    return Isa::baseline;
  }();
  return isa;
}

#define RUMUS_INLINE __attribute__((always_inline))

#if defined(__x86_64__)
template <class F>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) void run_avx512(F& f) {
  f();
}
template <class F>
__attribute__((target("avx2,fma"))) void run_avx2(F& f) {
  f();
}
template <class F>
void with_isa(F&& f) {
  switch (cpu_isa()) {
    case Isa::avx512: return run_avx512(f);
    case Isa::avx2: return run_avx2(f);
    case Isa::baseline: return f();
  }
}
#else
template <class F>
void with_isa(F&& f) { f(); }
#endif

#if defined(__x86_64__)
#define RUMUS_CPU_ISA_VARIANTS(name, Args, body)                                                                  \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))) inline void name##_avx512(               \
      Args args, std::int64_t begin, std::int64_t end) {                                                         \
    body(args, begin, end);                                                                                      \
  }                                                                                                              \
  __attribute__((target("avx2,fma"))) inline void name##_avx2(Args args, std::int64_t begin, std::int64_t end) { \
    body(args, begin, end);                                                                                      \
  }                                                                                                              \
  inline void name##_baseline(Args args, std::int64_t begin, std::int64_t end) { body(args, begin, end); }       \
  inline void name(Args args, std::int64_t begin, std::int64_t end) {                                           \
    static void (*const fn)(Args, std::int64_t, std::int64_t) = cpu_isa() == Isa::avx512 ? name##_avx512        \
                                                                 : cpu_isa() == Isa::avx2 ? name##_avx2          \
                                                                                          : name##_baseline;     \
    fn(args, begin, end);                                                                                        \
  }
#else
#define RUMUS_CPU_ISA_VARIANTS(name, Args, body) \
  inline void name(Args args, std::int64_t begin, std::int64_t end) { body(args, begin, end); }
#endif

}  // namespace rumus::cpu
