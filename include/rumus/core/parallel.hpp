#pragma once
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Threads for CPU kernels: rumus's OpenMP loops and oneDNN's share one pool.
void set_num_threads(int threads);
int num_threads();

// Whether rumus chose OpenMP's wait policy for this process: idle threads sleep
// at once (OMP_WAIT_POLICY=passive) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT was
// set when the program started. False also where rumus is linked statically
// into a program that loads the OpenMP runtime first.
bool idle_threads_sleep_by_rumus();

}  // namespace rumus

RUMUS_API_END
