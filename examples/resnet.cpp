// Trains a ResNet-18 (BasicBlocks, batch norm, stride-2 convolutions, global
// average pool: support/resnet.hpp) on Fashion-MNIST, any MNIST-format data,
// or 32x32 colour images in CIFAR-10's binary format when --data names a
// directory of them (data_batch_1.bin ... data_batch_5.bin, test_batch.bin).
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
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/resnet.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;

// The data: Fashion-MNIST (1 x 28 x 28) or CIFAR-10 (3 x 32 x 32).
struct Data {
  std::shared_ptr<data::Dataset> train, test;
  std::int64_t channels;
  data::Normalize norm;
};

Data load(const std::string& dir) {
  if (data::Cifar10::found_in(dir)) {
    auto train = std::make_shared<data::Cifar10>(dir, data::Split::Train);
    auto test = std::make_shared<data::Cifar10>(dir, data::Split::Test);
    const data::Normalize norm = data::Normalize::fit(train->images());
    train->set_normalize(norm);
    test->set_normalize(norm);
    return {train, test, 3, norm};
  }
  auto train = std::make_shared<data::Mnist>(dir, data::Split::Train);
  auto test = std::make_shared<data::Mnist>(dir, data::Split::Test);
  const data::Normalize norm = data::Normalize::fit(train->images());
  train->set_normalize(norm);
  test->set_normalize(norm);
  return {train, test, 1, norm};
}

int train(const example::Options& o, std::int64_t width) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation and dropout; the loader shuffles with its own seed below
  const Device dev = Device::parse(o.device);

  // Data: pixels scaled to [0, 1], then normalised with the training set's
  // mean and standard deviation. The order of epoch e depends only on the seed and e.
  Data d = load(o.data);
  const std::int64_t train_examples = d.train->size();
  const std::int64_t steps_per_epoch = example::steps_per_epoch(train_examples, o.batch_size, o.limit, o.data);
  example::check_test_set(d.test->size(), o.data);
  const data::Normalize norm = d.norm;
  data::DataLoader train_loader(d.train, {.batch_size = o.batch_size, .shuffle = true, .drop_last = true, .seed = o.seed});

  // Model: created on the CPU, then moved (parameters keep their identity).
  example::ResNet18 net(d.channels, 10, width);
  net.to(dev);
  // Evaluation in training-size batches: a batch that fits a training step
  // fits a forward pass on every device (1000 made the convolution buffers
  // exceed lavapipe's largest buffer, 128 MiB).
  data::DataLoader test_loader(d.test, {.batch_size = o.batch_size});

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
  state.settings = example::run_settings(o, "resnet18", *opt, lr, train_examples, norm);
  state.settings["width"] = std::to_string(width);

  // --resume: the model, the optimizer, the random generator and the counters
  // continue where the checkpoint left them (support/classifier.hpp).
  std::vector<example::EpochMetrics> history = example::resume(o, net, *opt, *sched, state);
  std::printf("resnet: %lld parameters (width %lld, %lld input channels), %s, lr %g, %s schedule, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), (long long)width, (long long)d.channels, o.optimizer.c_str(), lr,
              o.schedule.c_str(), (long long)o.batch_size, o.threads, dev.str().c_str());
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
    example::end_epoch("resnet", o, net, *opt, state, test_loader, dev, {epoch, train_loss_sum, steps, samples, seconds},
                       history);
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "resnet18"}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), o.checkpoint.c_str(), o.metrics.c_str());
  return 0;
}

int main(int argc, char** argv) {
  example::Options options;
  options.epochs = 3;
  options.batch_size = 128;
  options.optimizer = "sgd";
  std::int64_t width = 64;
  CLI::App app{"Trains a ResNet-18 on Fashion-MNIST (or any MNIST-format data), or on CIFAR-10 binary files.",
               "resnet"};
  example::add_options(app, options);
  app.get_option("--data")->description("directory of MNIST-format IDX files (raw or .gz) or of CIFAR-10 binary files");
  app.add_option("--width", width, "channels of the first stage (then 2x, 4x, 8x); 64 is ResNet-18's")
      ->type_name("N")
      ->capture_default_str()
      ->check(example::whole_number(1));
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options, width);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resnet: %s\n", e.what());
    return 1;
  }
}
