#include "rumus/autograd/autocast.hpp"

#include <string>

#include "rumus/core/error.hpp"

namespace rumus {

namespace {
thread_local bool g_enabled = false;
thread_local std::optional<DType> g_dtype;
}  // namespace

bool autocast_enabled() { return g_enabled; }
void set_autocast_enabled(bool on) { g_enabled = on; }

std::optional<DType> autocast_dtype_override() { return g_dtype; }

void set_autocast_dtype_override(std::optional<DType> dtype) {
  if (dtype && *dtype != DType::f16 && *dtype != DType::bf16)
    throw DTypeError("autocast: expected a dtype of f16 or bf16, got " + std::string(dtype_name(*dtype)));
  g_dtype = dtype;
}

DType autocast_dtype(Device device) {
  if (g_dtype) return *g_dtype;
  return device.is_cpu() ? DType::bf16 : DType::f16;
}

AutocastGuard::AutocastGuard(bool enabled) : prev_enabled_(g_enabled), prev_dtype_(g_dtype) { g_enabled = enabled; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_enabled_(g_enabled), prev_dtype_(g_dtype) {
  set_autocast_dtype_override(dtype);  // validates before changing anything
  g_enabled = enabled;
}

AutocastGuard::~AutocastGuard() {
  g_enabled = prev_enabled_;
  g_dtype = prev_dtype_;
}

}  // namespace rumus
