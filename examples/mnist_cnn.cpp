// Trains the classic MNIST CNN (two 3x3 convolutions, max-pool, dropout, two
// linear layers) on Fashion-MNIST, or any MNIST-format data.
//
// The whole training loop is in this file, top to bottom: model, data,
// optimizer and schedule, resuming, then per epoch forward, backward(loss),
// optimizer step, evaluation and checkpoint. What is not about training
// (option parsing, the progress line, the metrics files) is in support/.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;

// The model. Its state-dict names ("conv1.weight", "fc2.bias", ...) are the
// ones an identical PyTorch module would use.
//
// The layers followed by a ReLU are ConvReLU2d and LinearReLU: the layer and
// its ReLU in one op, with the unfused layer's parameters and names. On the
// CPU the convolutions' ReLU runs inside oneDNN's kernel, and the second
// convolution reads the first one's output in the kernel's own layout.
struct Cnn : nn::Module {
  nn::ConvReLU2d conv1{1, 32, 3}, conv2{32, 64, 3};
  nn::Dropout drop1{0.25}, drop2{0.5};
  nn::LinearReLU fc1{9216, 128};
  nn::Linear fc2{128, 10};
  Cnn() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"drop1", drop1}, {"drop2", drop2}, {"fc1", fc1}, {"fc2", fc2}});
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = drop1(max_pool2d(conv2(conv1(x)), 2)).flatten(1);
    return fc2(drop2(fc1(h)));
  }
  std::string type_name() const override { return "Cnn"; }
};

struct Evaluation {
  double loss, accuracy;
};

// Mean loss and accuracy over `loader`: evaluation mode (no dropout), and
// nothing recorded onto the tape.
Evaluation evaluate(nn::Module& net, data::DataLoader& loader, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  double loss = 0;
  std::int64_t correct = 0, n = 0;
  for (auto& [x, y] : loader) {
    Tensor logits = net(x.to(dev));
    Tensor target = y.to(dev);
    loss += cross_entropy(logits, target, {.reduction = Reduction::sum}).item();
    correct += sum(eq(argmax(logits, 1), target).to(DType::i64)).item<std::int64_t>();
    n += y.size(0);
  }
  net.train();
  return {loss / double(n), double(correct) / double(n)};
}

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
  auto sched = example::make_schedule(o.schedule, *opt, lr, steps_per_epoch * o.epochs);
  // What this run trains; stored in its checkpoints, and a resume must match it.
  io::TrainingState state;  // epochs and steps completed
  state.settings = example::run_settings(o, "cnn", *opt, lr, train_examples, norm);

  // Resuming: the checkpoint restores the model, the optimizer's state, the
  // random generator and the epoch/step counters; the schedule is a function
  // of the step. A checkpoint of a run with other settings is refused.
  std::vector<example::EpochMetrics> history;
  if (!o.resume.empty()) {
    state = io::load_checkpoint(o.resume, net, *opt, state.settings);
    example::check_epochs_left(state.epoch, o.epochs, o.resume);
    sched->set_step(state.step);
    history = example::read_metrics(o.metrics, state.epoch);
    std::fprintf(stderr, "resumed from %s at epoch %lld, step %lld\n", o.resume.c_str(), (long long)state.epoch,
                 (long long)state.step);
  }
  std::printf("mnist_cnn: %lld parameters, %s, lr %g, %s schedule, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), o.optimizer.c_str(), lr, o.schedule.c_str(), (long long)o.batch_size,
              o.threads, dev.str().c_str());
  std::fflush(stdout);

  // --amp: dynamic loss scaling for the 16-bit gradients; without it the scaler passes everything through.
  optim::GradScaler scaler({.enabled = o.amp});
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
  // On a GPU the step is recorded once (rumus::capture) and replayed for every
  // full batch, after copying the batch into the step's fixed input tensors:
  // the host no longer rebuilds forward, backward and update at each batch.
  // Other batches, the CPU, RMSprop (which cannot be captured) and --amp (the
  // scaler reads its inf/nan check back every step) run eagerly.
  const bool capture_steps = !dev.is_cpu() && o.optimizer != "rmsprop" && !o.amp;
  Tensor x_static, y_static, loss_static;
  CapturedStep captured_step;

  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), steps_per_epoch);
    double loss_sum = 0;
    std::int64_t steps = 0, samples = 0;
    for (auto& [x, y] : train_loader) {
      if (steps == steps_per_epoch) break;  // --limit
      Tensor loss;
      if (capture_steps && x.size(0) == o.batch_size) {
        if (!captured_step.valid()) {
          x_static = zeros(x.shape(), {.dtype = x.dtype(), .device = dev});
          y_static = zeros(y.shape(), {.dtype = y.dtype(), .device = dev});
          captured_step = capture(dev, [&] { loss_static = train_step(x_static, y_static); });
        }
        x_static.copy_(x);
        y_static.copy_(y);
        captured_step.replay();
        loss = loss_static;
      } else {
        loss = train_step(x.to(dev), y.to(dev));
      }
      sched->step();
      ++state.step;
      const double l = loss.item();
      loss_sum += l;
      samples += x.size(0);
      progress.update(++steps, samples, l);
    }
    const double seconds = progress.seconds();
    progress.finish();

    const Evaluation test = evaluate(net, test_loader, dev);
    history.push_back({int(epoch + 1), loss_sum / double(std::max<std::int64_t>(steps, 1)), test.loss,
                       test.accuracy, double(samples) / seconds, seconds});
    std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
                (long long)epoch + 1, history.back().train_loss, test.loss, test.accuracy,
                history.back().per_sec);
    std::fflush(stdout);

    state.epoch = epoch + 1;
    io::save_checkpoint(o.checkpoint, net, *opt, state);
    example::write_metrics(o.metrics, "mnist_cnn on " + std::filesystem::path(o.data).filename().string(), history);
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
