#pragma once
// torch.nn.ModuleList: submodules held in a list, named "0", "1", ... in the
// state dict ("0.weight"); it has no forward of its own.
#include <cstddef>
#include <memory>
#include <type_traits>
#include <vector>

#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class ModuleList : public Module {
 public:
  using iterator = std::vector<std::shared_ptr<Module>>::const_iterator;

  ModuleList() = default;
  // ModuleList layers(Linear(2, 3), ReLU(), Linear(3, 1));
  template <class... M>
    requires(sizeof...(M) > 0 && (std::is_base_of_v<Module, std::decay_t<M>> && ...))
  explicit ModuleList(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }
  ModuleList& push_back(std::shared_ptr<Module> module);
  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  ModuleList& push_back(M&& module) {
    return push_back(std::make_shared<std::decay_t<M>>(std::forward<M>(module)));
  }
  // Appends every module of `other` (shared, as PyTorch's extend).
  ModuleList& extend(const ModuleList& other);

  std::string type_name() const override { return "ModuleList"; }
  std::size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  // Negative indices count from the end, as in Python.
  Module& operator[](std::int64_t index) const { return *ptr(index); }
  const std::shared_ptr<Module>& ptr(std::int64_t index) const;
  // The module at `index` as its own type (libtorch's list->at<Linear>(0)).
  template <class M>
  M& at(std::int64_t index) const {
    return cast<M>(*ptr(index), index);
  }
  iterator begin() const { return items_.begin(); }
  iterator end() const { return items_.end(); }

 private:
  template <class M>
  static M& cast(Module& m, std::int64_t index) {
    if (auto* typed = dynamic_cast<M*>(&m)) return *typed;
    throw_wrong_type(index, m.type_name());
  }
  [[noreturn]] static void throw_wrong_type(std::int64_t index, const std::string& actual);
  std::vector<std::shared_ptr<Module>> items_;
};

}  // namespace rumus::nn

RUMUS_API_END
