#pragma once
#include <memory>
#include <type_traits>

#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// Runs its children in order; they are named "0", "1", ... in the state dict.
class Sequential : public Module {
 public:
  Sequential() = default;
  // Sequential seq(Linear(784, 512), ReLU(), Linear(512, 10));
  template <class... M>
    requires(sizeof...(M) > 0 && (std::is_base_of_v<Module, std::decay_t<M>> && ...))
  explicit Sequential(M&&... modules) {
    (push_back(std::make_shared<std::decay_t<M>>(std::forward<M>(modules))), ...);
  }
  Sequential& push_back(std::shared_ptr<Module> module);
  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  Sequential& push_back(M&& module) {
    return push_back(std::make_shared<std::decay_t<M>>(std::forward<M>(module)));
  }

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  std::size_t size() const { return layers_.size(); }
  Module& operator[](std::size_t i) const { return *layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace rumus::nn

RUMUS_API_END
