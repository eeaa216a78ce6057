#pragma once
// Reordering and repeating a tensor's elements, as PyTorch's: flip, roll,
// repeat, tile, repeat_interleave, movedim, tril/triu, and the strided views
// diagonal and as_strided. Composed of views, joins and gathers, so they run on
// every device and differentiate to any order.
#include <cstdint>
#include <optional>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch.flip: the order of each of dims reversed (a copy).
Tensor flip(const Tensor& x, const std::vector<std::int64_t>& dims);

// torch.roll: elements shifted by shifts[i] along dims[i], wrapping around;
// with no dims, over the flattened tensor (then shifts holds one number).
Tensor roll(const Tensor& x, const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims = {});

// Tensor.repeat: x tiled repeats[d] times along each dim; repeats has at
// least x.dim() entries, extra ones add leading dims.
Tensor repeat(const Tensor& x, const std::vector<std::int64_t>& repeats);
// torch.tile: repeat, with fewer entries than x has dims padded with leading 1s.
Tensor tile(const Tensor& x, const std::vector<std::int64_t>& reps);

// torch.repeat_interleave: each element (each slice along dim) repeated
// `repeats` times in place; without dim, over the flattened tensor.
Tensor repeat_interleave(const Tensor& x, std::int64_t repeats, std::optional<std::int64_t> dim = std::nullopt);
// With a repeat count per element along dim (1-D integer tensor of dim's size,
// or one element for all); the counts are read back to size the result.
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<std::int64_t> dim = std::nullopt);
// torch.repeat_interleave(repeats): i repeated repeats[i] times, i64.
Tensor repeat_interleave(const Tensor& repeats);

// torch.movedim: the dims at source moved to the places destination names,
// the others keeping their order (a view).
Tensor movedim(const Tensor& x, const std::vector<std::int64_t>& source, const std::vector<std::int64_t>& destination);
Tensor movedim(const Tensor& x, std::int64_t source, std::int64_t destination);

// torch.tril/triu: the last two dims' lower (upper) triangle from the
// `diagonal`-th diagonal on (0 main, > 0 above, < 0 below), zeros elsewhere.
Tensor tril(const Tensor& x, std::int64_t diagonal = 0);
Tensor triu(const Tensor& x, std::int64_t diagonal = 0);

// torch.diagonal: the view of the diagonal `offset` of the dims dim1, dim2
// (removed, the diagonal appended as the last dim).
Tensor diagonal(const Tensor& x, std::int64_t offset = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1);

// torch.as_strided: the view of x's storage with the given sizes, strides and
// storage offset (x's own by default); it must lie inside the storage.
Tensor as_strided(const Tensor& x, const Shape& size, const Shape& stride,
                  std::optional<std::int64_t> storage_offset = std::nullopt);

}  // namespace rumus

RUMUS_API_END
