// Fits XOR with a 2-8-1 network written directly with tensors and the tape:
// no nn::Module and no optimizer, only forward, backward(loss) and an update
// of each parameter by hand. Run with --help for the options.
#include <CLI/CLI.hpp>
#include <rumus/rumus.hpp>

#include <cstdio>

#include "support/cli.hpp"

using namespace rumus;

int main(int argc, char** argv) {
  int steps = 2000;
  double lr = 0.5;
  std::uint64_t seed = 0;
  CLI::App app{"Fits XOR with a 2-8-1 network and plain gradient descent.", "xor"};
  app.add_option("--steps", steps, "gradient descent steps")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--lr", lr, "learning rate")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--seed", seed, "seeds the initial weights")->capture_default_str()->check(example::whole_number(0));
  CLI11_PARSE(app, argc, argv);

  manual_seed(seed);
  Tensor x = tensor({{0, 0}, {0, 1}, {1, 0}, {1, 1}});
  Tensor y = tensor({0, 1, 1, 0}).reshape({4, 1});
  Tensor w1 = mul(randn({2, 8}), 1.0).requires_grad_();
  Tensor b1 = zeros({8}, {.requires_grad = true});
  Tensor w2 = mul(randn({8, 1}), 0.5).requires_grad_();
  Tensor b2 = zeros({1}, {.requires_grad = true});
  for (int step = 0; step <= steps; ++step) {
    Tensor h = tanh(add(matmul(x, w1), b1));
    Tensor pred = sigmoid(add(matmul(h, w2), b2));
    Tensor loss = mse_loss(pred, y);
    GradientStore grads = backward(loss);  // d loss / d w1, b1, w2, b2
    NoGradGuard no_grad;                   // the update itself is not recorded
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->add_(grads.at(*p), -lr);
    if (step % 250 == 0) std::printf("step %4d  loss %.6f\n", step, loss.item());
    if (step == steps) fmt::print("predictions {}\n", pred.reshape({4}));
  }
}
