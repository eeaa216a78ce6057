// Trains a byte-level LSTM language model (embedding, stacked LSTM, linear
// head) to predict the next byte of a text, by default Debian's fortunes, then
// writes text of its own, carrying the LSTM's state from byte to byte.
//
// The whole training loop is in this file, top to bottom: data and split,
// model, optimizer and schedule, resuming, then per epoch forward,
// backward(loss), gradient clipping, optimizer step, validation and
// checkpoint, and at the end sampling with temperature. What is not about
// training (option parsing, the progress line, the metrics files, reading and
// batching the text, as char_lm does) is in support/.
// bench/seq_lstm_torch.py is the same model, data split and batches in PyTorch.
// Run with --help for the options.
#include <rumus/rumus.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <new>
#include <random>
#include <string>
#include <tuple>
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

struct LstmOptions {
  std::int64_t context = 64, embedding = 64, hidden = 256, layers = 2;
  double dropout = 0.1, clip = 1.0;
  std::int64_t steps_per_epoch = 500;
  std::string prompt = "The ";
  std::int64_t sample_length = 300, top_k = 0;
  double temperature = 0.8;
};

// Bytes -> Embedding(256, E) -> LSTM(E, hidden, layers, batch_first, dropout
// between layers) -> Linear(hidden, 256): logits of the next byte at every
// position. The names are torch.nn's (embedding.weight, lstm.weight_ih_l0,
// head.bias, ...), so bench/seq_lstm_torch.py's module loads this state dict.
struct LstmLm : nn::Module {
  nn::Embedding embedding;
  nn::LSTM lstm;
  nn::Linear head;
  using State = std::tuple<Tensor, Tensor>;  // (h, c), each (layers, N, hidden)

  explicit LstmLm(const LstmOptions& o)
      : embedding(256, o.embedding),
        lstm(nn::RNNOptions{.input_size = o.embedding,
                            .hidden_size = o.hidden,
                            .num_layers = o.layers,
                            .batch_first = true,
                            .dropout = o.dropout}),
        head(o.hidden, 256) {
    register_modules({{"embedding", embedding}, {"lstm", lstm}, {"head", head}});
  }
  // (N, L) bytes -> (N, L, 256) logits; the state starts at zero.
  Tensor forward(const Tensor& x) override { return head(lstm(embedding(x))); }
  // The same from `state` (undefined tensors: zeros), returning the state after the last byte.
  std::tuple<Tensor, State> forward(const Tensor& x, const State& state) {
    auto [out, next] = lstm.forward(embedding(x), state);
    return {head(out), next};
  }
  std::string type_name() const override { return "LstmLm"; }
};

// What this run trains, stored in its checkpoints; a resume must match it.
// The sampling options (--prompt, --temperature, ...) are free to change.
io::RunSettings lstm_settings(const example::Options& o, const LstmOptions& m, const optim::Optimizer& opt, double lr,
                              const std::string& text) {
  io::RunSettings s = example::training_settings(o, "lstm", opt, lr);
  s["context"] = std::to_string(m.context);
  s["embedding"] = std::to_string(m.embedding);
  s["hidden"] = std::to_string(m.hidden);
  s["layers"] = std::to_string(m.layers);
  s["dropout"] = fmt::format("{}", m.dropout);
  s["clip"] = fmt::format("{}", m.clip);
  s["steps_per_epoch"] = std::to_string(m.steps_per_epoch);
  example::add_text_settings(s, text);
  return s;
}

// `length` bytes continuing `prompt`. The prompt is read in one pass; then
// each byte is drawn from the softmax of the logits / temperature and fed
// back alone, with the LSTM's (h, c) carried over: one step per byte, however
// long the sample, where a transformer rereads its whole window.
std::string sample(LstmLm& net, const std::string& prompt, std::int64_t length, double temperature,
                   std::int64_t top_k, std::uint64_t seed, Device dev) {
  NoGradGuard no_grad;
  net.eval();
  std::vector<std::int64_t> tokens;
  for (char c : prompt) tokens.push_back(std::uint8_t(c));
  if (tokens.empty()) tokens.push_back('\n');
  std::mt19937_64 rng(seed);
  std::string out;
  LstmLm::State state;  // zeros
  Tensor input = tensor(tokens, {1, std::int64_t(tokens.size())}).to(dev);
  for (std::int64_t i = 0; i < length; ++i) {
    auto [logits, next_state] = net.forward(input, state);
    state = next_state;
    const std::int64_t next = example::draw_byte(logits.select(1, logits.size(1) - 1), temperature, top_k, rng);
    out.push_back(char(next));
    input = tensor(std::vector<std::int64_t>{next}, {1, 1}).to(dev);
  }
  net.train();
  return out;
}

int train(const example::Options& o, const LstmOptions& m) {
  set_num_threads(o.threads);
  manual_seed(o.seed);  // initialisation and dropout
  const Device dev = Device::parse(o.device);

  // Data: bytes; the last 5 % held out for validation; batches of random
  // windows drawn from (seed, step, row), as char_lm's (support/text.hpp).
  const std::string text = example::read_text(o.data, "seq_lstm");
  const example::TextSplit split = example::split_text(text, m.context, o.batch_size);
  const std::string &train_text = split.train, &val_text = split.val;

  LstmLm net(m);
  net.to(dev);

  const double lr = example::learning_rate(o);
  const std::vector<Tensor> params = net.parameters();
  auto opt = example::make_optimizer(o.optimizer, params, lr, o.weight_decay, o.nesterov);
  auto sched = example::make_schedule(o.schedule, *opt, lr, m.steps_per_epoch * o.epochs);

  io::TrainingState state;  // epochs and steps completed
  state.settings = lstm_settings(o, m, *opt, lr, text);

  // Resuming: model, optimizer state, random generator and counters; a
  // checkpoint of a run with other settings is refused (support/resume.hpp).
  // The metrics name what a language model measures: validation, tokens.
  const example::MetricNames names{.split = "val", .split_title = "validation", .unit = "tokens"};
  std::vector<example::EpochMetrics> history = example::resume(o, net, *opt, *sched, state, names);
  std::printf("seq_lstm: %lld parameters (%lld layer%s, embedding %lld, hidden %lld, context %lld), %zu bytes of "
              "text (%zu held out), %s, lr %g, batch %lld, %d threads, device %s\n",
              (long long)net.num_parameters(), (long long)m.layers, m.layers == 1 ? "" : "s", (long long)m.embedding,
              (long long)m.hidden, (long long)m.context, text.size(), val_text.size(), o.optimizer.c_str(), lr,
              (long long)o.batch_size, o.threads, dev.str().c_str());
  std::fflush(stdout);

  optim::GradScaler scaler({.enabled = o.amp});  // passes through without --amp
  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    example::Progress progress(fmt::format("epoch {}/{}", epoch + 1, o.epochs), m.steps_per_epoch,
                               {.unit = "tokens"});
    // The loss is summed on the device and read only when progress is shown.
    Tensor loss_sum;
    std::int64_t steps = 0, tokens = 0;
    for (; steps < m.steps_per_epoch;) {
      auto [x, y] = example::batch_at(train_text, state.step, o.batch_size, m.context, o.seed, dev);
      Tensor loss;
      {
        AutocastGuard amp(o.amp);  // --amp: matrix products in 16 bits, the loss in f32
        Tensor logits = net(x);    // every window starts from a zero state
        loss = cross_entropy(logits.reshape({o.batch_size * m.context, 256}), y.reshape({o.batch_size * m.context}));
      }
      GradientStore grads = backward(scaler.scale(loss));  // through all `context` time steps
      // Clipping the gradients' joint norm keeps one steep step of the
      // recurrence from throwing the weights far off (unscaled first).
      if (m.clip > 0) {
        scaler.unscale_(*opt, grads);
        optim::clip_grad_norm_(grads, params, m.clip);
      }
      scaler.step(*opt, grads);  // skipped on inf/nan
      scaler.update();
      sched->step();
      ++state.step;
      const Tensor l = loss.detach();
      loss_sum = loss_sum.defined() ? loss_sum + l : l;
      tokens += o.batch_size * m.context;
      if (progress.due(++steps)) progress.advance(steps, tokens, loss_sum.item() / double(steps));
    }
    const double seconds = progress.seconds();
    progress.finish();

    const example::TextEvaluation val = example::evaluate_text(net, val_text, o.batch_size, m.context, dev);
    const double train_loss = loss_sum.defined() ? loss_sum.item() / double(steps) : 0.0;
    history.push_back({int(epoch + 1), train_loss, val.loss, val.accuracy, double(tokens) / seconds, seconds});
    std::printf("epoch %lld: train loss %.4f, val loss %.4f, val accuracy %.4f, %.0f tokens/s\n",
                (long long)epoch + 1, history.back().train_loss, val.loss, val.accuracy, history.back().per_sec);
    std::fflush(stdout);

    state.epoch = epoch + 1;
    io::save_checkpoint(o.checkpoint, net, *opt, state);
    example::write_metrics(o.metrics, "seq_lstm on " + std::filesystem::path(o.data).filename().string(), history,
                           names);
  }

  io::save_safetensors(net.state_dict(), o.save, {{"model", "seq_lstm"}});
  std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), o.checkpoint.c_str(), o.metrics.c_str());
  std::printf("sample (temperature %g, top-k %lld):\n%s%s\n", m.temperature, (long long)m.top_k, m.prompt.c_str(),
              sample(net, m.prompt, m.sample_length, m.temperature, m.top_k, o.seed, dev).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  example::Options options;
  options.data = example::kFortunes;
  options.epochs = 3;
  options.batch_size = 32;
  options.schedule = "cosine";
  options.default_lr = 3e-3;  // as bench/seq_lstm_torch.py
  LstmOptions m;
  CLI::App app{"Trains a byte-level LSTM on text (Debian's fortunes by default) and samples from it.", "seq_lstm"};
  example::add_options(app, options);
  app.get_option("--data")->description("a text file, or a directory of fortune files (1 GiB at most)")->type_name("PATH");
  app.get_option("--batch-size")->description("sequences per training step");
  app.remove_option(app.get_option("--limit"));  // --steps-per-epoch sets the length of an epoch
  app.add_option("--context", m.context, "bytes per training sequence (time steps backpropagated through)")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--embedding", m.embedding, "width of the byte embedding")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--hidden", m.hidden, "LSTM hidden size")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--layers", m.layers, "stacked LSTM layers")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--dropout", m.dropout, "dropout between LSTM layers")->type_name("P")->capture_default_str()->check(example::number_at_least(0));
  app.add_option("--clip", m.clip, "largest norm of all gradients together (0: no clipping)")->type_name("X")->capture_default_str()->check(example::number_at_least(0));
  app.add_option("--steps-per-epoch", m.steps_per_epoch, "training steps between validations")->type_name("N")->capture_default_str()->check(example::whole_number(1));
  app.add_option("--prompt", m.prompt, "text the final sample continues")->type_name("TEXT")->capture_default_str();
  app.add_option("--sample-length", m.sample_length, "bytes sampled at the end")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  app.add_option("--temperature", m.temperature, "sampling temperature")->type_name("X")->capture_default_str()->check(example::number_at_least(0, true));
  app.add_option("--top-k", m.top_k, "sample among the k most likely bytes (0: all)")->type_name("N")->capture_default_str()->check(example::whole_number(0));
  CLI11_PARSE(app, argc, argv);
  try {
    return train(options, m);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "seq_lstm: out of memory; a smaller --batch-size, --context, --hidden or --layers needs less\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "seq_lstm: %s\n", e.what());
    return 1;
  }
}
