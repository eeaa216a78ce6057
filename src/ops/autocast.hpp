#pragma once
// Ops call detail::autocast(op, inputs...) first: inside an autocast scope it
// returns the inputs cast as the op's policy (src/ops/autocast.cpp) says,
// otherwise the inputs themselves.
#include <array>
#include <string_view>

#include "rumus/autograd/autocast.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/ops/autocast_policy.hpp"

namespace rumus::detail {

Tensor autocast_cast(AutocastPolicy policy, std::string_view op, const Tensor& t, const Device& device);
// The device whose autocast dtype applies: the first defined floating input's.
Device autocast_device(std::initializer_list<const Tensor*> ts);

template <class... T>
std::array<Tensor, sizeof...(T)> autocast(std::string_view op, const T&... ts) {
  if (!autocast_enabled()) return {ts...};
  const AutocastPolicy policy = autocast_policy(op);
  const Device device = autocast_device({&ts...});
  return {autocast_cast(policy, op, ts, device)...};
}

}  // namespace rumus::detail
