#include "rumus/distributed/functional.hpp"

#include <fmt/format.h>

#include "rumus/autograd/function.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::distributed {

Tensor gather_shards(const Tensor& shard, ProcessGroup& group, Reduce grad_reduce) {
  autograd::CustomFunction fn{
      "all_gather",
      [&group](const std::vector<Tensor>& in) { return group.all_gather(in[0]); },
      [&group, grad_reduce](const Tensor& g, const std::vector<Tensor>&, const Tensor&) {
        return std::vector<Tensor>{group.reduce_scatter(g, grad_reduce)};
      }};
  return autograd::apply(fn, {shard});
}

Tensor shard_of(const Tensor& full, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(fmt::format("shard_of: expected 0 <= rank < size, got rank {} of size {}", rank, size));
  NoGradGuard no_grad;
  Tensor f = full.detach();
  if (f.dim() == 0) f = f.reshape({1});
  const std::int64_t rows = f.size(0), c = shard_rows(rows, size);
  const std::int64_t start = std::min<std::int64_t>(rank * c, rows), end = std::min<std::int64_t>(start + c, rows);
  Shape s = f.shape();
  s[0] = c;
  Tensor out = zeros(s, {.dtype = f.dtype(), .device = f.device()});
  if (end > start) out.narrow(0, 0, end - start).copy_(f.narrow(0, start, end - start));
  return out;
}

Tensor unshard(const Tensor& gathered, const Shape& full_shape) {
  const std::int64_t n = numel_of(full_shape);
  if (gathered.numel() < n)
    throw ShapeError(fmt::format("unshard: {} gathered elements cannot fill the full shape {}", gathered.numel(),
                                 shape_str(full_shape)));
  Tensor flat = gathered.reshape({-1});
  if (flat.numel() != n) flat = flat.narrow(0, 0, n);
  return flat.reshape(full_shape);
}

}  // namespace rumus::distributed
