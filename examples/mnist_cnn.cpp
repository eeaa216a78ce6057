// Trains the classic MNIST CNN (two 3x3 convolutions, max-pool, dropout, two
// linear layers) on Fashion-MNIST, or any MNIST-format data.
//
// The whole training loop is in this file, top to bottom: model, data,
// optimizer and schedule, resuming, then per epoch forward, backward(loss),
// optimizer step, evaluation and checkpoint. What is not about training
// (option parsing, the progress line, the metrics files) and what the
// classifiers share around the loop (evaluation, resuming, captured steps,
// the end of an epoch: support/classifier.hpp) is in support/.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "support/classifier.hpp"
#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/mnist_models.hpp"
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;

// The model (support/mnist_models.hpp): the classic MNIST CNN, each ReLU
// fused into the layer before it, with PyTorch's state-dict names.
using example::Cnn;

int train(const example::Options& o) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation and dropout; the loader shuffles with its own seed below
  const Device dev = Device::parse(o.device);

  // Model: created on the CPU, then moved (parameters keep their identity).
  Cnn net;
  net.to(dev);

  // Data: pixels scaled to [0, 1], then normalised with the training set's
  // mean and standard deviation. The order of epoch e depends only on the seed and e.
  data::Mnist train_set(o.data, data::Split::Train), test_set(o.data, data::Split::Test);
  const std::int64_t train_examples = train_set.size();
  const std::int64_t steps_per_epoch = example::steps_per_epoch(train_examples, o.batch_size, o.limit, o.data);
  example::check_test_set(test_set.size(), o.data);
  const data::Normalize norm = data::Normalize::fit(train_set.images());
  train_set.set_normalize(norm);
  test_set.set_normalize(norm);
  data::DataLoader train_loader(std::move(train_set),
                                {.batch_size = o.batch_size, .shuffle = true, .drop_last = true, .seed = o.seed});
  // Evaluation in training-size batches: a batch that fits a training step
  // fits a forward pass on every device (1000 made the convolution buffers
  // exceed lavapipe's largest buffer, 128 MiB).
  data::DataLoader test_loader(std::move(test_set), {.batch_size = o.batch_size});

  // Optimizer (AdamW by default) and a learning-rate schedule stepped once per batch.
  const double lr = example::learning_rate(o);
  auto opt = example::make_optimizer(o.optimizer, net.parameters(), lr, o.weight_decay, o.nesterov);
  // On a GPU the step is recorded once and replayed for every full batch
  // (support/classifier.hpp); RMSprop, which cannot be captured, runs eagerly.
  const bool capture_steps = !dev.is_cpu() && o.optimizer != "rmsprop";
  // The one-cycle schedule cycles the momentum too, unless the captured steps
  // cannot follow it (Adam's beta1): then only the lr.
  const bool cycle_momentum = !capture_steps || example::captured_steps_follow_momentum(o.optimizer);
  auto sched = example::make_schedule(o.schedule, *opt, lr, steps_per_epoch * o.epochs, cycle_momentum);
  // What this run trains; stored in its checkpoints, and a resume must match it.
  io::TrainingState state;  // epochs and steps completed
  state.settings = example::run_settings(o, "cnn", *opt, lr, train_examples, norm);

  // --resume: the model, the optimizer, the random generator and the counters
  // continue where the checkpoint left them (support/classifier.hpp).
  std::vector<example::EpochMetrics> history = example::resume(o, net, *opt, *sched, state);
  std::printf("mnist_cnn: %lld parameters, %s, lr %g, %s schedule, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), o.optimizer.c_str(), lr, o.schedule.c_str(), (long long)o.batch_size,
              o.threads, dev.str().c_str());
  std::fflush(stdout);

  // --amp: dynamic loss scaling for the 16-bit gradients; without it the scaler passes everything through.
  // Captured, the scaler keeps its inf/nan check, the skip and the scale on the device (no read back per step).
  optim::GradScaler scaler({.enabled = o.amp, .device_side = capture_steps});
  // One training step: forward (recorded onto this thread's tape), backward
  // (gradients of every parameter), optimizer update. No zero_grad():
  // gradients are not stored.
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      AutocastGuard amp(o.amp);  // --amp: matrix products in 16 bits, the loss in f32
      loss = cross_entropy(net(x), y);
    }
    GradientStore grads = backward(scaler.scale(loss));  // scaled under --amp
    scaler.step(*opt, grads);  // unscaled first; skipped on inf/nan
    scaler.update();
    return loss;
  };
  example::StepRunner run_step(train_step, dev, o.batch_size, capture_steps);

  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), steps_per_epoch);
    example::EpochLoss loss_sum;
    std::int64_t steps = 0, samples = 0;
    for (auto& [x, y] : train_loader) {
      if (steps == steps_per_epoch) break;  // --limit
      Tensor loss = run_step(x, y);
      sched->step();
      ++state.step;
      loss_sum.add(loss);
      samples += x.size(0);
      if (progress.due(++steps)) progress.advance(steps, samples, loss_sum.value() / double(steps));
    }
    const double train_loss_sum = loss_sum.value();  // waits for the epoch's last step
    const double seconds = progress.seconds();
    progress.finish();

    // Evaluation, the report line, the checkpoint and the metrics files.
    example::end_epoch("mnist_cnn", o, net, *opt, state, test_loader, dev, {epoch, train_loss_sum, steps, samples, seconds},
                       history);
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "mnist_cnn"}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), o.checkpoint.c_str(), o.metrics.c_str());
  return 0;
}

int main(int argc, char** argv) {
  example::Options options;
  options.epochs = 3;
  CLI::App app{"Trains a CNN on Fashion-MNIST (or any MNIST-format data).", "mnist_cnn"};
  example::add_options(app, options);
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_cnn: %s\n", e.what());
    return 1;
  }
}
