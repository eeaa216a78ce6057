// The settings that give a training run its meaning. Every checkpoint stores
// them, and --resume refuses a command line that changes one: resuming with
// another model, optimizer, learning rate, batch size, --limit, seed or data
// set would silently continue a different run than the checkpoint's.
//
// Stored by every trainer (training_settings):
//   model, optimizer, lr, weight_decay, nesterov (sgd only), schedule,
//   batch_size, seed.
// Stored by mnist_mlp and mnist_cnn besides (run_settings): limit, and the
//   training data as the model sees it: its example count and the
//   normalisation mean and std fitted to it. char_lm and seq_lstm add their
//   own (the model's shape, dropout, steps per epoch, seq_lstm's clipping, and
//   the text's size and checksum); autoencoder its code size, --limit and the
//   training set's example count.
// Not stored (free to change on resume):
//   --epochs     training longer is what resuming is for (the schedule is then
//                laid over the new total of epochs);
//   --threads    results do not depend on the thread count;
//   --device     the same computation on other hardware;
//   --amp        the same computation at another precision (the loss scale
//                starts again from its initial value);
//   --data       the path may move: the data itself is checked by its count
//                and normalisation (char_lm, seq_lstm: its size and checksum);
//   --save, --checkpoint, --resume, --metrics: where files go.
#pragma once
#include <rumus/rumus.hpp>

#include <cstdint>
#include <string>

#include "cli.hpp"

namespace example {

// What every trainer stores: the model's name, optimizer, schedule, batch size and seed.
inline rumus::io::RunSettings training_settings(const Options& o, const std::string& model,
                                                const rumus::optim::Optimizer& optimizer, double lr) {
  // Numbers as the shortest text that reads back to the same double.
  rumus::io::RunSettings s{{"model", model},
                           {"optimizer", o.optimizer},
                           {"lr", fmt::format("{}", lr)},
                           {"weight_decay", fmt::format("{}", optimizer.param_groups().front().weight_decay)},
                           {"schedule", o.schedule},
                           {"batch_size", std::to_string(o.batch_size)},
                           {"seed", std::to_string(o.seed)}};
  if (o.optimizer == "sgd") s["nesterov"] = o.nesterov ? "1" : "0";
  return s;
}

// mnist_mlp's and mnist_cnn's: those, --limit, and the training set as the model sees it.
inline rumus::io::RunSettings run_settings(const Options& o, const std::string& model,
                                           const rumus::optim::Optimizer& optimizer, double lr,
                                           std::int64_t train_examples, const rumus::data::Normalize& norm) {
  rumus::io::RunSettings s = training_settings(o, model, optimizer, lr);
  s["limit"] = std::to_string(o.limit);
  s["train_examples"] = std::to_string(train_examples);
  s["normalize_mean"] = fmt::format("{}", norm.mean);
  s["normalize_std"] = fmt::format("{}", norm.std);
  return s;
}

}  // namespace example
