// GEMM throughput on a Vulkan device: C = A B for f32 matrices, or f16 ones
// with --f16 (the tensor-core kernel where the device has cooperative
// matrices), timed between synchronize() calls; checks entries across C
// against double-precision dot products of the (rounded) inputs. The loop
// waits for the device every 16 products: memory freed inside a batch of
// commands is reused only once the batch completes, so a longer run of
// products would time the allocation of fresh device memory for each output.
//   bench_vulkan_gemm [--f16] [device (default vulkan:0)] [N or MxNxK ...]
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
  const bool f16 = argc > 1 && std::string(argv[1]) == "--f16";
  if (f16) {
    --argc;
    ++argv;
  }
  const DType dtype = f16 ? DType::f16 : DType::f32;
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
    // Centred values: sums of both signs, as in real products.
    Tensor a_host = (rand({m, kk}, {}, &gen) - 0.5).to(dtype), b_host = (rand({kk, n}, {}, &gen) - 0.5).to(dtype);
    Tensor a = a_host.to(dev), b = b_host.to(dev);
    Tensor c = matmul(a, b);
    synchronize(dev);
    const double flop = 2.0 * double(m) * double(n) * double(kk);
    const int iters = flop > 1e11 ? 30 : 100;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      c = matmul(a, b);
      if (i % 16 == 15) synchronize(dev);
    }
    synchronize(dev);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    // Check: the edges and a spread of rows and columns, against double-precision
    // dot products; the error relative to the dot product of magnitudes (the
    // scale rounding works on: centred sums can cancel to near zero).
    c = matmul(a, b);
    auto av = a_host.to(DType::f32).to_vector<float>(), bv = b_host.to(DType::f32).to_vector<float>();
    auto cv = c.to(DType::f32).to_vector<float>();
    double worst = 0;
    std::vector<std::int64_t> rows = {0, m / 3, m / 2, m - 1}, cols = {0, n / 5, n / 2, n - 2, n - 1};
    for (std::int64_t i : rows)
      for (std::int64_t j : cols) {
        if (j < 0) continue;
        double ref = 0, scale = 0;
        for (std::int64_t k = 0; k < kk; ++k) {
          ref += double(av[i * kk + k]) * double(bv[k * n + j]);
          scale += std::abs(double(av[i * kk + k]) * double(bv[k * n + j]));
        }
        double err = std::abs(cv[i * n + j] - ref) / std::max(scale, 1e-30);
        worst = std::isnan(cv[i * n + j]) ? INFINITY : std::max(worst, err);
      }
    std::printf("%s %lldx%lldx%lld on %s: %.0f GFLOP/s (%.3f ms), max rel err %.1e, %.0f MB of device memory held\n",
                f16 ? "hgemm" : "sgemm", (long long)m, (long long)n, (long long)kk, dev.str().c_str(), flop / dt * 1e-9,
                dt * 1e3, worst, double(device_stats(dev).bytes_reserved) / 1e6);
  }
}
