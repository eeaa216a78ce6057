#include "rumus/core/parallel.hpp"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "rumus/core/error.hpp"

// From librumus_openmp_defaults (src/runtime/openmp_defaults.cpp).
extern "C" int rumus_openmp_defaults_applied();

namespace rumus {

namespace {
// Runs after libgomp has read its environment (librumus depends on it): the
// default set for it is taken away again, leaving child processes the user's
// environment.
[[maybe_unused]] const bool restored_environment = [] {
  if (rumus_openmp_defaults_applied()) unsetenv("OMP_WAIT_POLICY");
  return true;
}();
}  // namespace

void set_num_threads(int threads) {
  if (threads < 1) throw Error("set_num_threads: expected at least 1 thread, got " + std::to_string(threads));
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

bool idle_threads_sleep_by_rumus() { return rumus_openmp_defaults_applied() != 0; }

}  // namespace rumus
