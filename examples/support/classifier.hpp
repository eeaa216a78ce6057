#pragma once
// What the image classifiers' trainers (mnist_mlp, mnist_cnn, resnet) share
// around their loops: resuming from a checkpoint (support/resume.hpp, which
// the other trainers use too), running a step eagerly or as a captured replay, and the end of an epoch (evaluation, report, checkpoint,
// metrics). Each trainer still spells out its own model, data, optimizer and
// loop; these are the parts that are the same in all three.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "metrics.hpp"
#include "resume.hpp"
#include "training_size.hpp"

namespace example {

struct Evaluation {
  double loss, accuracy;
};

// Mean loss and accuracy over `loader`: evaluation mode (no dropout, batch
// norm on its running statistics), and nothing recorded onto the tape.
inline Evaluation evaluate(rumus::nn::Module& net, rumus::data::DataLoader& loader, rumus::Device dev) {
  using namespace rumus;
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

// A training step `step(x, y) -> loss`, run eagerly, or on a GPU recorded once
// (rumus::capture) and replayed for every full batch after copying the batch
// into the step's fixed input tensors: the host no longer rebuilds forward,
// backward and update at each batch. Other batches run eagerly.
class StepRunner {
 public:
  using Step = std::function<rumus::Tensor(const rumus::Tensor& x, const rumus::Tensor& y)>;
  StepRunner(Step step, rumus::Device dev, std::int64_t batch_size, bool capture_steps)
      : step_(std::move(step)), dev_(dev), batch_size_(batch_size), capture_(capture_steps) {}

  rumus::Tensor operator()(const rumus::Tensor& x, const rumus::Tensor& y) {
    using namespace rumus;
    if (!capture_ || x.size(0) != batch_size_) return step_(x.to(dev_), y.to(dev_));
    if (!captured_.valid()) {
      x_static_ = zeros(x.shape(), {.dtype = x.dtype(), .device = dev_});
      y_static_ = zeros(y.shape(), {.dtype = y.dtype(), .device = dev_});
      captured_ = capture(dev_, [&] { loss_static_ = step_(x_static_, y_static_); });
    }
    x_static_.copy_(x);
    y_static_.copy_(y);
    captured_.replay();
    return loss_static_;
  }

 private:
  Step step_;
  rumus::Device dev_;
  std::int64_t batch_size_;
  bool capture_;
  rumus::Tensor x_static_, y_static_, loss_static_;
  rumus::CapturedStep captured_;
};

// The sum of an epoch's training losses, kept on the losses' device. Reading
// each step's loss would make the host wait for that step before preparing
// the next batch, so the GPU would idle while the host works (the PyTorch
// twins read one every 50 steps); the sum is read when the progress line is
// drawn and at the end of the epoch.
class EpochLoss {
 public:
  void add(const rumus::Tensor& loss) {
    // A captured step's loss is overwritten by the next replay: the first is copied.
    sum_ = sum_.defined() ? sum_ + loss.detach() : loss.detach().clone();
  }
  double value() const { return sum_.defined() ? sum_.item() : 0.0; }

 private:
  rumus::Tensor sum_;
};

// What one epoch of training measured, for end_epoch.
struct EpochTrained {
  std::int64_t epoch;  // 0-based
  double loss_sum;     // of the steps' losses
  std::int64_t steps, samples;
  double seconds;
};

// The end of an epoch: evaluation on the test set, the report line, the
// checkpoint (which a --resume continues from) and the metrics files.
inline void end_epoch(const std::string& program, const Options& o, rumus::nn::Module& net,
                      rumus::optim::Optimizer& opt, rumus::io::TrainingState& state, rumus::data::DataLoader& test_loader,
                      rumus::Device dev, const EpochTrained& t, std::vector<EpochMetrics>& history) {
  const Evaluation test = evaluate(net, test_loader, dev);
  history.push_back({int(t.epoch + 1), t.loss_sum / double(std::max<std::int64_t>(t.steps, 1)), test.loss,
                     test.accuracy, double(t.samples) / t.seconds, t.seconds});
  std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
              (long long)t.epoch + 1, history.back().train_loss, test.loss, test.accuracy, history.back().per_sec);
  std::fflush(stdout);

  state.epoch = t.epoch + 1;
  rumus::io::save_checkpoint(o.checkpoint, net, opt, state);
  write_metrics(o.metrics, program + " on " + std::filesystem::path(o.data).filename().string(), history);
}

}  // namespace example
