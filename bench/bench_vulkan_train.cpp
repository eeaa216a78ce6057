// Training throughput of the MLP and CNN of the PyTorch CUDA baseline
// (synthetic data already on the device, SGD momentum 0.9, cross-entropy),
// the loss read once at the end as the baseline does. "captured" records the
// step once (rumus::capture) and replays it, each batch first copied into the
// step's static inputs, as the baseline's CUDA-graph variant does.
//   bench_vulkan_train [device (default vulkan:0)] [steps (default 300)] [eager|captured|both (default both)] [--amp]
// --amp trains as a mixed-precision user would: the forward under autocast
// (f16 products, f32 accumulation), a GradScaler around backward and step;
// eager steps read its inf/nan check back once per step, as PyTorch's does,
// captured steps keep it on the device (GradScalerOptions::device_side).
#include <rumus/core/device_backend.hpp>
#include <rumus/rumus.hpp>

#include "../examples/support/mnist_models.hpp"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace rumus;

// The examples' nets (examples/support/mnist_models.hpp), with their ReLUs
// fused into the layers before them as the examples train them.
// With RUMUS_VULKAN_PROFILE=1, captured runs also print each replay's GPU
// time and the time from one replay's end to the next one's start, beside
// the wall time a step: a step slower than its replay waits on the host.
using example::Cnn;
using example::Mlp;

template <class Net>
void run(const char* name, Device dev, std::int64_t batch, int steps, bool captured, bool amp) {
  manual_seed(0);
  Net net;
  net.to(dev);
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler scaler({.enabled = amp, .device_side = captured});
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 16; ++i) {
    xs.push_back(rand({batch, 1, 28, 28}, {.device = dev}));
    ys.push_back(randint(0, 10, {batch}, {.dtype = DType::i64, .device = dev}));
  }
  Tensor x_static = zeros({batch, 1, 28, 28}, {.device = dev});
  Tensor y_static = zeros({batch}, {.dtype = DType::i64, .device = dev});
  Tensor captured_loss;
  CapturedStep graph;
  // Without --amp the scaler passes everything through.
  auto train = [&](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      AutocastGuard amp_scope(amp);
      loss = cross_entropy(net.forward(x), y);
    }
    GradientStore grads = backward(scaler.scale(loss));
    scaler.step(opt, grads);
    scaler.update();
    return loss;
  };
  if (captured) graph = capture(dev, [&] { captured_loss = train(x_static, y_static); });
  auto step = [&](int i) {
    if (!captured) return train(xs[i % 16], ys[i % 16]);
    x_static.copy_(xs[i % 16]);
    y_static.copy_(ys[i % 16]);
    graph.replay();
    return captured_loss;
  };
  for (int i = 0; i < 30; ++i) step(i);
  synchronize(dev);
  DeviceStats s0 = device_stats(dev);
  auto t0 = std::chrono::steady_clock::now();
  Tensor loss;
  for (int i = 0; i < steps; ++i) loss = step(i);
  double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();  // recording only
  double l = loss.item();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  DeviceStats s1 = device_stats(dev);
  std::printf("rumus %s %s %s%s batch %lld: %.0f samples/s (%.0f us/step, host %.0f us/step), loss %.3f, %llu submits, "
              "%llu uploads, %.1f MiB in use\n",
              dev.str().c_str(), captured ? "captured" : "eager", name, amp ? " amp" : "", (long long)batch, steps * batch / dt, dt / steps * 1e6, host / steps * 1e6, l,
              (unsigned long long)(s1.submits - s0.submits), (unsigned long long)(s1.host_to_device - s0.host_to_device),
              double(s1.bytes_in_use) / (1 << 20));
  // RUMUS_VULKAN_PROFILE=1: the replays' own GPU time beside the wall time a step.
  if (const std::uint64_t timed = s1.replays_timed - s0.replays_timed) {
    const std::uint64_t gaps = s1.replay_gaps - s0.replay_gaps;
    std::printf("  replays on the GPU: %.0f us each, %.0f us from one's end to the next one's start\n",
                (s1.replay_gpu_ms - s0.replay_gpu_ms) / double(timed) * 1e3,
                gaps ? (s1.replay_gap_ms - s0.replay_gap_ms) / double(gaps) * 1e3 : 0.0);
  }
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  std::vector<std::string> args;
  bool amp = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--amp") amp = true;
    else args.push_back(argv[i]);
  }
  Device dev = Device::parse(args.size() > 0 ? args[0] : "vulkan:0");
  int steps = args.size() > 1 ? std::stoi(args[1]) : 300;
  const std::string mode = args.size() > 2 ? args[2] : "both";
  if (mode != "eager" && mode != "captured" && mode != "both") {
    std::fprintf(stderr, "bench_vulkan_train: expected mode eager, captured or both, got '%s'\n", mode.c_str());
    return 2;
  }
  for (std::int64_t batch : {64, 512})
    for (bool captured : {false, true}) {
      if ((captured && mode == "eager") || (!captured && mode == "captured")) continue;
      run<Mlp>("mlp", dev, batch, steps, captured, amp);
      run<Cnn>("cnn", dev, batch, steps, captured, amp);
    }
}
