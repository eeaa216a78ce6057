// Collectives on 2 thread ranks (ThreadGroup): time per call and bandwidth,
// for CPU tensors and for Vulkan tensors (which travel through host staging).
// Run: build/release/bench/bench_distributed --benchmark_counters_tabular=true
//
// `bench_distributed --ddp-overlap [rounds] [delay ms]` instead measures how
// much of DDP's communication hides behind backward (bench/ddp_overlap.sh
// runs it and records the figures): 2 thread ranks whose every collective
// sleeps `delay` on the communication thread, as a slow link would take.
//
// `bench_distributed --staging [rounds] [MB]` measures how fast a device
// tensor (f32, 2.7 MB by default) moves through host staging on vulkan:0
// with one rank (bench/staging.sh runs it and records the figures): the
// staging copies (copy_to_host into a mapped buffer on the transfer queue)
// against the former path (DeviceBackend::read, which drains the queue, and
// write), alone, as a round trip, and as one-rank collectives that stage as
// a rank of a larger group would (ThreadGroupOptions::loopback): all_reduce,
// whose exchange leaves the mapped buffer in place, and all_gather, whose
// exchange is a loopback copy into the result buffer.
//
// `bench_distributed --nccl [rounds] [MB]` runs the same one-rank all_reduce
// and all_gather through NcclGroup (on the device alone: copies into memory
// shared with CUDA, NCCL there, copies back) against ThreadGroup's host
// staging (loopback) in the same run (bench/nccl.sh records the figures).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// ---- DDP: communication overlapped with backward ----

constexpr int kLayers = 8, kWidth = 512, kBatch = 128;

struct LayerStack : nn::Module {
  std::vector<nn::Linear> layers;
  LayerStack() {
    layers.reserve(kLayers);
    for (int i = 0; i < kLayers; ++i) layers.emplace_back(kWidth, kWidth);
    for (int i = 0; i < kLayers; ++i) register_module("l" + std::to_string(i), layers[std::size_t(i)]);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& l : layers) h = relu(l(h));
    return h;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// overlapped: DDP's plain step; find_unused: DDP with find_unused_parameters
// (every parameter used: the bitmap's all-reduce comes on top); after_no_sync:
// the step's second backward, after one under no_sync (untimed), whose buckets
// carry the sum of both.
enum class Variant { compute, communication, after_backward, overlapped, find_unused, after_no_sync };
constexpr int kVariants = 6;

// Rank 0's median step time in ms over `steps` steps (after 3 unmeasured).
// Every step starts and ends at a barrier (which sleeps no delay).
double step_ms(Variant variant, std::chrono::microseconds delay, int steps) {
  ThreadGroup group(2, {.collective_delay = delay});
  std::vector<double> times;
  run_ranks(group, [&](ProcessGroup& pg) {
    manual_seed(1);
    LayerStack m;
    const Tensor x = randn({kBatch, kWidth});
    // One bucket per layer: its weight and bias (1 MiB + 2 KiB).
    DistributedDataParallel ddp(m, pg, {.bucket_bytes = std::size_t(kWidth) * (kWidth + 1) * 4,
                                        .find_unused_parameters = variant == Variant::find_unused});
    // Without DDP's hooks for the variants that do not reduce while backward runs.
    LayerStack plain;
    // The buckets one after the other, as DDP sends them, of plain's gradients.
    auto reduce_after = [&](const GradientStore* grads) {
      NoGradGuard no_grad;
      std::vector<std::shared_ptr<Work>> works;
      const std::vector<Tensor> params = plain.parameters();
      for (const auto& bucket : ddp.buckets()) {
        std::vector<Tensor> parts;
        for (std::size_t k : bucket)
          parts.push_back(grads ? grads->at(params[k]).reshape({-1}) : zeros({params[k].numel()}));
        works.push_back(pg.all_reduce_async(cat(parts, 0), Reduce::average));
      }
      for (auto& w : works) w->wait();
    };
    for (int s = 0; s < steps + 3; ++s) {
      if (variant == Variant::after_no_sync) {
        auto accumulate = ddp.no_sync();
        ddp.backward(ddp(x).sum());
      }
      pg.barrier();
      const auto start = std::chrono::steady_clock::now();
      switch (variant) {
        case Variant::compute: backward(plain(x).sum()); break;
        case Variant::communication: reduce_after(nullptr); break;
        case Variant::after_backward: {
          GradientStore g = backward(plain(x).sum());
          reduce_after(&g);
          break;
        }
        case Variant::overlapped:
        case Variant::find_unused:
        case Variant::after_no_sync: ddp.backward(ddp(x).sum()); break;
      }
      pg.barrier();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (pg.rank() == 0 && s >= 3) times.push_back(ms);
    }
  }, {.threads_per_rank = 1});
  return median(times);
}

int ddp_overlap(int rounds, double delay_ms) {
  const auto delay = std::chrono::microseconds(std::int64_t(delay_ms * 1000));
  const char* names[] = {"compute", "communication", "after_backward", "overlapped", "find_unused", "after_no_sync"};
  std::vector<double> per[kVariants];
  std::printf("2 thread ranks, %d Linear(%d, %d) + relu, batch %d per rank, %d buckets of 1 MiB, %.1f ms per bucket\n",
              kLayers, kWidth, kWidth, kBatch, kLayers, delay_ms);
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r + 1);
    for (int v = 0; v < kVariants; ++v) {
      per[v].push_back(step_ms(Variant(v), delay, 15));
      std::printf(" %s %.2f ms%s", names[v], per[v].back(), v < kVariants - 1 ? "," : "\n");
    }
    std::fflush(stdout);
  }
  const double compute = median(per[0]), comm = median(per[1]), after = median(per[2]), over = median(per[3]);
  const double unused = median(per[4]), no_sync = median(per[5]);
  // 1: the step takes max(compute, communication); 0: their sum.
  auto fraction = [&](double step) { return (compute + comm - step) / std::min(compute, comm); };
  std::printf("median: compute %.2f ms, communication %.2f ms, after backward %.2f ms, overlapped %.2f ms, "
              "find_unused %.2f ms, after_no_sync %.2f ms\n",
              compute, comm, after, over, unused, no_sync);
  std::printf("overlap fraction %.2f, find_unused %.2f, after_no_sync %.2f ((compute + communication - step) / "
              "min(compute, communication))\n",
              fraction(over), fraction(unused), fraction(no_sync));
  for (int v = 0; v < kVariants; ++v) {
    std::printf("rounds %s", names[v]);
    for (double t : per[v]) std::printf(" %.2f", t);
    std::printf("\n");
  }
  return 0;
}

// ---- staging: one device tensor through host memory and back ----

// Seconds per call of `once`, the device's queued work included: the median
// of 5 runs of `reps` calls, each run ending with a wait for the device.
double seconds_per_call(Device dev, int reps, const std::function<void()>& once) {
  for (int i = 0; i < 3; ++i) once();  // warm-up: buffers grown, pipelines built
  synchronize(dev);
  std::vector<double> runs;
  for (int run = 0; run < 5; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) once();
    synchronize(dev);
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / reps);
  }
  return median(runs);
}

// One timed kind of call: its name in the output, and the call.
struct Kind {
  const char* name;
  std::function<void()> run;
};

// Prints the device, then `rounds` rounds of GB/s (`bytes` per call) for
// every kind, their medians and each kind's rounds, as bench/staging.sh and
// bench/nccl.sh read them.
void time_kinds(Device dev, const std::vector<Kind>& kinds, int rounds, std::size_t bytes, int reps) {
  std::vector<std::vector<double>> per(kinds.size());
  std::string name = dev.str();
  for (const DeviceInfo& d : Device::list())
    if (d.device == dev) name = d.name;
  std::printf("device %s\n", name.c_str());
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r + 1);
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      per[k].push_back(double(bytes) / seconds_per_call(dev, reps, kinds[k].run) / 1e9);
      std::printf(" %s %.2f%s", kinds[k].name, per[k].back(), k + 1 < kinds.size() ? "," : " GB/s\n");
    }
    std::fflush(stdout);
  }
  std::printf("median:");
  for (std::size_t k = 0; k < kinds.size(); ++k) std::printf(" %s %.2f", kinds[k].name, median(per[k]));
  std::printf(" GB/s\n");
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    std::printf("rounds %s", kinds[k].name);
    for (double v : per[k]) std::printf(" %.2f", v);
    std::printf("\n");
  }
}

int staging(int rounds, double mb) {
  const Device dev = Device::vulkan(0);
  if (!have_vulkan()) {
    std::fprintf(stderr, "bench_distributed --staging: no Vulkan device\n");
    return 1;
  }
  if (rounds < 1 || !(mb > 0)) {
    std::fprintf(stderr, "bench_distributed --staging: expected rounds >= 1 and MB > 0, got %d and %g\n", rounds, mb);
    return 1;
  }
  NoGradGuard no_grad;
  const std::int64_t n = std::max<std::int64_t>(1, std::int64_t(mb * 1e6 / 4));
  const std::size_t bytes = std::size_t(n) * 4;
  Tensor t = ones({n}).to(dev);
  Storage& s = t.storage();
  DeviceBackend& be = device_backend(dev);
  auto buf = be.allocate_host(bytes);
  std::vector<char> host(bytes), mine(bytes);
  ThreadGroup group(1, {.loopback = true});
  ProcessGroup& pg = group.rank(0);
  const int reps = 50;

  // The former staging of a one-rank all_reduce: one read (a queue drain and
  // a memcpy out of a staging block) into host memory, the former exchange's
  // loopback (reduce into a private buffer, copy back), one write (a memcpy
  // into a staging block and a copy queued on the compute stream).
  const std::function<void()> read_old = [&] { be.read(s, 0, host.data(), bytes); };
  const std::function<void()> read_new = [&] {
    be.copy_to_host(s, 0, *buf, 0, bytes);
    buf->wait();
  };
  const std::function<void()> trip_old = [&] {
    read_old();
    be.write(s, 0, host.data(), bytes);
  };
  const std::function<void()> trip_new = [&] {
    read_new();
    be.copy_from_host(*buf, 0, s, 0, bytes);
  };
  const std::function<void()> all_reduce_old = [&] {
    read_old();
    std::memcpy(mine.data(), host.data(), bytes);
    std::memcpy(host.data(), mine.data(), bytes);
    be.write(s, 0, host.data(), bytes);
  };
  const std::function<void()> all_reduce_new = [&] { pg.all_reduce(t); };
  // The former all_gather of one rank: a read, the exchange's copy into the
  // result buffer, a new tensor written from it.
  const std::function<void()> all_gather_old = [&] {
    read_old();
    std::memcpy(mine.data(), host.data(), bytes);
    Tensor out = empty({n}, {.device = dev});
    be.write(out.storage(), 0, mine.data(), bytes);
  };
  const std::function<void()> all_gather_new = [&] { pg.all_gather(t); };
  // The bus's directions: a copy to the device alone, and one each way at
  // once on other memory (as fast as a read alone if the directions overlap).
  Tensor other = ones({n}).to(dev);
  auto buf2 = be.allocate_host(bytes);
  std::memset(buf2->data(), 0, bytes);
  const std::function<void()> write_new = [&] { be.copy_from_host(*buf2, 0, other.storage(), 0, bytes); };
  const std::function<void()> duplex = [&] {
    be.copy_to_host(s, 0, *buf, 0, bytes);
    be.copy_from_host(*buf2, 0, other.storage(), 0, bytes);
    buf->wait();
  };

  // The pieces of an all_reduce without the group: three copies to the host
  // queued at once, each piece copied back as soon as it has arrived.
  constexpr int kPieces = 3;
  const std::size_t per = (std::size_t(n) + kPieces - 1) / kPieces * 4;
  std::vector<std::unique_ptr<HostBuffer>> piece_bufs;
  for (int k = 0; k < kPieces; ++k) piece_bufs.push_back(be.allocate_host(per));
  auto piece_len = [&](int k) { return std::min(per, bytes - std::size_t(k) * per); };
  bool tracing = false;
  std::vector<double> marks;  // host microseconds since the call began, when tracing
  const std::function<void()> pieces = [&] {
    const auto start = std::chrono::steady_clock::now();
    auto mark = [&] {
      if (tracing) marks.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    };
    for (int k = 0; k < kPieces; ++k) be.copy_to_host(s, std::size_t(k) * per, *piece_bufs[std::size_t(k)], 0, piece_len(k));
    mark();
    for (int k = 0; k < kPieces; ++k) {
      piece_bufs[std::size_t(k)]->wait();
      mark();
      be.copy_from_host(*piece_bufs[std::size_t(k)], 0, s, std::size_t(k) * per, piece_len(k));
      mark();
    }
  };

  std::printf("one rank, f32 tensor of %.2f MB on vulkan:0, %d calls per run, median of 5 runs; GB/s = the tensor's bytes "
              "per call (a round trip or a collective stages them twice)\n",
              double(bytes) / 1e6, reps);
  time_kinds(dev,
             {{"read_old", read_old}, {"read_new", read_new}, {"trip_old", trip_old}, {"trip_new", trip_new},
              {"all_reduce_old", all_reduce_old}, {"all_reduce_new", all_reduce_new},
              {"all_gather_old", all_gather_old}, {"all_gather_new", all_gather_new}, {"write_new", write_new},
              {"duplex", duplex}, {"pieces", pieces}},
             rounds, bytes, reps);
  // One call of `pieces` traced after a quiet device, then one behind another.
  for (int behind = 0; behind < 2; ++behind) {
    synchronize(dev);
    if (behind) pieces();
    marks.clear();
    tracing = true;
    pieces();
    tracing = false;
    const auto before_sync = std::chrono::steady_clock::now();
    synchronize(dev);
    std::printf("trace pieces%s (us): queued %.1f", behind ? " behind a call" : "", marks[0]);
    for (int k = 0; k < kPieces; ++k) std::printf(", piece %d arrived %.1f sent %.1f", k, marks[std::size_t(1 + 2 * k)], marks[std::size_t(2 + 2 * k)]);
    std::printf(", device idle %.1f us later\n",
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - before_sync).count());
  }
  const std::vector<float> check = t.narrow(0, 0, 4).cpu().to_vector<float>();
  if (check[0] != 1.0f) {
    std::fprintf(stderr, "bench_distributed --staging: the tensor changed (%g): staging lost its bytes\n", check[0]);
    return 1;
  }
  return 0;
}

// ---- NCCL: the same collectives through NcclGroup, on the device alone ----

int nccl(int rounds, double mb) {
  const Device dev = Device::vulkan(0);
  std::string why;
  if (!have_vulkan() || !nccl_available(dev, &why)) {
    std::fprintf(stderr, "bench_distributed --nccl: NCCL is not usable here: %s\n", why.c_str());
    return 1;
  }
  if (rounds < 1 || !(mb > 0)) {
    std::fprintf(stderr, "bench_distributed --nccl: expected rounds >= 1 and MB > 0, got %d and %g\n", rounds, mb);
    return 1;
  }
  NoGradGuard no_grad;
  const std::int64_t n = std::max<std::int64_t>(1, std::int64_t(mb * 1e6 / 4));
  const std::size_t bytes = std::size_t(n) * 4;
  Tensor t = ones({n}).to(dev);
  ThreadGroup bootstrap(1), loop(1, {.loopback = true});
  std::unique_ptr<ProcessGroup> nccl = make_nccl_group(bootstrap.rank(0), dev, &why);
  if (!nccl) {
    std::fprintf(stderr, "bench_distributed --nccl: %s\n", why.c_str());
    return 1;
  }
  ProcessGroup& staged = loop.rank(0);
  const int reps = 50;
  std::printf("one rank, f32 tensor of %.2f MB on vulkan:0, %d calls per run, median of 5 runs; GB/s = the tensor's "
              "bytes per call\n",
              double(bytes) / 1e6, reps);
  time_kinds(dev,
             {{"all_reduce_staged", [&] { staged.all_reduce(t); }}, {"all_reduce_nccl", [&] { nccl->all_reduce(t); }},
              {"all_gather_staged", [&] { staged.all_gather(t); }}, {"all_gather_nccl", [&] { nccl->all_gather(t); }}},
             rounds, bytes, reps);
  const std::vector<float> check = t.narrow(0, 0, 4).cpu().to_vector<float>();
  if (check[0] != 1.0f) {
    std::fprintf(stderr, "bench_distributed --nccl: the tensor changed (%g)\n", check[0]);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--nccl") == 0)
    return nccl(argc > 2 ? std::atoi(argv[2]) : 3, argc > 3 ? std::atof(argv[3]) : 2.7);
  if (argc > 1 && std::strcmp(argv[1], "--ddp-overlap") == 0)
    return ddp_overlap(argc > 2 ? std::atoi(argv[2]) : 3, argc > 3 ? std::atof(argv[3]) : 2.0);
  if (argc > 1 && std::strcmp(argv[1], "--staging") == 0)
    return staging(argc > 2 ? std::atoi(argv[2]) : 3, argc > 3 ? std::atof(argv[3]) : 2.7);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
