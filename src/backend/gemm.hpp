#pragma once
// The GEMM family: C = alpha * op(A) op(B) + beta * C (+ bias), batched, on
// strided operands (src/ops/linalg.cpp, conv.cpp).
#include "kernel_registry.hpp"

namespace rumus {

// How packed operands are laid out (GemmArgs::packed).
struct GemmPacking {
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1;
};

struct GemmArgs {
  // batch products C [m, n] = op(A) op(B) of packed operands: row-major, each
  // matrix right after the one before (A stored [k, m] when trans_a, B [n, k]
  // when trans_b). Set alpha, beta, bias or a leading dim afterwards where
  // they differ.
  static GemmArgs packed(TensorArg a, TensorArg b, TensorArg c, std::int64_t m, std::int64_t n, std::int64_t k,
                         GemmPacking p = {}) {
    GemmArgs g{a, b, c};
    g.batch = p.batch;
    g.m = m;
    g.n = n;
    g.k = k;
    g.trans_a = p.trans_a;
    g.trans_b = p.trans_b;
    g.lda = p.trans_a ? m : k;
    g.ldb = p.trans_b ? k : n;
    g.ldc = n;
    g.stride_a = m * k;
    g.stride_b = k * n;
    g.stride_c = m * n;
    return g;
  }

  TensorArg a, b, c;            // offsets come from the layouts
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // batch strides; 0 = shared
  double alpha = 1.0, beta = 0.0;
  // Optional [n] vector (C's dtype) added to every row of C after the product:
  // linear's bias, in the GEMM's epilogue where the backend has one.
  TensorArg bias{nullptr, DType::f32, nullptr};
  // C = max(C, 0) last (linear_relu), in the epilogue where the backend has one.
  bool relu = false;
};

struct GemmKernel {
  static constexpr std::string_view name = "gemm";
  using Fn = void(Backend&, const GemmArgs& args);
};

// C = alpha * op(A) op(B) + beta * C + bias for a backend without a bias
// epilogue: the bias is copied into C and the product added with beta = 1
// (beta = 0), or added after the product (otherwise).
void gemm_bias_by_copy(Backend& be, const GemmArgs& g);

// The product with `relu` for a backend (or a path) without a ReLU epilogue:
// the product, then the ReLU in place on C.
void gemm_relu_after(Backend& be, const GemmArgs& g);

}  // namespace rumus
