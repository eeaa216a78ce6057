#pragma once
// Modules built without their parameters' memory: what PyTorch does with the
// meta device and FSDP's param_init_fn, done here by recording.
//
// While a DeferredInit lives on a thread, empty() makes tensors without
// bytes; Module::register_parameter marks such a parameter deferred (one made
// with values, such as ones() or randn(), keeps them), and the nn::init functions record
// how they would have filled it instead of filling it: a constant, or a
// uniform or normal draw as the generator's seed and offset (the generator
// advances as if it had drawn, so everything built afterwards gets the numbers
// an eager build gets). Other init functions (orthogonal_, eye_, dirac_,
// trunc_normal_) and inits of a part of a parameter fill it for real, once.
//
// Then materialize(module) gives every parameter its bytes and values, and
// fsdp::shard fills each rank's shard alone: element i of a draw is the
// generator's counter offset + i, so rows [a, b) are drawn from offset + a *
// row size and hold exactly what the full tensor would have held there.
// Writing a deferred parameter any other way raises an Error.
#include <cstdint>

#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class Module;

class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;
  // Whether one is alive on this thread.
  static bool active();

 private:
  bool previous_;
};

// True for a tensor whose storage is a deferred parameter's, not yet materialised.
bool is_deferred(const Tensor& t);
// Rows [begin, end) along dim 0 of a deferred tensor (of the whole tensor when
// it has no dims) as a new tensor, without materialising the rest.
Tensor deferred_rows(const Tensor& t, std::int64_t begin, std::int64_t end);
// Gives every deferred parameter of `module` (and its children) its bytes and values.
void materialize(Module& module);
// The same for one tensor's storage; a no-op when it is not deferred.
void materialize(const Tensor& t);

namespace detail {
// nn::init's side: record a fill of the whole storage of `t` and return true,
// or return false after materialising `t` so that the caller fills it itself.
bool defer_constant(const Tensor& t, double value);
// kind 0: uniform(a, b), 1: normal(a, b), drawn with `gen` (null: the default generator).
bool defer_draw(const Tensor& t, int kind, double a, double b, Generator* gen);
// Module's side: marks a new parameter that empty() made without bytes.
void defer_parameter(const Tensor& t);
// A new owner (FSDP's shards) fills it from now on: no longer deferred.
void forget_deferred(const Tensor& t);
}  // namespace detail

}  // namespace rumus::nn

RUMUS_API_END
