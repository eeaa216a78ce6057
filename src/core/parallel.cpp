#include "rumus/core/parallel.hpp"

#include <omp.h>

#include <string>

#include "rumus/core/error.hpp"

namespace rumus {

void set_num_threads(int threads) {
  if (threads < 1) throw Error("set_num_threads: expected at least 1 thread, got " + std::to_string(threads));
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace rumus
