#include "rumus/data/dataset.hpp"

#include <fmt/format.h>

#include <cstring>

#include "rumus/ops/creation.hpp"

namespace rumus::data {

Tensor gather_rows(const Tensor& src, const std::vector<std::int64_t>& indices, const char* op) {
  Shape shape = src.shape();
  const std::int64_t rows = shape[0];
  shape[0] = std::int64_t(indices.size());
  Tensor out = empty(shape, {.dtype = src.dtype()});
  const std::size_t row_bytes = std::size_t(src.numel() / std::max<std::int64_t>(rows, 1)) * dtype_size(src.dtype());
  const auto* from = static_cast<const char*>(src.storage().data()) + src.offset() * std::int64_t(dtype_size(src.dtype()));
  auto* to = static_cast<char*>(out.storage().data());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    std::int64_t r = indices[i];
    if (r < 0 || r >= rows) throw Error(fmt::format("{}: index {} out of range for {} examples", op, r, rows));
    std::memcpy(to + i * row_bytes, from + std::size_t(r) * row_bytes, row_bytes);
  }
  return out;
}

TensorDataset::TensorDataset(Tensor x, Tensor y) {
  if (!x.defined() || !y.defined() || x.dim() == 0 || y.dim() == 0)
    throw ShapeError("TensorDataset: expected two defined tensors of at least 1 dim");
  if (x.size(0) != y.size(0))
    throw ShapeError(fmt::format("TensorDataset: inputs {} and targets {} differ in their first dim",
                                 shape_str(x.shape()), shape_str(y.shape())));
  // Held on the host, contiguous, off the tape: batches are row copies.
  x_ = x.detach().cpu().contiguous();
  y_ = y.detach().cpu().contiguous();
}

Batch TensorDataset::get_batch(const std::vector<std::int64_t>& indices) const {
  return {gather_rows(x_, indices, "TensorDataset"), gather_rows(y_, indices, "TensorDataset")};
}

}  // namespace rumus::data
