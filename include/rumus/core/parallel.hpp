#pragma once
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Threads for CPU kernels: OpenMP loops and OpenBLAS alike.
void set_num_threads(int threads);
int num_threads();

}  // namespace rumus

RUMUS_API_END
