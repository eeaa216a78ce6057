// Training-step time of a 2-layer LSTM (input 256, hidden 256), sequence 128,
// batch 32: forward, a mean-squared loss against a fixed target, backward
// through time. bench/lstm_torch.py is the PyTorch twin, on the same shapes.
//   bench_lstm [device (default cpu)] [steps (default 20)] [threads (CPU only, default all)]
#include <rumus/rumus.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using namespace rumus;

int main(int argc, char** argv) {
  const Device dev = Device::parse(argc > 1 ? argv[1] : "cpu");
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  const int threads = argc > 3 ? std::stoi(argv[3]) : int(std::max(1u, std::thread::hardware_concurrency()));
  if (dev.is_cpu()) set_num_threads(threads);
  constexpr std::int64_t seq = 128, batch = 32, input = 256, hidden = 256, layers = 2;
  manual_seed(0);
  nn::LSTM lstm({.input_size = input, .hidden_size = hidden, .num_layers = layers});
  lstm.to(dev);
  const Tensor x = randn({seq, batch, input}, {.device = dev});
  const Tensor target = randn({seq, batch, hidden}, {.device = dev});
  auto step = [&] {
    auto [out, state] = lstm.forward(x, {});
    Tensor loss = mse_loss(out, target);
    GradientStore grads = backward(loss);
    return loss;
  };
  for (int i = 0; i < 3; ++i) step();
  synchronize(dev);
  const auto t0 = std::chrono::steady_clock::now();
  Tensor loss;
  for (int i = 0; i < steps; ++i) loss = step();
  const double l = loss.item();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf("rumus %s lstm (2 layers, hidden 256, seq 128, batch 32) forward+backward: %.2f ms/step (%.0f sequences/s), "
              "loss %.4f%s\n",
              dev.str().c_str(), dt * 1e3, batch / dt, l,
              dev.is_cpu() ? (", " + std::to_string(threads) + " threads").c_str() : "");
}
