#pragma once
// One matrix product on the calling thread: C = alpha op(A) op(B) + beta C,
// row-major. f32 runs on oneDNN's sgemm (inside a parallel region it stays on
// the calling thread), f64 on OpenBLAS's dgemm, kept to one thread: rumus's
// OpenMP team does the splitting. the GEMM kernel (gemm.cpp) calls it for each block it
// hands a thread; the attention kernel for each tile.
#include <cstdint>

namespace rumus::cpu {

void gemm_on_this_thread(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                         const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                         std::int64_t ldc);
void gemm_on_this_thread(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                         const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
                         std::int64_t ldc);

// Keeps OpenBLAS to one thread; call before a parallel region runs f64 products.
void openblas_single_threaded();

}  // namespace rumus::cpu
