// A complete training loop written against rumus alone, the way one would
// write it with libtorch: a model, Fashion-MNIST, training with backward(loss)
// and an optimizer step, test accuracy, a checkpoint after every epoch and
// resuming from it, and a device chosen on the command line.
//
// docs/getting-started.md ("Your own training loop") shows the part between the two marker
// comments; the test own_loop_readme checks that that page still has it
// word for word, and own_loop / own_loop_resume run it.
#include <CLI/CLI.hpp>

#include "support/cli.hpp"

// [readme excerpt begins]
#include <rumus/rumus.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

using namespace rumus;

struct Net : nn::Module {  // like a torch::nn::Module, members registered by name
  nn::Conv2d conv1{1, 16, 3};
  nn::Linear fc1{16 * 13 * 13, 64}, fc2{64, 10};
  Net() { register_modules({{"conv1", conv1}, {"fc1", fc1}, {"fc2", fc2}}); }
  Tensor forward(const Tensor& x) override {
    Tensor h = max_pool2d(relu(conv1(x)), 2).flatten(1);  // [N, 16 * 13 * 13]
    return fc2(relu(fc1(h)));
  }
};

struct Settings {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string device = "best";  // "best", "cpu", "vulkan", "vulkan:1", ...
  int epochs = 2;
  std::int64_t batches_per_epoch = 0;  // 0: the whole training set
  std::string checkpoint = "own_loop.ckpt.safetensors", save = "own_loop.safetensors";
};

double accuracy(Net& net, data::DataLoader& loader, Device dev) {
  NoGradGuard no_grad;  // nothing is recorded onto the tape
  net.eval();           // (matters for dropout and batch norm)
  std::int64_t correct = 0, total = 0;
  for (auto& [x, y] : loader) {
    Tensor predicted = argmax(net(x.to(dev)), 1);
    correct += sum(eq(predicted, y.to(dev)).to(DType::i64)).item<std::int64_t>();
    total += y.size(0);
  }
  net.train();
  return double(correct) / double(total);
}

int train(const Settings& s) {
  manual_seed(0);  // initialisation (and dropout, if any)
  const Device dev = Device::parse(s.device);  // "best": Device::best(), a real GPU if any, else the CPU
  Net net;
  net.to(dev);
  optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});

  // x: f32 [64, 1, 28, 28] in [0, 1]; y: i64 [64]. The order of epoch e depends only on (seed, e).
  data::DataLoader train_loader(data::Mnist(s.data, data::Split::Train),
                                {.batch_size = 64, .shuffle = true, .drop_last = true, .seed = 0});
  data::DataLoader test_loader(data::Mnist(s.data, data::Split::Test), {.batch_size = 256});

  io::TrainingState state;  // epochs and steps completed
  if (std::filesystem::exists(s.checkpoint)) {
    state = io::load_checkpoint(s.checkpoint, net, opt);  // model, optimizer, generator, counters
    std::printf("resumed from %s at epoch %lld\n", s.checkpoint.c_str(), (long long)state.epoch);
  }
  std::printf("training on %s\n", dev.str().c_str());

  for (std::int64_t epoch = state.epoch; epoch < s.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    double loss_sum = 0;
    std::int64_t batches = 0;
    for (auto& [x, y] : train_loader) {
      Tensor loss = cross_entropy(net(x.to(dev)), y.to(dev));
      GradientStore grads = backward(loss);  // loss.backward()
      opt.step(grads);                       // opt.step(); no zero_grad() needed
      loss_sum += loss.item();
      ++state.step;
      if (++batches == s.batches_per_epoch) break;
    }
    state.epoch = epoch + 1;
    io::save_checkpoint(s.checkpoint, net, opt, state);
    std::printf("epoch %lld: train loss %.4f, test accuracy %.4f\n", (long long)state.epoch,
                loss_sum / double(batches), accuracy(net, test_loader, dev));
  }
  io::save_safetensors(net.state_dict(), s.save);  // conv1.weight, conv1.bias, fc1.weight, ...
  std::printf("saved %s\n", s.save.c_str());
  return 0;
}
// [readme excerpt ends]

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"Trains a small CNN on Fashion-MNIST, resuming from its checkpoint if one exists.", "own_loop"};
  app.add_option("--data", s.data, "directory of MNIST-format IDX files")->capture_default_str();
  app.add_option("--device", s.device, "best, cpu, vulkan or vulkan:N")->capture_default_str();
  app.add_option("--epochs", s.epochs)->capture_default_str()->check(example::whole_number(1));
  app.add_option("--batches-per-epoch", s.batches_per_epoch, "0: the whole training set")
      ->capture_default_str()
      ->check(example::whole_number(0));
  app.add_option("--checkpoint", s.checkpoint, "written after every epoch; resumed from when it exists")
      ->capture_default_str();
  app.add_option("--save", s.save, "the final model")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return train(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "own_loop: %s\n", e.what());
    return 1;
  }
}
