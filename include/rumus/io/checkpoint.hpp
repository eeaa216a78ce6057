#pragma once
// Checkpoints: one safetensors file with the model ("model.*"), the optimizer
// ("optimizer.*"), and in its metadata the epoch, step and generator state,
// so a resumed run draws the same random numbers as an uninterrupted one,
// and the run's settings, so a resume cannot silently change what it trains.
#include <cstdint>
#include <map>
#include <string>

#include "rumus/core/generator.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::io {

// What a run was started with that a resumed run must not change (model,
// optimizer and its hyper-parameters, data, batch size...), as text: stored
// in the metadata as "settings.<name>". The trainer decides what belongs here.
using RunSettings = std::map<std::string, std::string>;

struct TrainingState {
  std::int64_t epoch = 0;  // epochs completed
  std::int64_t step = 0;   // optimizer steps completed
  RunSettings settings{};  // an initializer each, so TrainingState{.epoch = e} is warning-free
};

// Atomic: an existing checkpoint at `path` stays intact if anything fails.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     TrainingState state, const Generator& generator = default_generator());
// Restores model, optimizer and generator; a mismatch (names, shapes, dtypes,
// optimizer type) or a malformed counter (epoch, step: whole numbers in
// [0, 2^63)) is an IoError naming the file, checked before anything changes.
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              Generator& generator = default_generator());
// The same, and first the checkpoint's settings must equal `expected`:
// otherwise an IoError naming the file and each setting that differs, is
// missing or is extra, with the checkpoint's value and the given one.
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              const RunSettings& expected, Generator& generator = default_generator());

}  // namespace rumus::io

RUMUS_API_END
