// conv2d forward+backward at the CNN's shapes, and a whole training step of
// the baseline CNN (samples/s), for side-by-side runs with libtorch_baseline.
// Run: build/release/bench/bench_conv --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <rumus/rumus.hpp>

using namespace rumus;

namespace {

// [N, C, H, W] -> OC channels, 3x3: forward, then backward for weight, bias
// and (when the input requires grad) the input.
void BM_Conv2dForwardBackward(benchmark::State& state) {
  const auto n = state.range(0), c = state.range(1), hw = state.range(2), oc = state.range(3);
  const bool input_grad = state.range(4);
  manual_seed(0);
  Tensor x = randn({n, c, hw, hw});
  if (input_grad) x.requires_grad_();
  Tensor w = mul(randn({oc, c, 3, 3}), 0.1).requires_grad_();
  Tensor b = zeros({oc}).requires_grad_();
  for (auto _ : state) {
    Tensor y = conv2d(x, w, b);
    GradientStore g = backward(y, ones_like(y));
    benchmark::DoNotOptimize(g.at(w).storage().data());
  }
  state.counters["samples/s"] =
      benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv2dForwardBackward)
    ->ArgNames({"N", "C", "HW", "OC", "dX"})
    ->Args({64, 1, 28, 32, 0})   // first layer: the input is data
    ->Args({64, 32, 26, 64, 1})  // second layer
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_Conv2dForward(benchmark::State& state) {
  const auto n = state.range(0), c = state.range(1), hw = state.range(2), oc = state.range(3);
  Tensor x = randn({n, c, hw, hw}), w = randn({oc, c, 3, 3}), b = zeros({oc});
  for (auto _ : state) {
    Tensor y = conv2d(x, w, b);
    benchmark::DoNotOptimize(y.storage().data());
  }
}
BENCHMARK(BM_Conv2dForward)
    ->ArgNames({"N", "C", "HW", "OC"})
    ->Args({64, 1, 28, 32})
    ->Args({64, 32, 26, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The CNN of the baselines: conv 1->32 3x3, relu, conv 32->64 3x3, relu,
// max-pool 2, dropout .25, linear 9216->128, relu, dropout .5, linear 128->10.
struct Cnn {
  std::vector<Tensor> params, velocity;
  Cnn() {
    auto uniform_init = [](Shape s, std::int64_t fan_in) {
      double bound = 1.0 / std::sqrt(double(fan_in));
      return uniform(s, -bound, bound).requires_grad_();
    };
    params = {uniform_init({32, 1, 3, 3}, 9),      uniform_init({32}, 9),
              uniform_init({64, 32, 3, 3}, 288),   uniform_init({64}, 288),
              uniform_init({128, 9216}, 9216),     uniform_init({128}, 9216),
              uniform_init({10, 128}, 128),        uniform_init({10}, 128)};
    for (auto& p : params) velocity.push_back(zeros_like(p));
  }
  Tensor forward(const Tensor& x) {
    const auto& p = params;
    Tensor h = relu(conv2d(relu(conv2d(x, p[0], p[1])), p[2], p[3]));
    h = dropout(max_pool2d(h, 2), 0.25, true).flatten(1);
    h = dropout(relu(linear(h, p[4], p[5])), 0.5, true);
    return linear(h, p[6], p[7]);
  }
  // One SGD step with momentum 0.9, as the baseline trains.
  double step(const Tensor& x, const Tensor& y, double lr = 0.02) {
    Tensor loss = cross_entropy(forward(x), y);
    GradientStore grads = backward(loss);
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      velocity[i].mul_(0.9).add_(grads.at(params[i]));
      params[i].add_(velocity[i], -lr);
    }
    return loss.item();
  }
};

void BM_CnnTrainStep(benchmark::State& state) {
  manual_seed(0);
  const std::int64_t batch = 64, batches = 16;
  Tensor images = rand({batches * batch, 1, 28, 28});
  Tensor labels = randint(0, 10, {batches * batch});
  Cnn net;
  std::int64_t i = 0;
  for (auto _ : state) {
    const std::int64_t b = i++ % batches;
    double loss = net.step(images.narrow(0, b * batch, batch), labels.narrow(0, b * batch, batch));
    benchmark::DoNotOptimize(loss);
  }
  state.counters["samples/s"] =
      benchmark::Counter(double(batch) * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);

}  // namespace

BENCHMARK_MAIN();
