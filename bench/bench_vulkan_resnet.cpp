// Training throughput of ResNet-18 for 32x32 inputs, the network of the
// PyTorch ResNet-18 baseline (torch_resnet_baseline.py): a 3x3 stem,
// stages of 64/128/256/512 channels with two BasicBlocks each (strides
// 1/2/2/2, 1x1 projections where the shape changes), global average pool, a
// 10-way linear head; SGD momentum 0.9, lr 0.01, cross-entropy, 8 random
// batches cycled on the device, the loss read once at the end.
//   bench_vulkan_resnet [device (default vulkan:0)] [steps (default 100)] [eager|captured|both (default both)] [--amp] [batch ...]
// "captured" records the step once (rumus::capture) and replays it, each batch
// first copied into the step's static inputs, as the peer's CUDA graph does.
// --amp: the forward under autocast and a GradScaler (eager steps only: the
// scaler reads its inf flag back every step).
#include <rumus/rumus.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace rumus;

namespace {

nn::Conv2d conv3x3(std::int64_t cin, std::int64_t cout, std::int64_t stride) {
  return nn::Conv2d(cin, cout, 3, {.stride = {stride, stride}, .padding = {1, 1}}, /*bias=*/false);
}

// torchvision's BasicBlock, with the projection PyTorch's peer names "down".
struct Block : nn::Module {
  nn::Conv2d conv1, conv2;
  nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<nn::Sequential> down;
  Block(std::int64_t cin, std::int64_t cout, std::int64_t stride)
      : conv1(conv3x3(cin, cout, stride)), conv2(conv3x3(cout, cout, 1)), bn1(cout), bn2(cout) {
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"conv2", conv2}, {"bn2", bn2}});
    if (stride != 1 || cin != cout) {
      down = std::make_shared<nn::Sequential>();
      down->push_back(std::make_shared<nn::Conv2d>(cin, cout, 1, Conv2dOptions{.stride = {stride, stride}}, false));
      down->push_back(std::make_shared<nn::BatchNorm2d>(cout));
      register_module("down", down);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(bn1(conv1(x)));
    h = bn2(conv2(h));
    return relu(h + (down ? down->forward(x) : x));
  }
};

struct ResNet18 : nn::Module {
  nn::Conv2d conv1 = conv3x3(3, 64, 1);
  nn::BatchNorm2d bn1{64};
  nn::Sequential layers;
  nn::Linear fc{512, 10};
  ResNet18() {
    std::int64_t cin = 64;
    for (auto [cout, stride] : {std::pair<std::int64_t, std::int64_t>{64, 1}, {128, 2}, {256, 2}, {512, 2}}) {
      layers.push_back(std::make_shared<Block>(cin, cout, stride));
      layers.push_back(std::make_shared<Block>(cout, cout, 1));
      cin = cout;
    }
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"layers", layers}, {"fc", fc}});
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = layers.forward(relu(bn1(conv1(x))));
    return fc(adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
};

void run(Device dev, std::int64_t batch, int steps, bool captured, bool amp) {
  manual_seed(0);
  ResNet18 net;
  net.to(dev);
  net.train();
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  optim::GradScaler scaler({.enabled = amp});
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(rand({batch, 3, 32, 32}, {.device = dev}));
    ys.push_back(randint(0, 10, {batch}, {.dtype = DType::i64, .device = dev}));
  }
  Tensor x_static = zeros({batch, 3, 32, 32}, {.device = dev});
  Tensor y_static = zeros({batch}, {.dtype = DType::i64, .device = dev});
  auto eager_step = [&](const Tensor& x, const Tensor& y) {
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
  for (int i = 0; i < 5; ++i) eager_step(xs[i % 8], ys[i % 8]);  // warm-up, as the peer before its capture
  Tensor captured_loss;
  CapturedStep graph;
  if (captured) graph = capture(dev, [&] {
    captured_loss = cross_entropy(net.forward(x_static), y_static);
    opt.step(backward(captured_loss));
  });
  auto step = [&](int i) {
    if (!captured) return eager_step(xs[i % 8], ys[i % 8]);
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
    if (a == "--amp") amp = true;
    else if (args.size() >= 3) batches.push_back(std::stoll(a));
    else args.push_back(a);
  }
  if (batches.empty()) batches = {128, 512};
  const Device dev = Device::parse(args.size() > 0 ? args[0] : "vulkan:0");
  const int steps = args.size() > 1 ? std::stoi(args[1]) : 100;
  const std::string mode = args.size() > 2 ? args[2] : (amp ? "eager" : "both");
  if (mode != "eager" && mode != "captured" && mode != "both") {
    std::fprintf(stderr, "bench_vulkan_resnet: expected mode eager, captured or both, got '%s'\n", mode.c_str());
    return 2;
  }
  if (amp && mode != "eager") {
    std::fprintf(stderr, "bench_vulkan_resnet: --amp runs eager steps only (the scaler reads back every step)\n");
    return 2;
  }
  for (std::int64_t batch : batches)
    for (bool captured : {false, true})
      if (!((captured && mode == "eager") || (!captured && mode == "captured"))) run(dev, batch, steps, captured, amp);
}
