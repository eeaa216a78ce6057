#pragma once
// Activation checkpointing: trade compute for memory.
#include <functional>
#include <vector>

#include "rumus/core/export.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus::autograd {

// torch.utils.checkpoint.checkpoint: runs fn(inputs) and keeps none of its
// intermediate tensors, only `inputs`; backward runs fn again, with grad on,
// and differentiates that. The parameters fn reads (a module's weights) get
// their gradients as without checkpointing, bit for bit: they are found while
// the first run records. Random ops drawing from the default generator
// (dropout, rand) draw the same numbers again, and autocast is as it was.
// The checkpoint's backward cannot be differentiated again (create_graph).
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs);
// For a function of one tensor, such as a module's forward.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace rumus::autograd

RUMUS_API_END
