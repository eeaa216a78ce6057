// Where one training step's time goes, op by op: the examples' MLP and CNN at
// batch 64 (SGD with momentum), and char_lm's GPT at batch 32, context 128
// (AdamW), under rumus::Profiler, after warm-up steps. mlp_fused and
// cnn_fused are the MLP and CNN with their ReLUs fused into the layers before
// them (nn::LinearReLU, nn::ConvReLU2d).
// On Vulkan, RUMUS_VULKAN_PROFILE=1 adds the GPU's own time per dispatch, each
// dispatch named by the row (phase, op, kernel) that launched it.
// Run: build/release/bench/profile_step [mlp|cnn|mlp_fused|cnn_fused|gpt|both] [steps] [device] [batch (MNIST nets, default 64)]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <rumus/rumus.hpp>

#include "../examples/support/mnist_models.hpp"

using namespace rumus;

namespace {

// The examples' models: with a separate relu() (Mlp, Cnn) and with each ReLU
// fused into its layer, as the examples train them (MlpFused, CnnFused).
using Mlp = example::PlainMlp;
using Cnn = example::PlainCnn;
using MlpFused = example::Mlp;
using CnnFused = example::Cnn;

// Runs `warmup` steps, then `steps` under a Profiler: milliseconds per step, and its table.
template <class Step>
double timed_steps(Step& step, int warmup, int steps, Device device, std::string& table) {
  for (int i = 0; i < warmup; ++i) step();
  synchronize(device);
  Profiler prof;
  for (int i = 0; i < steps; ++i) step();
  synchronize(device);
  table = prof.table(40);
  return prof.elapsed_ms() / steps;
}

template <class Net>
void profile(const char* name, int steps, Device device, double lr, std::int64_t batch) {
  manual_seed(0);
  Tensor images = rand({batch, 1, 28, 28}).to(device);
  Tensor labels = randint(0, 10, {batch}).to(device);
  Net net;
  net.to(device);
  optim::SGD opt(net.parameters(), {.lr = lr, .momentum = 0.9});
  std::string table;
  auto step = [&] {
    Tensor loss = cross_entropy(net.forward(images), labels);
    GradientStore grads = backward(loss);
    opt.step(grads);
    return loss;
  };
  const double ms = timed_steps(step, 5, steps, device, table);
  std::printf("%s, batch %lld, %d steps on %s: %.3f ms per step\n%s\n", name, static_cast<long long>(batch), steps,
              device.str().c_str(), ms, table.c_str());
}

void profile_gpt(int steps, Device device) {
  manual_seed(0);
  const std::int64_t batch = 32, context = 128;
  nn::GPT net(nn::GPTConfig{});
  net.to(device);
  Tensor tokens = randint(0, 256, {batch, context + 1}, {.dtype = DType::i64}).to(device);
  Tensor x = tokens.narrow(1, 0, context), y = tokens.narrow(1, 1, context).contiguous().reshape({batch * context});
  optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.05});
  auto step = [&] {
    Tensor loss = cross_entropy(net.forward(x).reshape({batch * context, 256}), y);
    GradientStore grads = backward(loss);
    opt.step(grads);
    return loss;
  };
  std::string table;
  const double ms = timed_steps(step, 3, steps, device, table);
  std::printf("GPT (char_lm), batch %lld, context %lld, %d steps on %s: %.3f ms per step, %.0f tokens/s\n%s\n",
              static_cast<long long>(batch), static_cast<long long>(context), steps, device.str().c_str(), ms,
              double(batch * context) / (ms / 1000), table.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "both";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  const Device device = argc > 3 ? Device::parse(argv[3]) : Device::cpu();
  const std::int64_t batch = argc > 4 ? std::atoll(argv[4]) : 64;
  if (which == "mlp" || which == "both") profile<Mlp>("MLP", steps, device, 0.05, batch);
  if (which == "cnn" || which == "both") profile<Cnn>("CNN", steps, device, 0.02, batch);
  if (which == "mlp_fused") profile<MlpFused>("MLP, fused ReLUs", steps, device, 0.05, batch);
  if (which == "cnn_fused") profile<CnnFused>("CNN, fused ReLUs", steps, device, 0.02, batch);
  if (which == "gpt") profile_gpt(steps, device);
}
