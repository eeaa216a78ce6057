#pragma once
// Differentiable collectives and the dim-0 shard arithmetic FSDP uses.
#include "rumus/distributed/process_group.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

// Forward: the shards of all ranks gathered along dim 0 ([size * c, ...]).
// Backward: the gradient reduce-scattered back to each rank's shard with
// `grad_reduce` — average when every rank computed a mean loss over an
// equal-sized batch (data parallel: the result is the gradient of the mean
// over the concatenated batch), sum for a loss that is a sum over ranks.
// Recorded on the calling thread's tape like any op.
Tensor gather_shards(const Tensor& shard, ProcessGroup& group, Reduce grad_reduce = Reduce::average);

// Rank `rank`'s shard of `full` (see shard_rows): rows [rank * c, (rank + 1) * c)
// of `full` padded with zero rows to size * c rows, as a new contiguous tensor
// on full's device, off the tape. A 0-d tensor counts as one row.
Tensor shard_of(const Tensor& full, int rank, int size);
// The full tensor from the gathered, padded rows: the first numel_of(full_shape)
// elements viewed as full_shape (recorded on the tape when `gathered` is).
Tensor unshard(const Tensor& gathered, const Shape& full_shape);

}  // namespace rumus::distributed

RUMUS_API_END
