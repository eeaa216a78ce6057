// Printing tensors: to_string and operator<<, in libtorch's spirit (values,
// then shape, dtype and device). Defined in ops because it reads the values
// through to_vector, a cast and a copy.
#include <fmt/format.h>

#include <ostream>
#include <string>
#include <vector>

#include "rumus/core/tensor.hpp"

namespace rumus {

namespace {
// One element as PyTorch prints it: floats with four decimals, bools as True and False.
std::string element(double v, DType dtype) {
  if (is_floating(dtype)) return fmt::format("{:.4f}", v);
  if (dtype == DType::boolean) return v != 0 ? "True" : "False";
  return fmt::format("{}", static_cast<long long>(v));
}

void print_rec(std::string& out, const std::vector<double>& v, const Shape& shape, std::size_t d,
               std::int64_t base, DType dtype, int indent) {
  if (shape.empty()) {
    out += element(v[0], dtype);
    return;
  }
  std::int64_t n = shape[d], stride = 1;
  for (std::size_t i = d + 1; i < shape.size(); ++i) stride *= shape[i];
  bool summarise = numel_of(shape) > 1000 && n > 6;
  out += '[';
  for (std::int64_t i = 0; i < n; ++i) {
    if (summarise && i == 3) {
      out += d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + d + 1, ' ');
      i = n - 3;
    }
    if (d + 1 == shape.size())
      out += element(v[base + i], dtype);
    else
      print_rec(out, v, shape, d + 1, base + i * stride, dtype, indent);
    if (i + 1 < n) out += d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + d + 1, ' ');
  }
  out += ']';
}
}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::vector<double> values = t.to_vector<double>();
  std::string body;
  print_rec(body, values, t.shape(), 0, 0, t.dtype(), 7);
  return fmt::format("tensor({}, shape={}, dtype={}, device={}{})", body, shape_str(t.shape()),
                     dtype_name(t.dtype()), t.device().str(), t.requires_grad() ? ", requires_grad" : "");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace rumus
