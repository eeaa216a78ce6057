// CPU kernels of the GEMM family (../gemm.hpp).
#include "../gemm.hpp"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu_backend.hpp"
#include "cpu_gemm.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

namespace {

constexpr std::int64_t kParallelConvert = std::int64_t(1) << 16;  // elements; fewer convert on one thread
constexpr double kOneThreadFlops = 4e6;                            // smaller products run on one thread

// Keeps oneDNN (which threads on the OpenMP team) to the calling thread while
// it lives.
class OnThisThreadOnly {
 public:
  OnThisThreadOnly() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OnThisThreadOnly() { omp_set_num_threads(threads_); }
  OnThisThreadOnly(const OnThisThreadOnly&) = delete;
  OnThisThreadOnly& operator=(const OnThisThreadOnly&) = delete;

 private:
  int threads_;
};

// Elements a batched, strided operand reaches from its offset.
std::int64_t span(std::int64_t batch, std::int64_t stride, std::int64_t rows, std::int64_t ld, std::int64_t cols) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// n elements of t from its offset, as f32 (t may be f32, f16 or bf16).
void widen(TensorArg t, float* out, std::int64_t n) {
  const std::int64_t off = t.layout->offset;
  switch (t.dtype) {
    case DType::f32: std::copy_n(data_of<float>(t) + off, n, out); break;
    case DType::f16: {
      const Half* p = data_of<Half>(t) + off;
#pragma omp parallel for if (n >= kParallelConvert)
      for (std::int64_t i = 0; i < n; ++i) out[i] = float(p[i]);
      break;
    }
    case DType::bf16: {
      const BFloat16* p = data_of<BFloat16>(t) + off;
#pragma omp parallel for if (n >= kParallelConvert)
      for (std::int64_t i = 0; i < n; ++i) out[i] = float(p[i]);
      break;
    }
    default: throw DTypeError("gemm: cpu kernel cannot mix " + std::string(dtype_name(t.dtype)) + " with 16-bit operands");
  }
}

void narrow(TensorArg t, const float* in, std::int64_t n) {
  const std::int64_t off = t.layout->offset;
  switch (t.dtype) {
    case DType::f32: std::copy_n(in, n, data_of<float>(t) + off); break;
    case DType::f16: {
      Half* p = data_of<Half>(t) + off;
#pragma omp parallel for if (n >= kParallelConvert)
      for (std::int64_t i = 0; i < n; ++i) p[i] = Half(in[i]);
      break;
    }
    case DType::bf16: {
      BFloat16* p = data_of<BFloat16>(t) + off;
#pragma omp parallel for if (n >= kParallelConvert)
      for (std::int64_t i = 0; i < n; ++i) p[i] = BFloat16(in[i]);
      break;
    }
    default: throw DTypeError("gemm: cpu kernel cannot write " + std::string(dtype_name(t.dtype)));
  }
}

}  // namespace

// GEMM: f32 on oneDNN, which dispatches on the instruction set the CPU really
// has and threads on the OpenMP team rumus's loops use. oneDNN has no f64 GEMM,
// so f64 (gradient checks, references) stays on a single-threaded OpenBLAS
// whose calls are split across the team here (by batch entry, else by column
// or row blocks of C), as are f32 products with B transposed. Products below
// kOneThreadFlops run on the calling thread alone.
void gemm_on_this_thread(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                         const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                         std::int64_t ldc) {
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success) throw DeviceError("gemm: oneDNN sgemm failed with status " + std::to_string(int(st)));
}

void gemm_on_this_thread(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                         const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c,
                         std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(m),
              blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

void openblas_single_threaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

void gemm(Backend& be, const GemmArgs& g) {
  if (g.relu) return gemm_relu_after(be, g);
  if (g.bias.storage) return gemm_bias_by_copy(be, g);
  openblas_single_threaded();
  // Pointers are at the operands' offsets.
  auto run = [&](auto* a, auto* b, auto* c) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(a)>>;
    // C[i][r0:r1, c0:c1] for one batch entry.
    auto block = [&](std::int64_t i, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1) {
      if (r0 >= r1 || c0 >= c1) return;
      const T* pa = a + i * g.stride_a + (g.trans_a ? r0 : r0 * g.lda);
      const T* pb = b + i * g.stride_b + (g.trans_b ? c0 * g.ldb : c0);
      T* pc = c + i * g.stride_c + r0 * g.ldc + c0;
      gemm_on_this_thread(g.trans_a, g.trans_b, r1 - r0, c1 - c0, g.k, T(g.alpha), pa, g.lda, pb, g.ldb, T(g.beta),
                          pc, g.ldc);
    };
    const int threads = omp_get_max_threads();
    const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
    // Splits one product over the team: tasks of whole 16-column (or row)
    // units keep each share aligned to the micro-kernels, `per_thread` tasks
    // per thread, taken dynamically so that a preempted thread does not stall
    // the rest.
    auto split = [&](std::int64_t per_thread) {
      const bool by_cols = g.n >= g.m;
      const std::int64_t extent = by_cols ? g.n : g.m, units = (extent + 15) / 16;
      const std::int64_t tasks = std::min<std::int64_t>(units, per_thread * threads);
      _Pragma("omp parallel for schedule(dynamic, 1) collapse(2)")
      for (std::int64_t i = 0; i < g.batch; ++i)
        for (std::int64_t t = 0; t < tasks; ++t) {
          const std::int64_t lo = std::min(extent, units * t / tasks * 16);
          const std::int64_t hi = std::min(extent, units * (t + 1) / tasks * 16);
          if (by_cols) block(i, 0, g.m, lo, hi);
          else block(i, lo, hi, 0, g.n);
        }
    };
    if (threads == 1 || flops < kOneThreadFlops) {
      // Waking the team costs more than a small product (~25 us against ~5 us
      // for an MLP's 64x512x10 on a 2-core VM), and oneDNN would wake it.
      OnThisThreadOnly serial;
      for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
      return;
    }
    if (g.batch >= 2 * threads && g.stride_c != 0) {  // a product per task (oneDNN stays on its thread there)
      _Pragma("omp parallel for schedule(dynamic, 1)")
      for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
      return;
    }
    // Small products get one task per thread, as every task repacks the shared
    // operand; big ones up to four.
    const std::int64_t per_thread = std::clamp<std::int64_t>(std::int64_t(flops / 64e6), 1, 4);
    if constexpr (std::is_same_v<T, float>) {
      // oneDNN splits a product over the team itself, but op(A) op(B)^T badly
      // (a linear layer's forward, 64x512x512, took as long on two threads as
      // on one, and 1.2-2x longer than split here at 32-192 rows).
      if (g.trans_b && !g.trans_a) return split(per_thread);
      for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
      return;
    }
    split(per_thread);
  };
  auto at = [](auto* base, TensorArg t) { return base + t.layout->offset; };
  if (is_16bit_float(g.a.dtype) || is_16bit_float(g.b.dtype) || is_16bit_float(g.c.dtype)) {
    // 16-bit operands are widened to f32, multiplied by the f32 kernel and the
    // result narrowed once: f32 accumulation, as the GPU kernels do.
    const std::int64_t rows[2] = {g.trans_a ? g.k : g.m, g.trans_b ? g.n : g.k};
    const std::int64_t cols[2] = {g.trans_a ? g.m : g.k, g.trans_b ? g.k : g.n};
    const std::int64_t ld[2] = {g.lda, g.ldb}, stride[2] = {g.stride_a, g.stride_b};
    const TensorArg in[2] = {g.a, g.b};
    // Scratch from this backend's block cache: fresh pages would cost a page
    // fault each on every call (most of the time, measured on the CNN).
    struct Scratch {
      Backend& be;
      std::size_t bytes;
      float* p;
      Scratch(Backend& b, std::int64_t n)
          : be(b), bytes(std::size_t(std::max<std::int64_t>(n, 1)) * 4), p(static_cast<float*>(b.allocate(bytes))) {}
      ~Scratch() { be.deallocate(p, bytes); }
    };
    const std::int64_t spans[3] = {span(g.batch, stride[0], rows[0], ld[0], cols[0]),
                                   span(g.batch, stride[1], rows[1], ld[1], cols[1]),
                                   span(g.batch, g.stride_c, g.m, g.ldc, g.n)};
    Scratch wa(be, spans[0]), wb(be, spans[1]), wc(be, spans[2]);
    widen(in[0], wa.p, spans[0]);
    widen(in[1], wb.p, spans[1]);
    // C is read even when beta == 0: the gaps between its rows (ldc > n) are
    // written back, and must come back unchanged (16-bit values round-trip exactly).
    widen(g.c, wc.p, spans[2]);
    run(wa.p, wb.p, wc.p);
    narrow(g.c, wc.p, spans[2]);
    return;
  }
  if (g.c.dtype == DType::f32)
    run(at(data_of<float>(g.a), g.a), at(data_of<float>(g.b), g.b), at(data_of<float>(g.c), g.c));
  else if (g.c.dtype == DType::f64)
    run(at(data_of<double>(g.a), g.a), at(data_of<double>(g.b), g.b), at(data_of<double>(g.c), g.c));
  else
    throw DTypeError(std::string("gemm: cpu kernel supports f32, f64, f16 and bf16, got ") +
                     std::string(dtype_name(g.c.dtype)));
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, gemm) {
  register_kernel<GemmKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::gemm);
}

}  // namespace rumus
