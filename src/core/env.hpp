#pragma once
// The one place rumus reads environment variables, so each is parsed one way
// and the documented table (docs/configuration.md) can be checked against
// src/ (tests/check_environment.cmake fails on a name the table lacks).
// librumus_openmp_defaults (src/runtime/) is the exception: it runs before
// everything, in the loader, and reads OMP_WAIT_POLICY and GOMP_SPINCOUNT itself.
#include <cstdint>
#include <optional>
#include <string>

namespace rumus::env {

// The variable's value when it is set and not empty.
std::optional<std::string> text(const char* name);
// Set at all, even to "" (launchers' variables: OMPI_COMM_WORLD_SIZE).
bool is_set(const char* name);
// An opt-in switch: set to anything but "" and "0" (RUMUS_VULKAN_PROFILE=1).
bool on(const char* name);
// A test knob that turns a device feature off: set to exactly "0".
bool off(const char* name);
// A whole decimal integer; unset or empty gives nothing, anything else a
// ValueError naming the variable.
std::optional<std::int64_t> integer(const char* name);

}  // namespace rumus::env
