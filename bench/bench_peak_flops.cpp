// The machine's peak f32 FLOP/s: independent fused multiply-adds on every
// thread, with AVX-512 and with AVX2 registers. Training-step throughput is
// compared with this as FLOPs per step x steps/s / peak.
// Run: build/release/bench/bench_peak_flops --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <rumus/rumus.hpp>

namespace {

constexpr int kChains = 12;  // enough independent FMAs to cover the FMA latency on two ports
constexpr long kIterations = 1 << 22;

// Returns a value that depends on every accumulator, so nothing is optimised away.
__attribute__((target("avx512f"))) float fma_avx512(long n) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_avx2(long n) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < n; ++k)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

// Every thread of rumus's pool (rumus::num_threads()) runs the loop once per iteration.
template <float (*Kernel)(long)>
void run(benchmark::State& state, int lanes, bool supported) {
  if (!supported) {
    state.SkipWithError("the CPU lacks this instruction set");
    return;
  }
  const int threads = rumus::num_threads();
  for (auto _ : state) {
    float sink = 0;
#pragma omp parallel reduction(+ : sink) num_threads(threads)
    sink += Kernel(kIterations);
    benchmark::DoNotOptimize(sink);
  }
  const double flops = 2.0 * lanes * kChains * double(kIterations) * threads;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = threads;
}

void BM_PeakAvx512(benchmark::State& state) { run<fma_avx512>(state, 16, __builtin_cpu_supports("avx512f")); }
void BM_PeakAvx2(benchmark::State& state) { run<fma_avx2>(state, 8, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")); }
BENCHMARK(BM_PeakAvx512)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PeakAvx2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
