// The model and optimizer the checkpoint fuzz target loads into, shared with
// the program that writes its seed corpus so the seeds match them.
#pragma once
#include <rumus/rumus.hpp>

namespace rumus_fuzz {

struct FuzzNet : rumus::nn::Module {
  FuzzNet() {
    register_parameter("w", rumus::zeros({3, 2}));
    register_parameter("b", rumus::zeros({2}));
  }
};

}  // namespace rumus_fuzz
