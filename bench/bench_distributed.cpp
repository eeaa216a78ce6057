// Collectives on 2 thread ranks (ThreadGroup): time per call and bandwidth,
// for CPU tensors and for Vulkan tensors (which travel through host staging).
// Run: build/release/bench/bench_distributed --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <chrono>

#include <rumus/distributed/distributed.hpp>
#include <rumus/rumus.hpp>

using namespace rumus;
using namespace rumus::distributed;

namespace {

enum Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

bool have_vulkan() {
  static const bool ok = [] {
    try {
      ones({1}, {.device = Device::vulkan(0)});
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return ok;
}

// range(0): op, range(1): f32 elements per rank input, range(2): 0 CPU, 1 Vulkan.
void BM_Collective(benchmark::State& state) {
  const auto op = Op(state.range(0));
  const std::int64_t n = state.range(1);
  const Device dev = state.range(2) ? Device::vulkan(0) : Device::cpu();
  if (!dev.is_cpu() && !have_vulkan()) {
    state.SkipWithError("no Vulkan device");
    return;
  }
  constexpr int ranks = 2, reps = 10;
  StagingStats before = staging_stats();
  std::int64_t calls = 0;
  for (auto _ : state) {
    double seconds = 0;
    run_threads(ranks, [&](ProcessGroup& pg) {
      Tensor t = ones({n}).to(dev);
      auto once = [&] {
        Tensor r;
        switch (op) {
          case kAllReduce: pg.all_reduce(t); r = t; break;
          case kReduceScatter: r = pg.reduce_scatter(t); break;
          case kAllGather: r = pg.all_gather(t); break;
          case kBroadcast: pg.broadcast(t, 0); r = t; break;
        }
        return r;
      };
      once();  // warm-up
      pg.barrier();
      const auto start = std::chrono::steady_clock::now();
      Tensor last;
      for (int i = 0; i < reps; ++i) last = once();
      last.narrow(0, 0, 1).item();  // waits for the device's copies
      pg.barrier();
      if (pg.rank() == 0) seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps;
    }, {}, {.threads_per_rank = 1});
    state.SetIterationTime(seconds);
    calls += (reps + 1) * ranks;
  }
  const StagingStats after = staging_stats();
  state.counters["MB"] = double(n) * 4 / 1e6;
  state.counters["GB/s"] = benchmark::Counter(double(n) * 4 * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["D2H_MB/call"] = double(after.device_to_host_bytes - before.device_to_host_bytes) / double(calls) / 1e6;
  state.counters["H2D_MB/call"] = double(after.host_to_device_bytes - before.host_to_device_bytes) / double(calls) / 1e6;
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"op", "n", "vulkan"});
  for (int dev : {0, 1})
    for (int op : {kAllReduce, kReduceScatter, kAllGather, kBroadcast})
      for (std::int64_t n : {std::int64_t(1) << 14, std::int64_t(1) << 18, std::int64_t(1) << 20}) b->Args({op, n, dev});
}
BENCHMARK(BM_Collective)->Apply(args)->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
