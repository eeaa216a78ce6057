#pragma once
// Automatic mixed precision (torch.autocast): a per-thread scope inside which
// ops cast their floating inputs by a policy (src/ops/autocast.cpp): matrix
// products and convolutions to a 16-bit dtype, reductions, softmax, losses
// and normalisations to f32. The casts are recorded ops, so gradients reach
// f32 parameters as f32. The backward pass runs with autocast off, in the
// dtypes the forward chose.
#include <optional>
#include <utility>

#include "rumus/core/device.hpp"
#include "rumus/core/dtype.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

bool autocast_enabled();
void set_autocast_enabled(bool on);

// The dtype set by the innermost scope, if any.
std::optional<DType> autocast_dtype_override();
// Throws DTypeError unless `dtype` is f16 or bf16 (or unset).
void set_autocast_dtype_override(std::optional<DType> dtype);

// The 16-bit dtype autocast casts to on `device`: the scope's dtype, else
// f16 on GPUs and bf16 on the CPU (as torch.autocast's device defaults).
DType autocast_dtype(Device device);

// Enables (or, with enabled = false, disables) autocast for its scope, and
// restores the previous state on exit; nestable.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true);
  explicit AutocastGuard(DType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  std::optional<DType> prev_dtype_;
};

// rumus::autocast(DType::f16, [&] { ... }): runs `fn` inside an AutocastGuard.
template <class F>
decltype(auto) autocast(DType dtype, F&& fn) {
  AutocastGuard guard(dtype);
  return std::forward<F>(fn)();
}
template <class F>
decltype(auto) autocast(F&& fn) {
  AutocastGuard guard;
  return std::forward<F>(fn)();
}

}  // namespace rumus

RUMUS_API_END
