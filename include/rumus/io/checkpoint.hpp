#pragma once
// Checkpoints: one safetensors file with the model ("model.*"), the optimizer
// ("optimizer.*"), and in its metadata the epoch, step and generator state,
// so a resumed run draws the same random numbers as an uninterrupted one.
#include <cstdint>
#include <string>

#include "rumus/core/generator.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/optim/optimizer.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::io {

struct TrainingState {
  std::int64_t epoch = 0;  // epochs completed
  std::int64_t step = 0;   // optimizer steps completed
};

// Atomic: an existing checkpoint at `path` stays intact if anything fails.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     TrainingState state, const Generator& generator = default_generator());
// Restores model, optimizer and generator; a mismatch (names, shapes, dtypes,
// optimizer type) is an IoError naming the file.
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                              Generator& generator = default_generator());

}  // namespace rumus::io

RUMUS_API_END
