#pragma once
// The MNIST models the examples and benchmarks train. Their state-dict names
// ("fc1.weight", "conv2.bias", ...) are the ones an identical PyTorch module
// would use, so a saved model loads into PyTorch's twin and back.
//
// Mlp and Cnn fuse each ReLU into the layer before it (nn::LinearReLU,
// nn::ConvReLU2d: the unfused layer's parameters and names, its ReLU in the
// same op). On the CPU the convolutions' ReLU runs inside oneDNN's kernel,
// and the second convolution reads the first one's output in the kernel's
// own layout. PlainMlp and PlainCnn are the same models written as a PyTorch
// user writes them, with a separate relu(): the same parameters, names and
// results, for measuring what the fusion saves.
#include <rumus/rumus.hpp>

#include <string>

namespace example {

// 784-512-512-10.
struct Mlp : rumus::nn::Module {
  rumus::nn::LinearReLU fc1{784, 512}, fc2{512, 512};
  rumus::nn::Linear fc3{512, 10};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  rumus::Tensor forward(const rumus::Tensor& x) override { return fc3(fc2(fc1(x.flatten(1)))); }
  std::string type_name() const override { return "Mlp"; }
};

// The classic MNIST CNN: two 3x3 convolutions, max-pool, dropout, two linear layers.
struct Cnn : rumus::nn::Module {
  rumus::nn::ConvReLU2d conv1{1, 32, 3}, conv2{32, 64, 3};
  rumus::nn::Dropout drop1{0.25}, drop2{0.5};
  rumus::nn::LinearReLU fc1{9216, 128};
  rumus::nn::Linear fc2{128, 10};
  Cnn() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"drop1", drop1}, {"drop2", drop2}, {"fc1", fc1}, {"fc2", fc2}});
  }
  rumus::Tensor forward(const rumus::Tensor& x) override {
    rumus::Tensor h = drop1(rumus::max_pool2d(conv2(conv1(x)), 2)).flatten(1);
    return fc2(drop2(fc1(h)));
  }
  std::string type_name() const override { return "Cnn"; }
};

struct PlainMlp : rumus::nn::Module {
  rumus::nn::Linear fc1{784, 512}, fc2{512, 512}, fc3{512, 10};
  PlainMlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  rumus::Tensor forward(const rumus::Tensor& x) override {
    return fc3(rumus::relu(fc2(rumus::relu(fc1(x.flatten(1))))));
  }
  std::string type_name() const override { return "Mlp"; }
};

struct PlainCnn : rumus::nn::Module {
  rumus::nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  rumus::nn::Dropout drop1{0.25}, drop2{0.5};
  rumus::nn::Linear fc1{9216, 128}, fc2{128, 10};
  PlainCnn() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"drop1", drop1}, {"drop2", drop2}, {"fc1", fc1}, {"fc2", fc2}});
  }
  rumus::Tensor forward(const rumus::Tensor& x) override {
    rumus::Tensor h = drop1(rumus::max_pool2d(rumus::relu(conv2(rumus::relu(conv1(x)))), 2)).flatten(1);
    return fc2(drop2(rumus::relu(fc1(h))));
  }
  std::string type_name() const override { return "Cnn"; }
};

}  // namespace example
