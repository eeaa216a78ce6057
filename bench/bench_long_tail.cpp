// Times of the long-tail ops PyTorch users reach for beside the big kernels:
// sort and topk of 1M floats, cumsum and logsumexp over the rows of a
// [4096, 1024] matrix, and an embedding-bag-like gather of 16384 rows of a
// [100000, 64] table with the scatter_add that takes their gradients back.
// bench/long_tail_torch.py is the PyTorch twin, on the same shapes;
// bench/long_tail_vs_torch.sh runs both and records the ratios.
//
//   bench_long_tail [--device cpu|vulkan:0|all]... [--reps N (default 20)] [--threads N (CPU; default all)]
//                   [--only CASE] (one case, e.g. under a profiler)
//
// `all` is the CPU, then vulkan:0 when this build and machine have it. Each
// case runs 3 times to warm up, then N times, each timed alone up to the
// device's finishing its work; the median is printed, one line per case:
//   rumus DEVICE CASE: MEDIAN ms (median of N, min MIN; what was run)
#include <rumus/rumus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace rumus;

namespace {

struct Case {
  const char* name;
  const char* what;
  std::function<Tensor()> run;  // returns a result so the work is not dropped
};

// Median and minimum of `reps` timed runs, in ms, after 3 untimed ones.
std::pair<double, double> time_case(const Case& c, Device dev, int reps) {
  for (int i = 0; i < 3; ++i) c.run();
  synchronize(dev);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor out = c.run();
    synchronize(dev);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  const double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return {median, ms.front()};
}

void run_device(Device dev, int reps, int threads, const std::string& only) {
  manual_seed(0);
  const TensorOptions on{.device = dev};
  constexpr std::int64_t kSortN = 1 << 20, kTopK = 100, kRows = 4096, kCols = 1024;
  constexpr std::int64_t kTable = 100000, kWidth = 64, kLookups = 16384;
  const Tensor flat = randn({kSortN}, on);
  const Tensor matrix = randn({kRows, kCols}, on);
  const Tensor table = randn({kTable, kWidth}, on);
  // One table row per lookup, the index repeated across the row as gather
  // and scatter_add take it (torch.gather's embedding idiom).
  const Tensor rows = randint(0, kTable, {kLookups, 1}, {.dtype = DType::i64, .device = dev});
  const Tensor index = rows.expand({kLookups, kWidth}).contiguous();
  const Tensor grad = randn({kLookups, kWidth}, on);
  const Tensor grad_table = zeros({kTable, kWidth}, on);
  const std::vector<Case> cases = {
      {"sort", "1M f32, values and indices", [&] { return std::get<0>(sort(flat)); }},
      {"topk", "k = 100 of 1M f32", [&] { return std::get<0>(topk(flat, kTopK)); }},
      {"cumsum", "[4096, 1024] f32 along rows", [&] { return cumsum(matrix, 1); }},
      {"gather", "16384 rows of a [100000, 64] f32 table", [&] { return gather(table, 0, index); }},
      {"scatter_add", "[16384, 64] f32 into a zero [100000, 64] table",
       [&] { return scatter_add(grad_table, 0, index, grad); }},
      {"logsumexp", "[4096, 1024] f32 over rows", [&] { return logsumexp(matrix, {1}); }},
  };
  const std::string thread_note = dev.is_cpu() ? "; " + std::to_string(threads) + " threads" : "";
  for (const Case& c : cases) {
    if (!only.empty() && only != c.name) continue;
    const auto [median, best] = time_case(c, dev, reps);
    std::printf("rumus %s %s: %.4f ms (median of %d, min %.4f; %s%s)\n", dev.str().c_str(), c.name, median, reps,
                best, c.what, thread_note.c_str());
    std::fflush(stdout);
  }
}

bool has_device(Device dev) {
  try {
    device_backend(dev);
    return true;
  } catch (const DeviceError&) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> devices;
  int reps = 20;
  std::string only;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--device") && has_value) devices.push_back(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && has_value) reps = std::max(1, std::stoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && has_value) threads = std::max(1, std::stoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--only") && has_value) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|vulkan:0|all]... [--reps N] [--threads N] [--only CASE]\n", argv[0]);
      return 2;
    }
  }
  if (devices.empty()) devices.push_back("cpu");
  set_num_threads(threads);
  for (const std::string& name : devices) {
    if (name == "all") {
      run_device(Device::parse("cpu"), reps, threads, only);
      const Device gpu = Device::parse("vulkan:0");
      if (has_device(gpu)) run_device(gpu, reps, threads, only);
      else std::printf("no vulkan:0 here: CPU only\n");
      continue;
    }
    const Device dev = Device::parse(name);
    if (!has_device(dev)) {
      std::fprintf(stderr, "%s: this build or machine has no %s\n", argv[0], name.c_str());
      return 1;
    }
    run_device(dev, reps, threads, only);
  }
}
