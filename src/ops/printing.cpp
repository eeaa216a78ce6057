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
void print_rec(std::string& out, const std::vector<double>& v, const Shape& shape, std::size_t d,
               std::int64_t base, bool is_float, int indent) {
  if (shape.empty()) {
    out += is_float ? fmt::format("{:.4f}", v[0]) : fmt::format("{}", static_cast<long long>(v[0]));
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
      out += is_float ? fmt::format("{:.4f}", v[base + i]) : fmt::format("{}", static_cast<long long>(v[base + i]));
    else
      print_rec(out, v, shape, d + 1, base + i * stride, is_float, indent);
    if (i + 1 < n) out += d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + d + 1, ' ');
  }
  out += ']';
}
}  // namespace

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "tensor(undefined)";
  std::vector<double> values = t.to_vector<double>();
  std::string body;
  print_rec(body, values, t.shape(), 0, 0, is_floating(t.dtype()), 7);
  return fmt::format("tensor({}, shape={}, dtype={}, device={}{})", body, shape_str(t.shape()),
                     dtype_name(t.dtype()), t.device().str(), t.requires_grad() ? ", requires_grad" : "");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << to_string(t); }

}  // namespace rumus
