// A training loop as a user writes it against rumus: the examples' MLP and CNN
// as nn modules, SGD with momentum, batch 64, nothing tuned and no environment
// needed. bench/user_loop_vs_examples.sh runs it with an empty environment
// beside the example trainers, to show that a program of one's own trains as
// fast as they do.
// Run: build/release/bench/bench_user_loop --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <rumus/rumus.hpp>

#include "../examples/support/mnist_models.hpp"

using namespace rumus;

namespace {

// The examples' models as a PyTorch user writes them (a separate relu()).
using Mlp = example::PlainMlp;
using Cnn = example::PlainCnn;

// Steps over 16 batches of random images, as many as the benchmark asks for.
template <class Net>
void train_steps(benchmark::State& state, double lr) {
  manual_seed(0);
  const std::int64_t batch = 64, batches = 16;
  Tensor images = rand({batches * batch, 1, 28, 28});
  Tensor labels = randint(0, 10, {batches * batch});
  Net net;
  optim::SGD opt(net.parameters(), {.lr = lr, .momentum = 0.9});
  std::int64_t i = 0;
  for (auto _ : state) {
    const std::int64_t b = i++ % batches;
    Tensor loss = cross_entropy(net.forward(images.narrow(0, b * batch, batch)), labels.narrow(0, b * batch, batch));
    GradientStore grads = backward(loss);
    opt.step(grads);
    benchmark::DoNotOptimize(loss.item());
  }
  state.counters["samples/s"] =
      benchmark::Counter(double(batch) * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_MlpTrainStep(benchmark::State& state) { train_steps<Mlp>(state, 0.05); }
void BM_CnnTrainStep(benchmark::State& state) { train_steps<Cnn>(state, 0.02); }
BENCHMARK(BM_MlpTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);
BENCHMARK(BM_CnnTrainStep)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(5.0);

}  // namespace

BENCHMARK_MAIN();
