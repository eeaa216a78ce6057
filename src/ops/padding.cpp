// pad: constant padding as cat with filled blocks (negative sizes narrow),
// the other modes as one gather per padded dim with the source index of
// every output position.
#include "rumus/ops/padding.hpp"

#include <algorithm>

#include "gather_along.hpp"
#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/join.hpp"

namespace rumus {

namespace {

// The input position that padded position i (in [-before, n + after)) reads.
std::int64_t source_index(const std::string& mode, std::int64_t i, std::int64_t n) {
  if (mode == "replicate") return std::clamp<std::int64_t>(i, 0, n - 1);
  if (mode == "circular") return ((i % n) + n) % n;
  if (n == 1) return 0;  // reflect: a period of 2 (n - 1) mirrors at both edges without repeating them
  const std::int64_t period = 2 * (n - 1), j = ((i % period) + period) % period;
  return j < n ? j : period - j;
}

Tensor pad_constant(const Tensor& x, std::int64_t dim, std::int64_t before, std::int64_t after, double value) {
  Tensor y = x;
  if (before < 0) y = y.narrow(dim, -before, y.shape()[std::size_t(dim)] + before);
  if (after < 0) y = y.narrow(dim, 0, y.shape()[std::size_t(dim)] + after);
  auto block = [&](std::int64_t size) {
    Shape s = y.shape();
    s[std::size_t(dim)] = size;
    return full(s, value, {.dtype = y.dtype(), .device = y.device()});
  };
  std::vector<Tensor> parts;
  if (before > 0) parts.push_back(block(before));
  parts.push_back(y);
  if (after > 0) parts.push_back(block(after));
  return parts.size() == 1 ? y : cat(parts, dim);
}

Tensor pad_indexed(const Tensor& x, const std::string& mode, std::int64_t dim, std::int64_t before,
                   std::int64_t after) {
  if (before == 0 && after == 0) return x;
  const std::int64_t n = x.shape()[std::size_t(dim)];
  std::vector<std::int64_t> index;
  for (std::int64_t i = -before; i < n + after; ++i) index.push_back(source_index(mode, i, n));
  return detail::gather_along(x, dim, index);
}

}  // namespace

namespace detail {

Tensor gather_along(const Tensor& x, std::int64_t dim, const std::vector<std::int64_t>& index) {
  Shape one(std::size_t(x.dim()), 1), out = x.shape();
  one[std::size_t(dim)] = out[std::size_t(dim)] = std::int64_t(index.size());
  return gather(x, dim, tensor(index).view(one).to(x.device()).expand(out).contiguous());
}

}  // namespace detail

Tensor pad(const Tensor& input, const std::vector<std::int64_t>& pads, const std::string& mode,
           std::optional<double> value) {
  const char* op = "pad";
  detail::check_defined(op, input);
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw ValueError(fmt::format(
        "pad: expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"{}\"", mode));
  if (pads.size() % 2 != 0)
    throw ShapeError(fmt::format("pad: expected an even number of sizes (before and after of each dim, last dim "
                                 "first), got {}",
                                 pads.size()));
  const std::int64_t dims = std::int64_t(pads.size()) / 2;
  if (dims > input.dim())
    throw ShapeError(fmt::format("pad: {} sizes pad {} dims, but input {} has {}", pads.size(), dims,
                                 shape_str(input.shape()), input.dim()));
  if (mode != "constant") {
    if (value)
      throw ValueError(fmt::format("pad: mode \"{}\" takes no value (got {})", mode, *value));
    if (dims < 1 || dims > 3 || (input.dim() != dims + 1 && input.dim() != dims + 2))
      throw ShapeError(fmt::format("pad: mode \"{}\" pads the last 1 to 3 dims of an input with one or two more "
                                   "dims, got {} sizes for input {}",
                                   mode, pads.size(), shape_str(input.shape())));
  }
  Tensor out = input;
  for (std::int64_t k = 0; k < dims; ++k) {
    const std::int64_t dim = input.dim() - 1 - k, before = pads[std::size_t(2 * k)],
                       after = pads[std::size_t(2 * k + 1)], n = input.shape()[std::size_t(dim)];
    if (mode == "constant") {
      if (n + before + after < 0)
        throw ShapeError(fmt::format("pad: padding ({}, {}) of dim {} (size {}) leaves a negative size {}", before,
                                     after, dim, n, n + before + after));
      out = pad_constant(out, dim, before, after, value.value_or(0.0));
      continue;
    }
    if (before < 0 || after < 0)
      throw ShapeError(fmt::format("pad: mode \"{}\" expects non-negative sizes, got ({}, {}) for dim {}", mode,
                                   before, after, dim));
    if (mode == "replicate" && n == 0)
      throw ShapeError(fmt::format("pad: mode \"replicate\" expects a non-empty dim {}, input {}", dim,
                                   shape_str(input.shape())));
    if (mode == "reflect" && (before >= n || after >= n))
      throw ShapeError(fmt::format("pad: mode \"reflect\" expects sizes less than dim {}'s size {}, got ({}, {})",
                                   dim, n, before, after));
    if (mode == "circular" && (before > n || after > n))
      throw ShapeError(fmt::format("pad: mode \"circular\" expects sizes at most dim {}'s size {}, got ({}, {})",
                                   dim, n, before, after));
    out = pad_indexed(out, mode, dim, before, after);
  }
  return out;
}

}  // namespace rumus
