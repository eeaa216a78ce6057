// Convolution throughput on a Vulkan device, per pass: forward (with bias),
// backward data and backward weight (with the bias gradient), at the CNN's
// layer shapes, timed between synchronize() calls. A backward pass is timed
// with its forward and reported as the difference. The first sample's output
// is checked against the CPU.
//   bench_vulkan_conv [device (default vulkan:0)] [batch ...]
#include <rumus/rumus.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

using namespace rumus;

namespace {

struct Layer {
  const char* name;
  std::int64_t c, hw, oc;  // [N, c, hw, hw] -> oc channels, 3x3, stride 1, no padding
};

double seconds_per(const std::function<void()>& step, Device dev, int iters) {
  step();  // pipelines and buffers built outside the timing
  synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  synchronize(dev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::parse(argc > 1 ? argv[1] : "vulkan:0");
  std::vector<std::int64_t> batches;
  for (int i = 2; i < argc; ++i) batches.push_back(std::stoll(argv[i]));
  if (batches.empty()) batches = {64, 512};
  const Layer layers[] = {{"conv1", 1, 28, 32}, {"conv2", 32, 26, 64}};
  for (std::int64_t n : batches)
    for (const Layer& l : layers) {
      Generator gen(1);
      Tensor x_host = randn({n, l.c, l.hw, l.hw}, {}, &gen), w_host = randn({l.oc, l.c, 3, 3}, {}, &gen) * 0.1,
             b_host = randn({l.oc}, {}, &gen);
      Tensor x = x_host.to(dev), w = w_host.to(dev), b = b_host.to(dev);
      Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_(), bg = b.detach().requires_grad_();
      const std::int64_t out_hw = l.hw - 2;
      const double flop = 2.0 * double(n) * double(l.oc) * double(out_hw * out_hw) * double(l.c * 9);
      Tensor seed = ones({n, l.oc, out_hw, out_hw}, {.device = dev});
      Tensor y, grad;
      const int iters = flop > 5e9 ? 20 : 100;
      const double fwd = seconds_per([&] { y = conv2d(x, w, b); }, dev, iters);
      const double data =
          seconds_per([&] { grad = backward(conv2d(xg, w, b), seed).at(xg); }, dev, iters) - fwd;
      const double weight =
          seconds_per([&] { grad = backward(conv2d(x, wg, bg), seed).at(wg); }, dev, iters) - fwd;
      Tensor want = conv2d(x_host.narrow(0, 0, 1), w_host, b_host);
      auto got_v = y.narrow(0, 0, 1).cpu().to_vector<float>(), want_v = want.to_vector<float>();
      double worst = 0;
      for (std::size_t i = 0; i < got_v.size(); ++i)
        worst = std::max(worst, std::abs(double(got_v[i]) - want_v[i]) / std::max(1.0, std::abs(double(want_v[i]))));
      std::printf("%s N=%lld [%lld->%lld, %lldx%lld] on %s: forward %.3f ms (%.0f GFLOP/s), backward data %.3f ms "
                  "(%.0f GFLOP/s), backward weight+bias %.3f ms (%.0f GFLOP/s), max rel err %.1e\n",
                  l.name, (long long)n, (long long)l.c, (long long)l.oc, (long long)l.hw, (long long)l.hw,
                  dev.str().c_str(), fwd * 1e3, flop / fwd * 1e-9, data * 1e3, flop / data * 1e-9, weight * 1e3,
                  flop / weight * 1e-9, worst);
    }
}
