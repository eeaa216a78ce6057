#pragma once

namespace rumus {

// Threads for CPU kernels: OpenMP loops and OpenBLAS alike.
void set_num_threads(int threads);
int num_threads();

}  // namespace rumus
