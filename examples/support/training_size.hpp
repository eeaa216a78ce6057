// How many optimizer steps an epoch takes, or an error when a run would train
// nothing: a run that exits 0 after zero steps (and writes "train loss 0",
// or NaN for an empty data set) looks like a success but is not one.
#pragma once
#include <rumus/rumus.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace example {

// Whole batches only (the trainers drop an epoch's last partial batch), over
// the first `limit` examples of each epoch (0: all of them).
inline std::int64_t steps_per_epoch(std::int64_t train_examples, std::int64_t batch_size, std::int64_t limit,
                                    const std::string& data) {
  if (train_examples == 0)
    throw rumus::ValueError(fmt::format("the training set in '{}' has no examples: nothing to train on", data));
  if (batch_size > train_examples)
    throw rumus::ValueError(fmt::format("--batch-size {} is larger than the {} training examples in '{}', so not one "
                                        "whole batch: nothing would be trained; expected --batch-size <= {}",
                                        batch_size, train_examples, data, train_examples));
  if (limit != 0 && limit < batch_size)
    throw rumus::ValueError(fmt::format("--limit {} is smaller than --batch-size {}, so not one whole batch: nothing "
                                        "would be trained; expected --limit >= {} (or 0 for all examples)",
                                        limit, batch_size, batch_size));
  const std::int64_t used = limit != 0 ? std::min(limit, train_examples) : train_examples;
  return used / batch_size;
}

// Evaluation averages over the test set: an empty one would report NaN.
inline void check_test_set(std::int64_t test_examples, const std::string& data) {
  if (test_examples == 0)
    throw rumus::ValueError(fmt::format("the test set in '{}' has no examples: nothing to evaluate", data));
}

// A resumed run must have epochs left to train.
inline void check_epochs_left(std::int64_t epochs_done, std::int64_t epochs, const std::string& checkpoint) {
  if (epochs_done >= epochs)
    throw rumus::ValueError(fmt::format("--epochs {}, but '{}' has already completed {} epoch{}: nothing left to "
                                        "train; expected --epochs > {}",
                                        epochs, checkpoint, epochs_done, epochs_done == 1 ? "" : "s", epochs_done));
}

}  // namespace example
