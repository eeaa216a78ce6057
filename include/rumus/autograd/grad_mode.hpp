#pragma once
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Per-thread switch: ops record onto the tape only while grad mode is on.
bool grad_enabled();
void set_grad_enabled(bool on);

// Turns recording off for its scope; nestable.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace rumus

RUMUS_API_END
