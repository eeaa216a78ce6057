// The settings that give a training run its meaning. Every checkpoint stores
// them, and --resume refuses a command line that changes one: resuming with
// another model, optimizer, learning rate, batch size, --limit, seed or data
// set would silently continue a different run than the checkpoint's.
//
// Stored (they change what is trained):
//   model, optimizer, lr, weight_decay, nesterov (sgd only), schedule,
//   batch_size, limit, seed, and the training data as the model sees it: its
//   example count and the normalisation mean and std fitted to it.
// Not stored (free to change on resume):
//   --epochs     training longer is what resuming is for (the schedule is then
//                laid over the new total of epochs);
//   --threads    results do not depend on the thread count;
//   --device     the same computation on other hardware;
//   --amp        the same computation at another precision (the loss scale
//                starts again from its initial value);
//   --data       the path may move: the data itself is checked by its count
//                and normalisation;
//   --save, --checkpoint, --resume, --metrics: where files go.
#pragma once
#include <rumus/rumus.hpp>

#include <cstdint>
#include <string>

#include "cli.hpp"

namespace example {

inline rumus::io::RunSettings run_settings(const Options& o, const std::string& model,
                                           const rumus::optim::Optimizer& optimizer, double lr,
                                           std::int64_t train_examples, const rumus::data::Normalize& norm) {
  // Numbers as the shortest text that reads back to the same double.
  rumus::io::RunSettings s{{"model", model},
                           {"optimizer", o.optimizer},
                           {"lr", fmt::format("{}", lr)},
                           {"weight_decay", fmt::format("{}", optimizer.param_groups().front().weight_decay)},
                           {"schedule", o.schedule},
                           {"batch_size", std::to_string(o.batch_size)},
                           {"limit", std::to_string(o.limit)},
                           {"seed", std::to_string(o.seed)},
                           {"train_examples", std::to_string(train_examples)},
                           {"normalize_mean", fmt::format("{}", norm.mean)},
                           {"normalize_std", fmt::format("{}", norm.std)}};
  if (o.optimizer == "sgd") s["nesterov"] = o.nesterov ? "1" : "0";
  return s;
}

}  // namespace example
