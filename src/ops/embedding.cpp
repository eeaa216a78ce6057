// Embedding lookup: an index_select of weight rows; the gradient is an index_add into a zero table.
#include "rumus/ops/embedding.hpp"

#include "op_util.hpp"
#include "../backend/gather.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"

namespace rumus {

using detail::arg;

namespace {
// The weight's gradient with ops, for create_graph: g's rows added into a zero
// table at their indices (scatter_add, linear in g: differentiable to any order).
Tensor composed_grad(const Tensor& g, const Tensor& index, std::int64_t num, std::int64_t dim, std::int64_t m,
                     std::optional<std::int64_t> padding_idx) {
  Tensor rows = g.reshape({m, dim});
  const Tensor at = index.view({m, 1});
  if (padding_idx)  // the padding row receives no gradient
    rows = where(ne(at, full({}, double(*padding_idx), {.dtype = DType::i64, .device = g.device()})), rows,
                 zeros({}, {.dtype = g.dtype(), .device = g.device()}));
  return scatter_add(zeros({num, dim}, {.dtype = g.dtype(), .device = g.device()}), 0, at.expand({m, dim}), rows);
}
}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<std::int64_t> padding_idx) {
  const char* op = "embedding";
  detail::check_same_device(op, indices, weight);
  detail::check_floating(op, weight);
  if (is_floating(indices.dtype()))
    throw DTypeError(fmt::format("embedding: expected integer indices (i64 or i32), got {}",
                                 dtype_name(indices.dtype())));
  if (weight.dim() != 2)
    throw ShapeError(fmt::format("embedding: expected weight of 2 dims [num_embeddings, embedding_dim], got {}",
                                 shape_str(weight.shape())));
  const std::int64_t num = weight.shape()[0], dim = weight.shape()[1], m = indices.numel();
  if (padding_idx) {
    if (*padding_idx < -num || *padding_idx >= num)
      throw ShapeError(fmt::format("embedding: padding_idx {} is out of range for {} embeddings", *padding_idx, num));
    if (*padding_idx < 0) *padding_idx += num;  // negative counts from the end, as PyTorch
  }
  Tensor index = indices.detach().to(DType::i64).contiguous();
  Tensor table = weight.detach().contiguous();
  Tensor out = detail::alloc({1, m, dim}, weight.dtype(), weight.device());
  const Layout index2 = Layout::contiguous({1, m}, index.offset());
  detail::check_indices(op, "index", index, num);
  if (out.numel() > 0)
    detail::kernel<IndexSelectKernel>(op, weight)(arg(out), arg(table, Layout::contiguous({1, num, dim}, table.offset())), arg(index, index2));
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  out = out.view(out_shape);
  if (autograd::needs_grad({&weight}))
    autograd::record(op, {Tensor(), weight}, out,
                     [num, dim, m, padding_idx, si = autograd::SavedTensor(index)](const Tensor& g) {
                       const Tensor& index = si.get();
                       if (grad_enabled()) return std::vector<Tensor>{Tensor(), composed_grad(g, index, num, dim, m, padding_idx)};
                       Tensor rows = g.reshape({1, m, dim});
                       if (padding_idx) {  // the padding row receives no gradient
                         Tensor keep = ne(index.view({1, m, 1}),
                                          full({}, double(*padding_idx), {.dtype = DType::i64, .device = g.device()}));
                         rows = where(keep, rows, zeros({}, {.dtype = g.dtype(), .device = g.device()}));
                       }
                       rows = rows.contiguous();
                       Tensor gw = zeros({1, num, dim}, {.dtype = g.dtype(), .device = g.device()});
                       if (rows.numel() > 0)
                         detail::kernel<IndexAddKernel>("embedding", g)(arg(gw), arg(index, Layout::contiguous({1, m}, index.offset())),
                                        arg(rows, Layout::contiguous({1, m, dim}, rows.offset())));
                       return std::vector<Tensor>{Tensor(), gw.view({num, dim})};
                     },
                     {}, autograd::Backward::differentiable);
  return out;
}

}  // namespace rumus
