// Names of the kernel codes, and helpers shared by the kernel families.
#include "attention.hpp"
#include "backend.hpp"
#include "gemm.hpp"
#include "pointwise.hpp"

#include <array>
#include <cmath>
#include <memory>

#include "kernel_registry.hpp"
#include "rumus/core/error.hpp"

namespace rumus {

#define RUMUS_NAME_ENTRY(name) #name,
std::string_view name_of(UnaryOp op) {
  static constexpr std::array<std::string_view, kUnaryOpCount> names{RUMUS_UNARY_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
std::string_view name_of(BinaryOp op) {
  static constexpr std::array<std::string_view, kBinaryOpCount> names{RUMUS_BINARY_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
std::string_view name_of(ReduceOp op) {
  static constexpr std::array<std::string_view, kReduceOpCount> names{RUMUS_REDUCE_OPS(RUMUS_NAME_ENTRY)};
  return names[static_cast<int>(op)];
}
#undef RUMUS_NAME_ENTRY

std::int64_t head_slots(const Layout& l) {
  const Shape &n = l.shape, &s = l.strides;
  const std::int64_t b = n[0], h = n[1], len = n[2], w = n[3];
  if (b * h * len * w == 0) return 0;
  auto fits = [&](int dim, std::int64_t want) { return n[std::size_t(dim)] <= 1 || s[std::size_t(dim)] == want; };
  if (fits(3, 1) && fits(2, w) && fits(1, len * w) && fits(0, h * len * w)) return 0;
  // Rows `row` apart; a single row's distance shows only in the batch stride.
  const std::int64_t row = len > 1 ? s[2] : b > 1 ? s[0] : h * w;
  const bool side_by_side = fits(3, 1) && fits(1, w) && fits(2, row) && fits(0, len * row);
  return side_by_side && row >= h * w && row % w == 0 ? row / w : -1;
}

namespace {
std::vector<RegisteredKernel>& kernel_list() {
  static std::vector<RegisteredKernel> list;
  return list;
}
}  // namespace

const std::vector<RegisteredKernel>& registered_kernels() { return kernel_list(); }

void detail::list_kernel(RegisteredKernel kernel) {
  for (const RegisteredKernel& k : kernel_list())
    if (k.name == kernel.name) return;
  kernel_list().push_back(kernel);
}

void gemm_relu_after(Backend& be, const GemmArgs& g) {
  GemmArgs product = g;
  product.relu = false;
  run_kernel<GemmKernel>(be, product);
  run_kernel<UnaryKernel>(be, UnaryOp::relu, g.c, g.c, 0.0, 0.0);
}

void gemm_bias_by_copy(Backend& be, const GemmArgs& g) {
  GemmArgs product = g;
  product.bias = {nullptr, DType::f32, nullptr};
  // The bias along C's last dim, broadcast over the rows (and batches).
  Layout spread{g.c.layout->shape, Shape(g.c.layout->shape.size(), 0), g.bias.layout->offset};
  spread.strides.back() = g.bias.layout->strides.back();
  const TensorArg bias{g.bias.storage, g.bias.dtype, &spread};
  if (g.beta == 0) {
    run_kernel<CopyKernel>(be, g.c, bias);
    product.beta = 1;
    run_kernel<GemmKernel>(be, product);  // a ReLU comes after the whole sum
  } else {
    product.relu = false;
    run_kernel<GemmKernel>(be, product);
    run_kernel<BinaryKernel>(be, BinaryOp::add, g.c, g.c, bias, 0.0, 0.0);
    if (g.relu) run_kernel<UnaryKernel>(be, UnaryOp::relu, g.c, g.c, 0.0, 0.0);
  }
}

}  // namespace rumus
