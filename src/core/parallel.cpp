#include "rumus/core/parallel.hpp"

#include <omp.h>

#include <cstdlib>
#include <string>

#include "openmp_environment.hpp"
#include "rumus/core/error.hpp"

// From librumus_openmp_defaults (src/runtime/openmp_defaults.cpp).
extern "C" int rumus_openmp_defaults_applied();

namespace rumus {

void set_num_threads(int threads) {
  if (threads < 1) throw Error("set_num_threads: expected at least 1 thread, got " + std::to_string(threads));
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

bool idle_threads_sleep_by_rumus() { return rumus_openmp_defaults_applied() != 0; }

void detail::settle_openmp_environment() {
  static const bool settled = [] {
    if (rumus_openmp_defaults_applied()) unsetenv("OMP_WAIT_POLICY");
    return true;
  }();
  (void)settled;
}

}  // namespace rumus
