// Trains the MLP 784-512-512-10 on Fashion-MNIST (or any MNIST-format data).
// Run with --help for the options.
#include "common.hpp"

using namespace rumus;

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512}, fc2{512, 512}, fc3{512, 10};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  Tensor forward(const Tensor& x) override { return fc3(relu(fc2(relu(fc1(x.flatten(1)))))); }
  std::string type_name() const override { return "Mlp"; }
};

int main(int argc, char** argv) {
  auto default_lr = [](const std::string& optimizer) { return optimizer == "sgd" ? 0.05 : 2e-3; };
  return example::main<Mlp>("mnist_mlp", 5, default_lr, argc, argv);
}
