#include "rumus/nn/module_dict.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rumus::nn {

ModuleDict::ModuleDict(std::vector<Item> items) {
  for (auto& [key, module] : items) insert(key, std::move(module));
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  if (!module) throw Error(fmt::format("ModuleDict.insert: expected a module for key '{}', got a null pointer", key));
  for (auto& [k, m] : items_)
    if (k == key) {
      replace_module(key, module);
      m = std::move(module);
      return *this;
    }
  register_module(key, module);
  items_.emplace_back(key, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (auto& [k, m] : items_)
    if (k == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDict::ptr(const std::string& key) const {
  for (auto& [k, m] : items_)
    if (k == key) return m;
  throw ValueError(fmt::format("ModuleDict: expected one of the keys [{}], got '{}'", fmt::join(keys(), ", "), key));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (auto& [k, m] : items_) out.push_back(k);
  return out;
}

std::vector<std::shared_ptr<Module>> ModuleDict::values() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [k, m] : items_) out.push_back(m);
  return out;
}

void ModuleDict::throw_wrong_type(const std::string& key, const std::string& actual) {
  throw Error(fmt::format("ModuleDict.at: module '{}' is a {}, not the type asked for", key, actual));
}

}  // namespace rumus::nn
