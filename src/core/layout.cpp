#include "rumus/core/layout.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <ostream>

#include "rumus/core/error.hpp"

namespace rumus {

// Shape arithmetic is overflow-checked: a count or stride past int64 is a
// ShapeError naming the shape, never a wrapped value that later indexes wild.
std::int64_t numel_of(const Shape& shape) {
  for (auto d : shape)
    if (d == 0) return 0;
  std::int64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      throw ShapeError(fmt::format("shape {} has more elements than an int64 can count", shape_str(shape)));
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    if (__builtin_mul_overflow(s, std::max<std::int64_t>(shape[i], 1), &s))
      throw ShapeError(fmt::format("shape {} has strides past what an int64 can hold", shape_str(shape)));
  }
  return strides;
}

Layout Layout::contiguous(Shape shape, std::int64_t offset) {
  Layout l;
  l.strides = contiguous_strides(shape);
  l.shape = std::move(shape);
  l.offset = offset;
  return l;
}

std::int64_t Layout::numel() const { return numel_of(shape); }

bool Layout::is_contiguous() const {
  if (numel() == 0) return true;  // nothing to lay out (as in PyTorch), whatever the strides
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::int64_t Layout::max_extent() const {
  if (numel() == 0) return offset;
  std::int64_t e = offset;
  for (std::size_t i = 0; i < shape.size(); ++i) e += (shape[i] - 1) * strides[i];
  return e + 1;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }
std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape_str(shape); }

std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op) {
  std::int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  if (dim < lo || dim > hi)
    throw ShapeError(fmt::format("{}: dim {} out of range for a tensor of {} dims (expected {}..{})", op, dim,
                                 ndim, lo, hi));
  return dim < 0 ? dim + std::max<std::int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(fmt::format("{}: shapes {} and {} do not broadcast (dim {}: {} vs {})", op, shape_str(a),
                                   shape_str(b), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace rumus
