#pragma once
// Element-wise reductions over host buffers, shared by the transports.
#include <cstddef>

#include "rumus/distributed/process_group.hpp"

namespace rumus::distributed::detail {

// out[i] = inputs[0][i] + inputs[1][i] + ... (in that order), divided by n for
// average, for i in [begin, end). `out` may alias one of the inputs only when
// begin == end or it is inputs[0].
void reduce_host(void* out, const void* const* inputs, int n, std::size_t begin, std::size_t end, DType dtype,
                 Reduce op);
// data[i] /= divisor for i in [0, count) (floating dtypes).
void divide_host(void* data, std::size_t count, DType dtype, int divisor);

}  // namespace rumus::distributed::detail
