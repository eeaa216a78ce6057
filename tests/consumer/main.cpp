#include <rumus/rumus.hpp>

int main() {
  using namespace rumus;
  Tensor w = tensor({0.5, -0.5}).requires_grad_();
  Tensor loss = sum(square(w));
  GradientStore g = backward(loss);
  return g.at(w).to_vector<float>() == std::vector<float>{1.0f, -1.0f} ? 0 : 1;
}
