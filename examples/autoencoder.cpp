// Trains a convolutional autoencoder on Fashion-MNIST (or any MNIST-format
// data of 28 x 28 images): strided convolutions squeeze each image into a code
// of --latent numbers, transposed convolutions draw it again, and the loss is
// the mean squared difference between the image and its reconstruction.
//
// The whole training loop is in this file, top to bottom: model, data,
// optimizer and schedule, resuming, then per epoch forward, backward(loss),
// optimizer step, test reconstruction loss, checkpoint and a picture: the
// first test images above their reconstructions (--images, a PNG rewritten
// after every epoch). What is not about training (option parsing, the
// progress line, the metrics files, writing PNG) is in support/.
// bench/autoencoder_torch.py is the same model and training in PyTorch.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/optim.hpp"
#include "support/png.hpp"
#include "support/progress.hpp"
#include "support/resume.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;

namespace {

// 1x28x28 -> 16x14x14 -> 32x7x7 -> latent x1x1 and back. Each encoder ReLU
// is fused into its convolution (nn::ConvReLU2d: Conv2d's parameters and
// names); the names are those of bench/autoencoder_torch.py's module.
struct Autoencoder : nn::Module {
  nn::ConvReLU2d enc1{1, 16, 3, {.stride = 2, .padding = 1}}, enc2{16, 32, 3, {.stride = 2, .padding = 1}};
  nn::Conv2d enc3;  // 7x7 kernel over the 7x7 map: the code, one number per channel
  nn::ConvTranspose2d dec1;
  // output_padding 1: 7 -> 14 -> 28 exactly, where stride 2 alone gives 13 and 27.
  nn::ConvTranspose2d dec2{32, 16, 3, {.stride = 2, .padding = 1, .output_padding = 1}},
      dec3{16, 1, 3, {.stride = 2, .padding = 1, .output_padding = 1}};

  explicit Autoencoder(std::int64_t latent) : enc3(32, latent, 7), dec1(latent, 32, 7) {
    register_modules({{"enc1", enc1}, {"enc2", enc2}, {"enc3", enc3}, {"dec1", dec1}, {"dec2", dec2}, {"dec3", dec3}});
  }
  Tensor encode(const Tensor& x) { return enc3(enc2(enc1(x))); }
  // Pixels in (0, 1), as the images.
  Tensor decode(const Tensor& z) { return sigmoid(dec3(relu(dec2(relu(dec1(z)))))); }
  Tensor forward(const Tensor& x) override { return decode(encode(x)); }
  std::string type_name() const override { return "Autoencoder"; }
};

constexpr std::int64_t kSide = 28;  // image side the encoder's 7x7 code kernel expects

// Mean squared error per pixel over `loader`'s images, in evaluation mode.
double evaluate(Autoencoder& net, data::DataLoader& loader, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  Tensor total;  // summed on the device, read once at the end
  std::int64_t pixels = 0;
  for (auto& [x, y] : loader) {
    Tensor images = x.to(dev);
    Tensor batch_loss = mse_loss(net(images), images, Reduction::sum);
    total = total.defined() ? total + batch_loss : batch_loss;
    pixels += x.numel();
  }
  net.train();
  return total.item() / double(pixels);
}

// The picture of an epoch: `originals` (n, 1, 28, 28) in a row above their
// reconstructions, each image scaled up kScale times, on a grey ground.
constexpr std::int64_t kScale = 2, kGap = 4;
std::int64_t grid_width(std::int64_t n) { return n * kSide * kScale + (n + 1) * kGap; }
constexpr std::int64_t kGridHeight = 2 * kSide * kScale + 3 * kGap;

void write_grid(Autoencoder& net, const Tensor& originals, Device dev, const std::string& path) {
  Tensor reconstructions;
  {
    NoGradGuard no_grad;
    net.eval();
    reconstructions = net(originals.to(dev)).cpu();
    net.train();
  }
  const std::int64_t n = originals.size(0), width = grid_width(n);
  std::vector<std::uint8_t> pixels(std::size_t(width * kGridHeight), 128);
  const std::vector<float> rows[2] = {originals.contiguous().to_vector<float>(),
                                      reconstructions.contiguous().to_vector<float>()};
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t py = 0; py < kSide * kScale; ++py)
        for (std::int64_t px = 0; px < kSide * kScale; ++px) {
          const float v = rows[r][std::size_t((i * kSide + py / kScale) * kSide + px / kScale)];
          const std::int64_t gy = kGap + r * (kSide * kScale + kGap) + py, gx = kGap + i * (kSide * kScale + kGap) + px;
          pixels[std::size_t(gy * width + gx)] = std::uint8_t(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
        }
  example::write_png_gray(path, width, kGridHeight, pixels);
}

int train(const example::Options& o, std::int64_t latent, std::int64_t grid, const std::string& images_path) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation; the loader shuffles with its own seed below
  const Device dev = Device::parse(o.device);

  // Data: pixels scaled to [0, 1] and not normalised: they are the targets,
  // and the decoder's sigmoid gives values in (0, 1). Labels are unused.
  data::Mnist train_set(o.data, data::Split::Train), test_set(o.data, data::Split::Test);
  const std::int64_t train_examples = train_set.size();
  const std::int64_t steps_per_epoch = example::steps_per_epoch(train_examples, o.batch_size, o.limit, o.data);
  example::check_test_set(test_set.size(), o.data);
  if (train_set.images().size(1) != kSide || train_set.images().size(2) != kSide)
    throw ValueError(fmt::format("the images in '{}' are {} x {} pixels; expected {} x {}", o.data,
                                 train_set.images().size(1), train_set.images().size(2), kSide, kSide));
  if (grid > test_set.size())
    throw ValueError(fmt::format("--grid {} is more than the {} test images in '{}'; expected --grid <= {}", grid,
                                 test_set.size(), o.data, test_set.size()));
  // The pictured images: the first `grid` of the test set, the same every epoch.
  std::vector<std::int64_t> first(static_cast<std::size_t>(grid));
  for (std::int64_t i = 0; i < grid; ++i) first[std::size_t(i)] = i;
  const Tensor originals = test_set.get_batch(first).x;
  data::DataLoader train_loader(std::move(train_set),
                                {.batch_size = o.batch_size, .shuffle = true, .drop_last = true, .seed = o.seed});
  data::DataLoader test_loader(std::move(test_set), {.batch_size = o.batch_size});

  Autoencoder net(latent);
  net.to(dev);

  // Optimizer (AdamW by default) and a learning-rate schedule stepped once per batch.
  const double lr = example::learning_rate(o);
  auto opt = example::make_optimizer(o.optimizer, net.parameters(), lr, o.weight_decay, o.nesterov);
  auto sched = example::make_schedule(o.schedule, *opt, lr, steps_per_epoch * o.epochs);

  // What this run trains; stored in its checkpoints, and a resume must match it.
  io::TrainingState state;  // epochs and steps completed
  state.settings = example::training_settings(o, "conv_autoencoder", *opt, lr);
  state.settings["latent"] = std::to_string(latent);
  state.settings["limit"] = std::to_string(o.limit);
  state.settings["train_examples"] = std::to_string(train_examples);

  // --resume (support/resume.hpp). The metrics have no accuracy: a test
  // reconstruction loss only.
  const example::MetricNames names{.accuracy = false};
  std::vector<example::EpochMetrics> history = example::resume(o, net, *opt, *sched, state, names);
  std::printf("autoencoder: %lld parameters (latent %lld), %s, lr %g, %s schedule, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), (long long)latent, o.optimizer.c_str(), lr, o.schedule.c_str(),
              (long long)o.batch_size, o.threads, dev.str().c_str());
  std::fflush(stdout);

  // --amp: dynamic loss scaling for the 16-bit gradients; without it the scaler passes everything through.
  optim::GradScaler scaler({.enabled = o.amp});

  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), steps_per_epoch);
    // The loss is summed on the device and read only when progress is shown.
    Tensor loss_sum;
    std::int64_t steps = 0, samples = 0;
    for (auto& [x, y] : train_loader) {
      if (steps == steps_per_epoch) break;  // --limit
      Tensor images = x.to(dev);
      Tensor loss;
      {
        AutocastGuard amp(o.amp);  // --amp: convolutions in 16 bits, the loss in f32
        loss = mse_loss(net(images), images);  // the image is its own target
      }
      GradientStore grads = backward(scaler.scale(loss));  // scaled under --amp
      scaler.step(*opt, grads);  // unscaled first; skipped on inf/nan
      scaler.update();
      sched->step();
      ++state.step;
      const Tensor l = loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + l : l;
      samples += x.size(0);
      if (progress.due(++steps)) progress.advance(steps, samples, loss_sum.item() / double(steps));
    }
    const double seconds = progress.seconds();
    progress.finish();

    const double test_loss = evaluate(net, test_loader, dev);
    const double train_loss = loss_sum.defined() ? loss_sum.item() / double(steps) : 0.0;
    history.push_back({int(epoch + 1), train_loss, test_loss, 0.0, double(samples) / seconds, seconds});
    std::printf("epoch %lld: train loss %.5f, test loss %.5f, %.0f samples/s\n", (long long)epoch + 1, train_loss,
                test_loss, history.back().per_sec);
    std::fflush(stdout);

    state.epoch = epoch + 1;
    io::save_checkpoint(o.checkpoint, net, *opt, state);
    example::write_metrics(o.metrics, "autoencoder on " + std::filesystem::path(o.data).filename().string(), history,
                           names);
    write_grid(net, originals, dev, images_path);
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "autoencoder"}});
  std::printf("saved %s (checkpoint %s, metrics %s, images %s)\n", o.save.c_str(), o.checkpoint.c_str(),
              o.metrics.c_str(), images_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  example::Options options;
  options.epochs = 5;
  options.default_lr = 3e-3;  // as bench/autoencoder_torch.py
  std::int64_t latent = 32, grid = 10;
  std::string images = "autoencoder.png";
  CLI::App app{"Trains a convolutional autoencoder on Fashion-MNIST (or any MNIST-format data of 28 x 28 images).",
               "autoencoder"};
  example::add_options(app, options);
  app.get_option("--seed")->description("seeds initialisation and shuffling");
  app.add_option("--latent", latent, "numbers in the code of each image")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--images", images, "PNG rewritten after every epoch: test images above their reconstructions")->type_name("PATH")->capture_default_str();
  app.add_option("--grid", grid, "test images in the PNG")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options, latent, grid, images);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoencoder: %s\n", e.what());
    return 1;
  }
}
