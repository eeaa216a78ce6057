// GEMM at the MLP's shapes and elementwise ops from 1e3 to 1e7 elements.
// Run: build/release/bench/bench_core --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <rumus/rumus.hpp>

using namespace rumus;

namespace {

// [M, K] x [K, N]; trans flags say which operand arrives transposed (as in backward).
void BM_Matmul(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  const bool ta = state.range(3), tb = state.range(4);
  Tensor a = ta ? randn({k, m}).t() : randn({m, k});
  Tensor b = tb ? randn({n, k}).t() : randn({k, n});
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.storage().data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(m * n * k) * double(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}
// Forward x@W1 (64x784x512), x@W2 (64x512x512); backward dX = dY@W^T, dW = X^T@dY.
BENCHMARK(BM_Matmul)
    ->ArgNames({"M", "K", "N", "tA", "tB"})
    ->Args({64, 784, 512, 0, 0})
    ->Args({64, 512, 512, 0, 0})
    ->Args({64, 512, 784, 0, 1})
    ->Args({64, 512, 512, 0, 1})
    ->Args({784, 64, 512, 1, 0})
    ->Args({512, 64, 512, 1, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

template <class Op>
void elementwise(benchmark::State& state, Op op, int tensors_touched) {
  const auto n = state.range(0);
  Tensor a = randn({n}), b = randn({n});
  for (auto _ : state) {
    Tensor c = op(a, b);
    benchmark::DoNotOptimize(c.storage().data());
  }
  state.counters["GB/s"] = benchmark::Counter(double(tensors_touched) * 4.0 * double(n) * double(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_Add(benchmark::State& s) { elementwise(s, [](const Tensor& a, const Tensor& b) { return add(a, b); }, 3); }
void BM_Mul(benchmark::State& s) { elementwise(s, [](const Tensor& a, const Tensor& b) { return mul(a, b); }, 3); }
void BM_Relu(benchmark::State& s) { elementwise(s, [](const Tensor& a, const Tensor&) { return relu(a); }, 2); }
void BM_Exp(benchmark::State& s) { elementwise(s, [](const Tensor& a, const Tensor&) { return exp(a); }, 2); }
void BM_Sum(benchmark::State& s) { elementwise(s, [](const Tensor& a, const Tensor&) { return sum(a); }, 1); }
void BM_AddBroadcastRow(benchmark::State& s) {
  const auto n = s.range(0);
  Tensor a = randn({n / 1000, 1000}), b = randn({1000});
  for (auto _ : s) benchmark::DoNotOptimize(add(a, b).storage().data());
  s.counters["GB/s"] = benchmark::Counter(8.0 * double(n) * double(s.iterations()), benchmark::Counter::kIsRate,
                                          benchmark::Counter::kIs1000);
}

#define ELEMENTWISE_SIZES RangeMultiplier(10)->Range(1000, 10000000)->Unit(benchmark::kMicrosecond)->UseRealTime()
BENCHMARK(BM_Add)->ELEMENTWISE_SIZES;
BENCHMARK(BM_Mul)->ELEMENTWISE_SIZES;
BENCHMARK(BM_Relu)->ELEMENTWISE_SIZES;
BENCHMARK(BM_Exp)->ELEMENTWISE_SIZES;
BENCHMARK(BM_Sum)->ELEMENTWISE_SIZES;
BENCHMARK(BM_AddBroadcastRow)->ELEMENTWISE_SIZES;

}  // namespace

int main(int argc, char** argv) {
  set_num_threads(2);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
}
