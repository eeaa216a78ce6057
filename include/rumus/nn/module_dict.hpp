#pragma once
// torch.nn.ModuleDict: submodules under string keys, in insertion order; the
// keys are the state-dict names ("encoder.weight"). It has no forward of its own.
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rumus/nn/module.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

class ModuleDict : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  using iterator = std::vector<Item>::const_iterator;

  ModuleDict() = default;
  explicit ModuleDict(std::vector<Item> items);
  // A key already present gets the new module in its place (as PyTorch's
  // dict[key] = module and libtorch's insert), keeping its position.
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  template <class M>
    requires std::is_base_of_v<Module, std::decay_t<M>>
  ModuleDict& insert(const std::string& key, M&& module) {
    return insert(key, std::make_shared<std::decay_t<M>>(std::forward<M>(module)));
  }

  std::string type_name() const override { return "ModuleDict"; }
  std::size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  bool contains(const std::string& key) const;
  Module& operator[](const std::string& key) const { return *ptr(key); }
  const std::shared_ptr<Module>& ptr(const std::string& key) const;
  template <class M>
  M& at(const std::string& key) const {
    Module& m = *ptr(key);
    if (auto* typed = dynamic_cast<M*>(&m)) return *typed;
    throw_wrong_type(key, m.type_name());
  }
  std::vector<std::string> keys() const;
  std::vector<std::shared_ptr<Module>> values() const;
  const std::vector<Item>& items() const { return items_; }
  iterator begin() const { return items_.begin(); }
  iterator end() const { return items_.end(); }

 private:
  [[noreturn]] static void throw_wrong_type(const std::string& key, const std::string& actual);
  std::vector<Item> items_;
};

}  // namespace rumus::nn

RUMUS_API_END
