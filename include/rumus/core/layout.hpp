#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

using Shape = std::vector<std::int64_t>;

// Shape, strides (in elements) and element offset into a Storage.
struct Layout {
  Shape shape;
  Shape strides;
  std::int64_t offset = 0;

  static Layout contiguous(Shape shape, std::int64_t offset = 0);
  std::int64_t dim() const { return static_cast<std::int64_t>(shape.size()); }
  std::int64_t numel() const;
  bool is_contiguous() const;
  // Bytes the layout can touch from element 0 of its storage (for bounds checks).
  std::int64_t max_extent() const;
};

std::int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Prints shape_str(shape): "[2, 3]", as libtorch prints sizes(). Shape is a
// std::vector, so this is found from namespace rumus or under `using namespace rumus`.
std::ostream& operator<<(std::ostream& os, const Shape& shape);
// Maps a possibly negative dim into [0, ndim); throws ShapeError naming op otherwise.
std::int64_t wrap_dim(std::int64_t dim, std::int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace rumus

RUMUS_API_END
