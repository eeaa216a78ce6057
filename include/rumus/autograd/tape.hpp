#pragma once
// The per-thread tape: one entry per recorded op, replayed backwards by the engine.
#include <functional>
#include <initializer_list>
#include <vector>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::autograd {

// A tensor kept for backward together with its storage version at save time.
// Reading it after an in-place write throws (the engine names the op).
// Each one is counted against its tensor, so the tape can tell the
// references it holds itself from those of tensors outside it.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  SavedTensor(const SavedTensor& other);
  SavedTensor(SavedTensor&& other) noexcept;
  SavedTensor& operator=(SavedTensor other) noexcept;
  ~SavedTensor();
  const Tensor& get() const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  std::uint64_t version_ = 0;
};

// Thrown by SavedTensor::get; the engine adds the op's name.
class VersionError : public AutogradError {
 public:
  VersionError(std::uint64_t saved, std::uint64_t now);
  std::uint64_t saved, now;
};

// Gradient of the output -> one gradient per input (undefined = none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// Of a view that picks part of its input (select, slice): the same view of a
// tensor shaped like the input. The node's BackwardFn must return a fresh
// tensor (zeros, the gradient copied into the part); once the engine holds
// that buffer, the gradients of further views of the same input are added
// into their parts in place (three views of one tensor: one fill and three
// slice-sized passes instead of three fills, three copies and two
// whole-size adds).
using EmbedFn = std::function<Tensor(const Tensor&)>;

struct Node {
  const char* name;
  std::vector<GradId> inputs;
  std::vector<bool> input_needs_grad;
  std::vector<Shape> input_shapes;
  GradId output;
  std::weak_ptr<TensorImpl> output_alive;  // lets the tape drop graphs nobody can reach
  BackwardFn backward;
  EmbedFn embed;  // set for views of part of their one input
  // The backward is written with ops on graph-connected tensors, so under
  // create_graph it records its own graph (differentiable to any order).
  bool differentiable = false;
};

// Whether a node's backward can be differentiated again (Node::differentiable).
enum class Backward { once, differentiable };

// True when grad mode is on and any input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `output = name(inputs)` and marks output as requiring grad.
// `kind`: Backward::differentiable when `backward` computes with ops on
// tensors saved with their graph (not detached), so that create_graph can
// differentiate it again; Backward::once makes create_graph refuse the op.
void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward,
            EmbedFn embed = {}, Backward kind = Backward::once);

// Entries on this thread's tape (for tests and diagnostics).
std::size_t tape_size();
// Bytes of the storages that this thread's saved tensors hold (views counted
// by their whole storage).
std::size_t tape_saved_bytes();
void clear_tape();

// While one lives on this thread, record() collects the leaves (tensors that
// require grad and no op recorded) that recorded ops read, once each: what
// activation checkpointing must differentiate besides its explicit inputs.
class LeafCollector {
 public:
  LeafCollector();
  ~LeafCollector();
  LeafCollector(const LeafCollector&) = delete;
  LeafCollector& operator=(const LeafCollector&) = delete;
  const std::vector<Tensor>& leaves() const { return leaves_; }
  void add(const Tensor& t);

 private:
  LeafCollector* outer_;
  std::vector<Tensor> leaves_;
};

// Internal: the engine's access to the tape.
std::vector<Node>& this_thread_tape();
// While one lives, record() does not prune: a backward that records
// (create_graph) appends to the tape it is walking by index.
class NoPruneGuard {
 public:
  NoPruneGuard();
  ~NoPruneGuard();
  NoPruneGuard(const NoPruneGuard&) = delete;
  NoPruneGuard& operator=(const NoPruneGuard&) = delete;
};

}  // namespace rumus::autograd

RUMUS_API_END
