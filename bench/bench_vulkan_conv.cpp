// Convolution throughput on a Vulkan device, per pass: forward (with bias),
// backward data and backward weight (with the bias gradient), at the CNN's
// layer shapes, timed between synchronize() calls. A backward pass is timed
// with its forward and reported as the difference. The first sample's output
// is checked against the CPU.
//   bench_vulkan_conv [device (default vulkan:0)] [batch ...]
// With `resnet` after the device: ResNet-18's convolutions at 32x32 inputs, one
// line per distinct shape, each pass's time against the same pass lowered to
// im2col / col2im plus one GEMM on materialised columns (timed piece by piece),
// so the two ways can be compared shape by shape (bench/conv_torch.py times
// cuDNN's passes at the same shapes).
//   bench_vulkan_conv vulkan:0 resnet [batch ...]
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
  for (int i = 0; i < 3; ++i) step();  // pipelines and the allocator's blocks made outside the timing
  synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) step();
  synchronize(dev);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

struct ResnetConv {
  const char* name;
  std::int64_t c, hw, oc, k, stride, count;  // [N, c, hw, hw] -> oc, k x k, padding k / 2; count per step
};

// ResNet-18 for 32x32 inputs (examples/support/resnet.hpp, the baseline's net).
constexpr ResnetConv kResnet[] = {
    {"stem", 3, 32, 64, 3, 1, 1},          {"layer1", 64, 32, 64, 3, 1, 4},       {"layer2.0", 64, 32, 128, 3, 2, 1},
    {"layer2", 128, 16, 128, 3, 1, 3},     {"layer2.down", 64, 32, 128, 1, 2, 1}, {"layer3.0", 128, 16, 256, 3, 2, 1},
    {"layer3", 256, 8, 256, 3, 1, 3},      {"layer3.down", 128, 16, 256, 1, 2, 1}, {"layer4.0", 256, 8, 512, 3, 2, 1},
    {"layer4", 512, 4, 512, 3, 1, 3},      {"layer4.down", 256, 8, 512, 1, 2, 1},
};

// One line per shape: direct kernels (forward; data and weight gradients
// timed with their forward, reported as the difference) against the lowering's
// pieces: im2col, the forward GEMM, the data-gradient GEMM and col2im, and the
// weight-gradient GEMM on K-major columns.
void bench_resnet(Device dev, std::int64_t n) {
  double total_direct = 0, total_lowered = 0;
  for (const ResnetConv& l : kResnet) {
    Generator gen(1);
    const Conv2dOptions o{.stride = {l.stride, l.stride}, .padding = {l.k / 2, l.k / 2}};
    Tensor x = randn({n, l.c, l.hw, l.hw}, {}, &gen).to(dev), w = (randn({l.oc, l.c, l.k, l.k}, {}, &gen) * 0.1).to(dev);
    const std::int64_t ohw = (l.hw + 2 * (l.k / 2) - l.k) / l.stride + 1, kdim = l.c * l.k * l.k, len = ohw * ohw;
    Tensor xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
    Tensor seed = randn({n, l.oc, ohw, ohw}, {}, &gen).to(dev);
    const double flop = 2.0 * double(n) * double(l.oc) * double(len) * double(kdim);
    const int iters = std::max(20, int(std::min(200.0, 1e11 / flop)));
    Tensor y, grad;
    const double fwd = seconds_per([&] { y = conv2d(x, w, {}, o); }, dev, iters);
    const double data = seconds_per([&] { grad = backward(conv2d(xg, w, {}, o), seed).at(xg); }, dev, iters) - fwd;
    const double weight = seconds_per([&] { grad = backward(conv2d(x, wg, {}, o), seed).at(wg); }, dev, iters) - fwd;
    // The lowering's pieces on operands laid out as a kernel would keep them.
    const Size2 kernel{l.k, l.k};
    Tensor cols = im2col(x, kernel, o);                          // [N, K, L]
    Tensor w2 = w.reshape({l.oc, kdim});
    Tensor g3 = seed.reshape({n, l.oc, len});
    Tensor g_km = g3.permute({1, 0, 2}).contiguous().reshape({l.oc, n * len});  // [OC, N*L]
    Tensor cols_km = cols.permute({1, 0, 2}).contiguous().reshape({kdim, n * len});
    Tensor wt = w2.t().contiguous();
    Tensor dcols;
    const double t_im2col = seconds_per([&] { cols = im2col(x, kernel, o); }, dev, iters);
    const double t_fwd_mm = seconds_per([&] { y = matmul(w2, cols); }, dev, iters);
    const double t_data_mm = seconds_per([&] { dcols = matmul(wt, g3); }, dev, iters);
    const double t_col2im = seconds_per([&] { grad = col2im(dcols, {l.hw, l.hw}, kernel, o); }, dev, iters);
    const double t_permute = seconds_per([&] { grad = g3.permute({1, 0, 2}).contiguous(); }, dev, iters);
    const double t_weight_mm = seconds_per([&] { grad = matmul(g_km, cols_km.t()); }, dev, iters);
    const double low_fwd = t_im2col + t_fwd_mm, low_data = t_data_mm + t_col2im,
                 low_weight = t_im2col + t_permute + t_weight_mm;
    total_direct += double(l.count) * (fwd + data + weight);
    total_lowered += double(l.count) * (low_fwd + low_data + low_weight);
    std::printf("{\"layer\": \"%s\", \"batch\": %lld, \"c\": %lld, \"hw\": %lld, \"oc\": %lld, \"k\": %lld, "
                "\"stride\": %lld, \"count\": %lld, \"direct_ms\": [%.4f, %.4f, %.4f], \"lowered_ms\": [%.4f, %.4f, "
                "%.4f], \"pieces_ms\": {\"im2col\": %.4f, \"fwd_gemm\": %.4f, \"data_gemm\": %.4f, "
                "\"col2im\": %.4f, \"permute\": %.4f, \"weight_gemm\": %.4f}, \"gflop\": %.3f}\n",
                l.name, (long long)n, (long long)l.c, (long long)l.hw, (long long)l.oc, (long long)l.k,
                (long long)l.stride, (long long)l.count, fwd * 1e3, data * 1e3, weight * 1e3, low_fwd * 1e3,
                low_data * 1e3, low_weight * 1e3, t_im2col * 1e3, t_fwd_mm * 1e3, t_data_mm * 1e3, t_col2im * 1e3,
                t_permute * 1e3, t_weight_mm * 1e3, flop * 1e-9);
  }
  std::printf("{\"total\": true, \"batch\": %lld, \"direct_ms\": %.3f, \"lowered_ms\": %.3f}\n", (long long)n,
              total_direct * 1e3, total_lowered * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  Device dev = Device::parse(argc > 1 ? argv[1] : "vulkan:0");
  if (argc > 2 && std::string(argv[2]) == "resnet") {
    std::vector<std::int64_t> batches;
    for (int i = 3; i < argc; ++i) batches.push_back(std::stoll(argv[i]));
    if (batches.empty()) batches = {128};
    for (std::int64_t n : batches) bench_resnet(dev, n);
    return 0;
  }
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
