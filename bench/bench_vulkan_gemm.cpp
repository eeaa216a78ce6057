// SGEMM throughput on a Vulkan device: C = A B for square f32 matrices,
// timed between synchronize() calls; checks a few entries against doubles.
//   bench_vulkan_gemm [device (default vulkan:0)] [N or MxNxK ...]
#include <rumus/core/device_backend.hpp>
#include <rumus/rumus.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using namespace rumus;

int main(int argc, char** argv) {
  Device dev = Device::parse(argc > 1 ? argv[1] : "vulkan:0");
  std::vector<std::array<std::int64_t, 3>> sizes;
  for (int i = 2; i < argc; ++i) {
    long long m = 0, n = 0, k = 0;
    if (std::sscanf(argv[i], "%lldx%lldx%lld", &m, &n, &k) != 3) m = n = k = std::stoll(argv[i]);
    sizes.push_back({m, n, k});
  }
  if (sizes.empty()) sizes = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}};
  for (auto [m, n, kk] : sizes) {
    Generator gen(1);
    Tensor a_host = rand({m, kk}, {}, &gen), b_host = rand({kk, n}, {}, &gen);
    Tensor a = a_host.to(dev), b = b_host.to(dev);
    Tensor c = matmul(a, b);
    synchronize(dev);
    const double flop = 2.0 * double(m) * double(n) * double(kk);
    const int iters = flop > 1e11 ? 30 : 100;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) c = matmul(a, b);
    synchronize(dev);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    // Spot check: rows 0 and n-1, a few columns, against double-precision dot products.
    auto av = a_host.to_vector<float>(), bv = b_host.to_vector<float>(), cv = c.to_vector<float>();
    double worst = 0;
    for (std::int64_t i : {std::int64_t(0), m - 1})
      for (std::int64_t j : {std::int64_t(0), n / 2, n - 1}) {
        double ref = 0;
        for (std::int64_t k = 0; k < kk; ++k) ref += double(av[i * kk + k]) * double(bv[k * n + j]);
        worst = std::max(worst, std::abs(cv[i * n + j] - ref) / std::abs(ref));
      }
    std::printf("sgemm %lldx%lldx%lld on %s: %.0f GFLOP/s (%.3f ms), max rel err %.1e\n", (long long)m, (long long)n,
                (long long)kk, dev.str().c_str(), flop / dt * 1e-9, dt * 1e3, worst);
  }
}
