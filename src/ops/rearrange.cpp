// flip, roll, repeat, tile, repeat_interleave, movedim, tril/triu: composed of
// views, cat, index_select and masked_fill, so every device runs them and
// their gradients are those ops' (differentiable to any order). diagonal and
// as_strided are views, in shape.cpp.
#include "rumus/ops/rearrange.hpp"

#include <fmt/ranges.h>

#include "op_util.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/join.hpp"

namespace rumus {

namespace {

std::string list_str(const std::vector<std::int64_t>& v) { return fmt::format("[{}]", fmt::join(v, ", ")); }

// dims wrapped into [0, rank), each at most once.
std::vector<std::int64_t> distinct_dims(const char* op, const std::vector<std::int64_t>& dims, std::int64_t rank) {
  std::vector<std::int64_t> out;
  std::vector<char> seen(std::size_t(std::max<std::int64_t>(rank, 1)), 0);
  for (std::int64_t d : dims) {
    const std::int64_t w = wrap_dim(d, rank, op);
    if (seen[w]++) throw ShapeError(fmt::format("{}: dim {} appears more than once in {}", op, w, list_str(dims)));
    out.push_back(w);
  }
  return out;
}

Tensor reversed_rows(std::int64_t n, Device device) {
  return arange(double(n - 1), -1.0, -1.0, {.dtype = DType::i64, .device = device});
}

// The u8 mask, [rows, cols], of places a triangle drops: where column - row
// is past `diagonal` (above it for tril, below for triu).
Tensor triangle_drop(const char* op, const Tensor& x, std::int64_t diagonal, bool lower) {
  detail::check_defined(op, x);
  if (x.dim() < 2)
    throw ShapeError(fmt::format("{}: expected a tensor of at least 2 dims, got shape {}", op, shape_str(x.shape())));
  const std::int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  std::vector<std::uint8_t> drop(std::size_t(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) drop[std::size_t(r * cols + c)] = lower ? c - r > diagonal : c - r < diagonal;
  return tensor(drop, {rows, cols}, {.dtype = DType::u8}).to(x.device());
}

}  // namespace

Tensor flip(const Tensor& x, const std::vector<std::int64_t>& dims) {
  detail::check_defined("flip", x);
  Tensor out = x;
  for (std::int64_t d : distinct_dims("flip", dims, x.dim()))
    if (x.dim() > 0) out = index_select(out, d, reversed_rows(x.shape()[d], x.device()));
  return out.impl_ptr() == x.impl_ptr() ? x.clone() : out;
}

Tensor roll(const Tensor& x, const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims) {
  detail::check_defined("roll", x);
  if (dims.empty()) {
    if (shifts.size() != 1)
      throw ShapeError(fmt::format("roll: expected one shift without dims, got {}", list_str(shifts)));
    return roll(x.flatten(), shifts, {0}).reshape(x.shape());
  }
  if (shifts.size() != dims.size())
    throw ShapeError(fmt::format("roll: expected as many shifts as dims, got shifts {} and dims {}", list_str(shifts),
                                 list_str(dims)));
  Tensor out = x;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = wrap_dim(dims[i], x.dim(), "roll"), n = x.dim() == 0 ? 1 : x.shape()[d];
    const std::int64_t s = n == 0 ? 0 : ((shifts[i] % n) + n) % n;
    if (s != 0) out = cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.impl_ptr() == x.impl_ptr() ? x.clone() : out;
}

Tensor repeat(const Tensor& x, const std::vector<std::int64_t>& repeats) {
  detail::check_defined("repeat", x);
  if (std::int64_t(repeats.size()) < x.dim())
    throw ShapeError(fmt::format("repeat: expected at least {} repeats for shape {}, got {}", x.dim(),
                                 shape_str(x.shape()), list_str(repeats)));
  for (std::int64_t r : repeats)
    if (r < 0) throw ShapeError(fmt::format("repeat: expected repeats of at least 0, got {}", list_str(repeats)));
  // x as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...], merged pairwise.
  const std::size_t lead = repeats.size() - std::size_t(x.dim());
  Shape paired, expanded, out;
  for (std::size_t i = 0; i < repeats.size(); ++i) {
    const std::int64_t s = i < lead ? 1 : x.shape()[i - lead];
    paired.insert(paired.end(), {1, s});
    expanded.insert(expanded.end(), {repeats[i], s});
    out.push_back(repeats[i] * s);
  }
  return x.reshape(paired).expand(expanded).contiguous().reshape(out);
}

Tensor tile(const Tensor& x, const std::vector<std::int64_t>& reps) {
  detail::check_defined("tile", x);
  std::vector<std::int64_t> padded(std::size_t(std::max<std::int64_t>(0, x.dim() - std::int64_t(reps.size()))), 1);
  padded.insert(padded.end(), reps.begin(), reps.end());
  return repeat(x, padded);
}

Tensor repeat_interleave(const Tensor& x, std::int64_t repeats, std::optional<std::int64_t> dim) {
  detail::check_defined("repeat_interleave", x);
  if (repeats < 0) throw ShapeError(fmt::format("repeat_interleave: expected repeats of at least 0, got {}", repeats));
  const Tensor in = dim ? (x.dim() == 0 ? x.reshape({1}) : x) : x.flatten();
  const std::int64_t d = dim ? wrap_dim(*dim, in.dim(), "repeat_interleave") : 0;
  Shape expanded = in.shape();
  expanded.insert(expanded.begin() + d + 1, repeats);
  return in.unsqueeze(d + 1).expand(expanded).contiguous().flatten(d, d + 1);
}

namespace {
// The i64 rows i repeated counts[i] times, on `device`.
Tensor repeated_rows(const char* op, const Tensor& repeats, std::int64_t n, Device device) {
  if (repeats.dtype() != DType::i64 && repeats.dtype() != DType::i32)
    throw DTypeError(fmt::format("{}: expected i64 or i32 repeats, got {}", op, dtype_name(repeats.dtype())));
  if (repeats.dim() > 1)
    throw ShapeError(fmt::format("{}: expected 1-D repeats, got shape {}", op, shape_str(repeats.shape())));
  std::vector<std::int64_t> counts = repeats.to_vector<std::int64_t>();
  if (counts.size() == 1 && n >= 0) counts.assign(std::size_t(n), counts[0]);
  if (n >= 0 && std::int64_t(counts.size()) != n)
    throw ShapeError(fmt::format("{}: expected {} repeats (one per element along dim), got {}", op, n, counts.size()));
  std::vector<std::int64_t> rows;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) throw ShapeError(fmt::format("{}: expected repeats of at least 0, got {}", op, counts[i]));
    rows.insert(rows.end(), std::size_t(counts[i]), std::int64_t(i));
  }
  return tensor(rows, {std::int64_t(rows.size())}, {.dtype = DType::i64}).to(device);
}
}  // namespace

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<std::int64_t> dim) {
  detail::check_defined("repeat_interleave", x);
  detail::check_defined("repeat_interleave", repeats);
  const Tensor in = dim ? (x.dim() == 0 ? x.reshape({1}) : x) : x.flatten();
  const std::int64_t d = dim ? wrap_dim(*dim, in.dim(), "repeat_interleave") : 0;
  return index_select(in, d, repeated_rows("repeat_interleave", repeats, in.shape()[d], x.device()));
}

Tensor repeat_interleave(const Tensor& repeats) {
  detail::check_defined("repeat_interleave", repeats);
  return repeated_rows("repeat_interleave", repeats, -1, repeats.device());
}

Tensor movedim(const Tensor& x, const std::vector<std::int64_t>& source, const std::vector<std::int64_t>& destination) {
  detail::check_defined("movedim", x);
  if (source.size() != destination.size())
    throw ShapeError(fmt::format("movedim: expected as many source as destination dims, got {} and {}",
                                 list_str(source), list_str(destination)));
  const std::vector<std::int64_t> src = distinct_dims("movedim", source, x.dim());
  const std::vector<std::int64_t> dst = distinct_dims("movedim", destination, x.dim());
  if (x.dim() == 0) return x.reshape({});
  std::vector<std::int64_t> order(std::size_t(x.dim()), -1);
  std::vector<char> moved(std::size_t(x.dim()), 0);
  for (std::size_t i = 0; i < src.size(); ++i) {
    order[std::size_t(dst[i])] = src[i];
    moved[std::size_t(src[i])] = 1;
  }
  std::int64_t next = 0;  // the dims not moved fill the free places in their order
  for (auto& o : order)
    if (o < 0) {
      while (moved[std::size_t(next)]) ++next;
      o = next++;
    }
  return x.permute(order);
}

Tensor movedim(const Tensor& x, std::int64_t source, std::int64_t destination) {
  return movedim(x, std::vector<std::int64_t>{source}, std::vector<std::int64_t>{destination});
}

Tensor tril(const Tensor& x, std::int64_t diagonal) { return masked_fill(x, triangle_drop("tril", x, diagonal, true), 0.0); }

Tensor triu(const Tensor& x, std::int64_t diagonal) { return masked_fill(x, triangle_drop("triu", x, diagonal, false), 0.0); }

}  // namespace rumus

namespace rumus {

Tensor Tensor::flip(const std::vector<std::int64_t>& dims) const { return rumus::flip(*this, dims); }
Tensor Tensor::roll(const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims) const {
  return rumus::roll(*this, shifts, dims);
}
Tensor Tensor::repeat(const std::vector<std::int64_t>& repeats) const { return rumus::repeat(*this, repeats); }
Tensor Tensor::tile(const std::vector<std::int64_t>& reps) const { return rumus::tile(*this, reps); }
Tensor Tensor::repeat_interleave(std::int64_t repeats, std::optional<std::int64_t> dim) const {
  return rumus::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::movedim(std::int64_t source, std::int64_t destination) const {
  return rumus::movedim(*this, source, destination);
}
Tensor Tensor::tril(std::int64_t diagonal) const { return rumus::tril(*this, diagonal); }
Tensor Tensor::triu(std::int64_t diagonal) const { return rumus::triu(*this, diagonal); }

}  // namespace rumus
