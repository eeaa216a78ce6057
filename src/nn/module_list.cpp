#include "rumus/nn/module_list.hpp"

#include <fmt/format.h>

namespace rumus::nn {

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  if (!module) throw Error(fmt::format("ModuleList.push_back: expected a module, got a null pointer"));
  register_module(std::to_string(items_.size()), module);
  items_.push_back(std::move(module));
  return *this;
}

ModuleList& ModuleList::extend(const ModuleList& other) {
  // A copy first: extending a list by itself appends each module once.
  const std::vector<std::shared_ptr<Module>> added = other.items_;
  for (const auto& m : added) push_back(m);
  return *this;
}

const std::shared_ptr<Module>& ModuleList::ptr(std::int64_t index) const {
  const auto n = std::int64_t(items_.size());
  if (index < -n || index >= n)
    throw ValueError(fmt::format("ModuleList: index {} is out of range for a list of {} modules", index, n));
  return items_[std::size_t(index < 0 ? index + n : index)];
}

void ModuleList::throw_wrong_type(std::int64_t index, const std::string& actual) {
  throw Error(fmt::format("ModuleList.at: module {} is a {}, not the type asked for", index, actual));
}

}  // namespace rumus::nn
