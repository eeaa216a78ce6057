// Trains the classic MNIST CNN (two 3x3 convolutions, max-pool, dropout, two
// linear layers) on Fashion-MNIST (or any MNIST-format data).
// Run with --help for the options.
#include "common.hpp"

using namespace rumus;

struct Cnn : nn::Module {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  nn::Dropout drop1{0.25}, drop2{0.5};
  nn::Linear fc1{9216, 128}, fc2{128, 10};
  Cnn() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"drop1", drop1}, {"drop2", drop2}, {"fc1", fc1}, {"fc2", fc2}});
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = drop1(max_pool2d(relu(conv2(relu(conv1(x)))), 2)).flatten(1);
    return fc2(drop2(relu(fc1(h))));
  }
  std::string type_name() const override { return "Cnn"; }
};

int main(int argc, char** argv) {
  auto default_lr = [](const std::string& optimizer) { return optimizer == "sgd" ? 0.05 : 2e-3; };
  return example::main<Cnn>("mnist_cnn", 3, default_lr, argc, argv);
}
