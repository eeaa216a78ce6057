// Trains a small GPT (decoder-only transformer) to predict the next byte of a
// text, by default Debian's fortunes, then writes text of its own.
//
// The whole training loop is in this file, top to bottom: data and split,
// model, optimizer and schedule, resuming, then per epoch forward,
// backward(loss), optimizer step, validation and checkpoint, and at the end
// sampling with temperature and top-k. What is not about training (option
// parsing, the progress line, the metrics files) is in support/.
// bench/char_lm_torch.py is the same model, data split and batches in PyTorch.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/resume.hpp"
#include "support/run_settings.hpp"
#include "support/text.hpp"
#include "support/training_size.hpp"

using namespace rumus;

namespace {

struct LmOptions {
  std::int64_t context = 128, d_model = 256, heads = 4, layers = 4;
  double dropout = 0.1;
  std::int64_t steps_per_epoch = 500;
  std::string prompt = "The ";
  std::int64_t sample_length = 500, top_k = 40;
  double temperature = 0.8;
};

// What this run trains, stored in its checkpoints; a resume must match it.
// The sampling options (--prompt, --temperature, ...) are free to change.
io::RunSettings lm_settings(const example::Options& o, const LmOptions& lm, const optim::Optimizer& opt, double lr,
                            const std::string& text) {
  io::RunSettings s = example::training_settings(o, "gpt", opt, lr);
  s["context"] = std::to_string(lm.context);
  s["d_model"] = std::to_string(lm.d_model);
  s["heads"] = std::to_string(lm.heads);
  s["layers"] = std::to_string(lm.layers);
  s["dropout"] = fmt::format("{}", lm.dropout);
  s["steps_per_epoch"] = std::to_string(lm.steps_per_epoch);
  example::add_text_settings(s, text);
  return s;
}

// `length` bytes continuing `prompt`: each drawn from the softmax of the last
// logits / temperature, restricted to the top_k most likely.
std::string sample(nn::GPT& net, const std::string& prompt, std::int64_t length, double temperature,
                   std::int64_t top_k, std::uint64_t seed, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  std::vector<std::int64_t> tokens;
  for (char c : prompt) tokens.push_back(std::uint8_t(c));
  if (tokens.empty()) tokens.push_back('\n');
  std::mt19937_64 rng(seed);
  std::string out;
  for (std::int64_t i = 0; i < length; ++i) {
    const std::int64_t l = std::min<std::int64_t>(std::int64_t(tokens.size()), net.config.context);
    std::vector<std::int64_t> window(tokens.end() - l, tokens.end());
    Tensor logits = net(tensor(window, {1, l}).to(dev)).select(1, l - 1);
    const std::int64_t next = example::draw_byte(logits, temperature, top_k, rng);
    tokens.push_back(next);
    out.push_back(char(next));
  }
  net.train();
  return out;
}

int train(const example::Options& o, const LmOptions& lm) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation and dropout
  const Device dev = Device::parse(o.device);

  // Data: bytes; the last 5 % held out for validation (support/text.hpp).
  const std::string text = example::read_text(o.data, "char_lm");
  const example::TextSplit split = example::split_text(text, lm.context, o.batch_size);
  const std::string &train_text = split.train, &val_text = split.val;

  nn::GPT net({.vocab_size = 256,
               .context = lm.context,
               .d_model = lm.d_model,
               .num_heads = lm.heads,
               .num_layers = lm.layers,
               .dropout = lm.dropout});
  net.to(dev);

  const double lr = example::learning_rate(o);
  auto opt = example::make_optimizer(o.optimizer, net.parameters(), lr, o.weight_decay, o.nesterov);
  auto sched = example::make_schedule(o.schedule, *opt, lr, lm.steps_per_epoch * o.epochs);

  io::TrainingState state;  // epochs and steps completed
  state.settings = lm_settings(o, lm, *opt, lr, text);

  // Resuming: model, optimizer state, random generator and counters; a
  // checkpoint of a run with other settings is refused (support/resume.hpp).
  // The metrics name what a language model measures: validation, tokens.
  const example::MetricNames names{.split = "val", .split_title = "validation", .unit = "tokens"};
  std::vector<example::EpochMetrics> history = example::resume(o, net, *opt, *sched, state, names);
  auto count = [](std::int64_t n, const char* noun) { return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s"); };
  std::printf("char_lm: %lld parameters (%s, d_model %lld, %s, context %lld), %zu bytes of text "
              "(%zu held out), %s, lr %g, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), count(lm.layers, "layer").c_str(), (long long)lm.d_model,
              count(lm.heads, "head").c_str(), (long long)lm.context, text.size(), val_text.size(),
              o.optimizer.c_str(), lr, (long long)o.batch_size, o.threads, dev.str().c_str());
  std::fflush(stdout);

  optim::GradScaler scaler({.enabled = o.amp});  // passes through without --amp
  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), lm.steps_per_epoch,
                               {.unit = "tokens"});
    // The loss is summed on the device and read only when progress is shown:
    // reading it every step would make the host wait for each step before
    // recording the next (the PyTorch reference reads one every 100 steps).
    Tensor loss_sum;
    std::int64_t steps = 0, tokens = 0;
    for (; steps < lm.steps_per_epoch;) {
      auto [x, y] = example::batch_at(train_text, state.step, o.batch_size, lm.context, o.seed, dev);
      Tensor loss;
      {
        AutocastGuard amp(o.amp);  // --amp: matrix products in 16 bits, the loss in f32
        Tensor logits = net(x);
        loss = cross_entropy(logits.reshape({o.batch_size * lm.context, 256}), y.reshape({o.batch_size * lm.context}));
      }
      GradientStore grads = backward(scaler.scale(loss));
      scaler.step(*opt, grads);  // unscaled first; skipped on inf/nan
      scaler.update();
      sched->step();
      ++state.step;
      const Tensor l = loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + l : l;
      tokens += o.batch_size * lm.context;
      if (progress.due(++steps)) progress.advance(steps, tokens, loss_sum.item() / double(steps));
    }
    const double seconds = progress.seconds();
    progress.finish();

    const example::TextEvaluation val = example::evaluate_text(net, val_text, o.batch_size, lm.context, dev);
    const double train_loss = loss_sum.defined() ? loss_sum.item() / double(steps) : 0.0;
    history.push_back({int(epoch + 1), train_loss, val.loss, val.accuracy,
                       double(tokens) / seconds, seconds});
    std::printf("epoch %lld: train loss %.4f, val loss %.4f, val accuracy %.4f, %.0f tokens/s\n",
                (long long)epoch + 1, history.back().train_loss, val.loss, val.accuracy,
                history.back().per_sec);
    std::fflush(stdout);

    state.epoch = epoch + 1;
    io::save_checkpoint(o.checkpoint, net, *opt, state);
    example::write_metrics(o.metrics, "char_lm on " + std::filesystem::path(o.data).filename().string(), history,
                           names);
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "char_lm"}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), o.checkpoint.c_str(), o.metrics.c_str());
  std::printf("sample (temperature %g, top-k %lld):\n%s%s\n", lm.temperature, (long long)lm.top_k, lm.prompt.c_str(),
              sample(net, lm.prompt, lm.sample_length, lm.temperature, lm.top_k, o.seed, dev).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  example::Options options;
  options.data = example::kFortunes;
  options.epochs = 5;
  options.batch_size = 32;
  options.schedule = "cosine";
  options.default_lr = 1e-3;  // as bench/char_lm_torch.py
  LmOptions lm;
  CLI::App app{"Trains a small GPT on text (Debian's fortunes by default) and samples from it.", "char_lm"};
  example::add_options(app, options);
  app.get_option("--data")->description("a text file, or a directory of fortune files (1 GiB at most)")->type_name("PATH");
  app.get_option("--batch-size")->description("sequences per training step");
  app.remove_option(app.get_option("--limit"));  // --steps-per-epoch sets the length of an epoch
  app.add_option("--context", lm.context, "tokens (bytes) per sequence")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--d-model", lm.d_model, "width of the model")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--heads", lm.heads, "attention heads (divide --d-model)")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--layers", lm.layers, "transformer blocks")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--dropout", lm.dropout, "dropout probability")->type_name("P")->capture_default_str()->check(example::number_at_least(0));
  app.add_option("--steps-per-epoch", lm.steps_per_epoch, "training steps between validations")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--prompt", lm.prompt, "text the final sample continues")->type_name("TEXT")->capture_default_str();
  app.add_option("--sample-length", lm.sample_length, "bytes sampled at the end")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  app.add_option("--temperature", lm.temperature, "sampling temperature")->type_name("X")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--top-k", lm.top_k, "sample among the k most likely bytes (0: all)")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options, lm);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "char_lm: out of memory; a smaller --batch-size, --context, --d-model or --layers needs less\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_lm: %s\n", e.what());
    return 1;
  }
}
