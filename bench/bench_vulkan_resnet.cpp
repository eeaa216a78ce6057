// Training throughput of ResNet-18 for 32x32 inputs (examples/support/resnet.hpp),
// the network of the PyTorch ResNet-18 baseline (torch_resnet_baseline.py):
// SGD momentum 0.9, lr 0.01, cross-entropy, 8 random batches cycled on the
// device, the loss read once at the end.
//   bench_vulkan_resnet [device (default vulkan:0)] [steps (default 100)] [eager|captured|both (default both)] [--amp] [batch ...]
// "captured" records the step once (rumus::capture) and replays it, each batch
// first copied into the step's static inputs, as the peer's CUDA graph does.
// --amp: the forward under autocast and a GradScaler (eager steps read its inf
// flag back every step; captured steps keep it on the device: device_side).
#include <rumus/rumus.hpp>

#include "../examples/support/resnet.hpp"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace rumus;

namespace {

void run(Device dev, std::int64_t batch, int steps, bool captured, bool amp) {
  manual_seed(0);
  example::ResNet18 net;  // 3 input channels, 10 classes, width 64
  net.to(dev);
  net.train();
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler scaler({.enabled = amp, .device_side = captured});
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(rand({batch, 3, 32, 32}, {.device = dev}));
    ys.push_back(randint(0, 10, {batch}, {.dtype = DType::i64, .device = dev}));
  }
  Tensor x_static = zeros({batch, 3, 32, 32}, {.device = dev});
  Tensor y_static = zeros({batch}, {.dtype = DType::i64, .device = dev});
  auto train_step = [&](const Tensor& x, const Tensor& y) {
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
  for (int i = 0; i < 5; ++i) train_step(xs[i % 8], ys[i % 8]);  // warm-up, as the peer before its capture
  Tensor captured_loss;
  CapturedStep graph;
  if (captured) graph = capture(dev, [&] { captured_loss = train_step(x_static, y_static); });
  auto step = [&](int i) {
    if (!captured) return train_step(xs[i % 8], ys[i % 8]);
    x_static.copy_(xs[i % 8]);
    y_static.copy_(ys[i % 8]);
    graph.replay();
    return captured_loss;
  };
  for (int i = 0; i < 10; ++i) step(i);
  synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  Tensor loss;
  for (int i = 0; i < steps; ++i) loss = step(i);
  const double l = loss.item();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("rumus %s resnet18 %s (%s) batch %lld: %.0f samples/s (%.2f ms/step), loss %.3f\n", dev.str().c_str(),
              amp ? "amp" : "f32", captured ? "captured" : "eager", (long long)batch, steps * batch / dt,
              dt / steps * 1e3, l);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::vector<std::int64_t> batches;
  bool amp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool number = !a.empty() && a.find_first_not_of("0123456789") == std::string::npos;
    if (a == "--amp") amp = true;
    else if (args.size() >= 3 || (args.size() == 2 && number)) batches.push_back(std::stoll(a));  // the mode may be left out
    else args.push_back(a);
  }
  if (batches.empty()) batches = {128, 512};
  const Device dev = Device::parse(args.size() > 0 ? args[0] : "vulkan:0");
  const int steps = args.size() > 1 ? std::stoi(args[1]) : 100;
  const std::string mode = args.size() > 2 ? args[2] : "both";
  if (mode != "eager" && mode != "captured" && mode != "both") {
    std::fprintf(stderr, "bench_vulkan_resnet: expected mode eager, captured or both, got '%s'\n", mode.c_str());
    return 2;
  }
  for (std::int64_t batch : batches)
    for (bool captured : {false, true})
      if (!((captured && mode == "eager") || (!captured && mode == "captured"))) run(dev, batch, steps, captured, amp);
}
