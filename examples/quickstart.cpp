// The README's complete example, built with the examples so that it keeps
// compiling; the README shows the part between the markers word for word.
// [readme excerpt begins]
#include <rumus/rumus.hpp>
using namespace rumus;

struct Net : nn::Module {
  nn::Conv2d conv1{1, 32, 3};
  nn::Linear fc{32 * 26 * 26, 10};
  Net() { register_modules({{"conv1", conv1}, {"fc", fc}}); }
  Tensor forward(const Tensor& x) override { return fc(relu(conv1(x)).flatten(1)); }
};

int main() {
  Net net;
  data::DataLoader train(data::Mnist("/usr/share/datasets/fashion-mnist", data::Split::Train),
                         {.batch_size = 64, .shuffle = true});
  optim::AdamW opt(net.parameters(), {.lr = 1e-3});
  optim::OneCycleLR sched(opt, 1e-3, train.size());  // stepped per batch, one epoch
  for (auto& [x, y] : train) {
    Tensor loss = cross_entropy(net(x), y);
    opt.step(backward(loss));  // the gradients are returned: no zero_grad()
    sched.step();
  }
  io::save_safetensors(net.state_dict(), "net.safetensors");
}
// [readme excerpt ends]
