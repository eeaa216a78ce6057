#pragma once
// The op table: every differentiable op with sample input shapes. Drives the
// f64 gradcheck (CPU) and the CPU-vs-Vulkan comparison.
#include <functional>
#include <string>
#include <vector>

#include <rumus/rumus.hpp>

namespace rumus::testing {

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // one per differentiable input
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double low = -1.0, high = 1.0;  // input domain
  double tolerance = 1e-4;        // relative tolerance for f32 device comparison
};

const std::vector<OpCase>& op_table();

// How inputs are presented to the op: each variant builds the same logical
// values through a different layout.
enum class Layouting { contiguous, transposed, sliced, broadcast };
const char* layouting_name(Layouting l);

// Makes a leaf `base` (requires grad) and the tensor the op sees (`view`),
// with `values` as logical contents of shape `shape`.
struct Input {
  Tensor base;
  Tensor view;
};
Input make_input(const std::vector<double>& values, const Shape& shape, Layouting how, DType dtype, Device device);

// Fresh random values in [low, high) for a shape, from a fixed seed.
std::vector<double> sample_values(const Shape& shape, double low, double high, std::uint64_t seed);

}  // namespace rumus::testing
