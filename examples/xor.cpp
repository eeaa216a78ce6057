// Fits XOR with a 2-8-1 network written directly with tensors and the tape.
#include <rumus/rumus.hpp>

#include <cstdio>

using namespace rumus;

int main() {
  manual_seed(0);
  Tensor x = tensor({{0, 0}, {0, 1}, {1, 0}, {1, 1}});
  Tensor y = tensor({0, 1, 1, 0}).reshape({4, 1});
  Tensor w1 = mul(randn({2, 8}), 1.0).requires_grad_();
  Tensor b1 = zeros({8}, {.requires_grad = true});
  Tensor w2 = mul(randn({8, 1}), 0.5).requires_grad_();
  Tensor b2 = zeros({1}, {.requires_grad = true});
  const double lr = 0.5;
  for (int step = 0; step <= 2000; ++step) {
    Tensor h = tanh(add(matmul(x, w1), b1));
    Tensor pred = sigmoid(add(matmul(h, w2), b2));
    Tensor loss = mse_loss(pred, y);
    GradientStore grads = backward(loss);
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->add_(grads.at(*p), -lr);
    if (step % 250 == 0) std::printf("step %4d  loss %.6f\n", step, loss.item());
    if (step == 2000) fmt::print("predictions {}\n", pred.reshape({4}));
  }
}
