#include "rumus/autograd/function.hpp"

namespace rumus::autograd {

Tensor apply(const CustomFunction& fn, const std::vector<Tensor>& inputs) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn.forward(inputs);
  }
  if (!out.defined()) throw Error(std::string(fn.name) + ": custom forward returned an undefined tensor");
  if (needs_grad(inputs)) {
    std::vector<SavedTensor> saved;
    for (const Tensor& t : inputs) saved.emplace_back(t);
    // The node keeps a detached alias of the output so it does not keep the output itself alive.
    out = out.detach();
    record(fn.name, inputs, out,
           [backward = fn.backward, saved = std::move(saved), result = SavedTensor(out.detach())](const Tensor& g) {
             std::vector<Tensor> ins;
             for (const auto& s : saved) ins.push_back(s.get());
             return backward(g, ins, result.get());
           });
  }
  return out;
}

}  // namespace rumus::autograd
