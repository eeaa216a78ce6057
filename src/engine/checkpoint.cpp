#include "rumus/autograd/checkpoint.hpp"

#include <fmt/format.h>

#include "rumus/autograd/autocast.hpp"
#include "rumus/autograd/engine.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/autograd/hooks.hpp"
#include "rumus/autograd/tape.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/generator.hpp"

namespace rumus::autograd {

namespace {
// The state the first run saw, restored for the recomputation.
struct RunState {
  std::uint64_t seed, offset;
  bool autocast;
  std::optional<DType> autocast_dtype;
};

// Sets grad mode, autocast and the default generator to a saved state for a
// scope, then puts back what was there.
class Replay {
 public:
  explicit Replay(const RunState& s)
      : seed_(default_generator().seed()),
        offset_(default_generator().offset()),
        grad_(grad_enabled()),
        autocast_(autocast_enabled()),
        dtype_(autocast_dtype_override()) {
    default_generator().set_state(s.seed, s.offset);
    set_grad_enabled(true);
    set_autocast_enabled(s.autocast);
    set_autocast_dtype_override(s.autocast_dtype);
  }
  ~Replay() {
    default_generator().set_state(seed_, offset_);
    set_grad_enabled(grad_);
    set_autocast_enabled(autocast_);
    set_autocast_dtype_override(dtype_);
  }
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

 private:
  std::uint64_t seed_, offset_;
  bool grad_, autocast_;
  std::optional<DType> dtype_;
};
}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  if (!fn) throw AutogradError("checkpoint: expected a function, got an empty std::function");
  if (!grad_enabled()) return fn(inputs);  // nothing will be differentiated: nothing to save
  const RunState state{default_generator().seed(), default_generator().offset(), autocast_enabled(),
                       autocast_dtype_override()};
  // The first run records, to learn which leaves fn reads; its entries are
  // dropped at once, and with them every intermediate tensor they saved.
  auto& tape = this_thread_tape();
  const std::size_t before = tape.size();
  Tensor out;
  std::vector<Tensor> leaves;
  {
    NoPruneGuard no_prune;  // entries past `before` are this run's own
    LeafCollector collect;
    out = fn(inputs);
    leaves = collect.leaves();
    tape.resize(before);
  }
  if (!out.defined()) throw AutogradError("checkpoint: the function returned an undefined tensor");
  Tensor result = out.detach();
  out = Tensor();
  // The node reads the explicit inputs, then the leaves fn reached that are not among them.
  std::vector<Tensor> node_inputs = inputs;
  for (const Tensor& l : leaves) {
    bool listed = false;
    for (const Tensor& in : inputs) listed = listed || (in.defined() && in.grad_id() == l.grad_id());
    if (!listed) node_inputs.push_back(l);
  }
  if (!needs_grad(node_inputs)) return result;
  std::vector<SavedTensor> saved(node_inputs.begin(), node_inputs.end());
  const std::size_t n_inputs = inputs.size();
  record("checkpoint", node_inputs, result, [fn, saved, n_inputs, state](const Tensor& g) {
    std::vector<Tensor> fresh;  // the explicit inputs, detached: the recomputation starts at them
    std::vector<Tensor> wrt;
    std::vector<std::size_t> slot;
    for (std::size_t i = 0; i < saved.size(); ++i) {
      const Tensor& t = saved[i].get();
      Tensor use = t;
      if (i < n_inputs && t.defined()) {
        use = t.detach();
        if (t.requires_grad()) use.requires_grad_();
        fresh.push_back(use);
      }
      if (use.defined() && use.requires_grad()) {
        wrt.push_back(use);
        slot.push_back(i);
      }
    }
    std::vector<Tensor> grads(saved.size());
    Tensor again;
    {
      Replay replay(state);
      again = fn(fresh);
    }
    if (!again.defined() || !again.requires_grad() || wrt.empty()) return grads;
    // The leaves fn read from outside (parameters) get their hooks once, in the outer pass.
    std::vector<GradId> outer_leaves;
    for (std::size_t k = 0; k < wrt.size(); ++k)
      if (slot[k] >= n_inputs) outer_leaves.push_back(wrt[k].grad_id());
    HooksDeferredGuard defer(std::move(outer_leaves));
    std::vector<Tensor> got = grad({again}, wrt, {.grad_outputs = {g}, .allow_unused = true});
    for (std::size_t k = 0; k < got.size(); ++k) grads[slot[k]] = got[k];
    return grads;
  });
  return result;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  if (!fn) throw AutogradError("checkpoint: expected a function, got an empty std::function");
  return checkpoint([fn](const std::vector<Tensor>& in) { return fn(in[0]); }, std::vector<Tensor>{input});
}

}  // namespace rumus::autograd
