// CPU backend: memory, copies, fills, random numbers and GEMM.
#include "cpu_backend.hpp"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "../../core/openmp_environment.hpp"
#include "../philox.hpp"
#include "cpu_bernoulli.hpp"
#include "cpu_gemm.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

detail::DeviceProvider provider() {
  return {.kind = Device::Kind::cpu,
          .count = [] { return 1; },
          .name = [](int) { return std::string("cpu"); },
          .accelerator = [](int) { return false; },
          .make = [](int) -> std::unique_ptr<DeviceBackend> { return std::make_unique<CpuBackend>(); }};
}

bool CpuBackend::supports(Kernel kernel, DType dtype) const {
  switch (kernel) {
    case Kernel::fill: case Kernel::copy: case Kernel::where: case Kernel::reduce: case Kernel::random:
    case Kernel::binary: case Kernel::index_select:
      return true;
    case Kernel::gemm:  // 16-bit operands through f32 (cpu_backend.cpp)
      return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
    case Kernel::conv2d_forward: case Kernel::conv2d_backward_data: case Kernel::conv2d_backward_weight:
      return dtype == DType::f32;  // oneDNN; f64 convolutions are lowered to im2col + GEMM
    case Kernel::sgd_step: case Kernel::adam_step:  // other dtypes are composed in ops
      return dtype == DType::f32 || dtype == DType::f64;
    case Kernel::unary: case Kernel::im2col: case Kernel::col2im:
    case Kernel::pool2d_forward: case Kernel::pool2d_backward: case Kernel::softmax_forward:
    case Kernel::softmax_backward: case Kernel::index_add:
      return is_floating(dtype);
    case Kernel::attention_forward: case Kernel::attention_backward:
    case Kernel::layer_norm_forward: case Kernel::layer_norm_backward:
      return dtype == DType::f32 || dtype == DType::f64;
    case Kernel::dropout_forward:
      return dtype == DType::f32;
    case Kernel::amp_unscale:
      return dtype == DType::f32 || dtype == DType::f64;
  }
  return false;
}

CpuBackend::CpuBackend() { detail::settle_openmp_environment(); }

// Large blocks are kept for reuse by exact size: a training step allocates the
// same buffers every iteration, and fresh pages cost a page fault each (tens of
// milliseconds per step for the CNN's im2col buffers).
namespace {
constexpr std::size_t kCacheMin = std::size_t(1) << 16;     // smaller blocks: malloc's own bins are fast
constexpr std::size_t kCacheLimit = std::size_t(1) << 30;   // most bytes kept idle
std::size_t rounded(std::size_t nbytes) { return (std::max<std::size_t>(nbytes, 1) + 63) & ~std::size_t(63); }
}  // namespace

void* CpuBackend::allocate(std::size_t nbytes) {
  const std::size_t size = rounded(nbytes);
  // Counted before the allocation can fail or come from the cache: the figure is what tensors hold.
  const std::size_t now = in_use_.fetch_add(size) + size;
  for (std::size_t peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
  }
  if (size >= kCacheMin) {
    std::lock_guard lk(cache_mu_);
    auto it = cache_.find(size);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cached_bytes_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) {
    in_use_.fetch_sub(size);
    throw OutOfMemoryError("cpu: out of memory allocating " + std::to_string(nbytes) + " bytes");
  }
  return p;
}

void CpuBackend::deallocate(void* data, std::size_t nbytes) {
  const std::size_t size = rounded(nbytes);
  in_use_.fetch_sub(size);
  if (size >= kCacheMin) {
    std::lock_guard lk(cache_mu_);
    if (cached_bytes_ + size <= kCacheLimit) {
      cache_.emplace(size, data);
      cached_bytes_ += size;
      return;
    }
  }
  std::free(data);
}

DeviceStats CpuBackend::stats() const {
  DeviceStats s;
  s.bytes_in_use = in_use_.load();
  s.peak_bytes_in_use = peak_.load();
  std::lock_guard lk(cache_mu_);
  s.bytes_reserved = s.bytes_in_use + cached_bytes_;
  s.blocks = cache_.size();
  return s;
}

void CpuBackend::write(Storage& dst, std::size_t off, const void* src, std::size_t n) {
  std::memcpy(static_cast<char*>(dst.data()) + off, src, n);
}

void CpuBackend::read(const Storage& src, std::size_t off, void* dst, std::size_t n) {
  std::memcpy(dst, static_cast<const char*>(src.data()) + off, n);
}

void CpuBackend::fill(TensorArg out, double value) {
  RUMUS_DISPATCH_ALL(out.dtype, "fill", [&] {
    scalar_t v = store<scalar_t>(value);
    scalar_t* o = data_of<scalar_t>(out);
    for_each_run(make_iter<1>(out.layout->shape, {out.layout}), [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = v;
    });
  });
}

void CpuBackend::copy(TensorArg out, TensorArg in) {
  auto it = make_iter<2>(out.layout->shape, {out.layout, in.layout});
  RUMUS_DISPATCH_ALL(out.dtype, "copy", [&] {
    using out_t = scalar_t;
    out_t* o = data_of<out_t>(out);
    RUMUS_DISPATCH_ALL(in.dtype, "copy", [&] {
      const scalar_t* x = data_of<scalar_t>(in);
      for_each_run(it, [&](auto off, std::int64_t n, auto st) {
        out_t* po = o + off[0];
        const scalar_t* px = x + off[1];
        if constexpr (std::is_same_v<out_t, scalar_t>) {
          if (st[0] == 1 && st[1] == 1) {
            std::memcpy(po, px, n * sizeof(out_t));
            return;
          }
        }
        for (std::int64_t i = 0; i < n; ++i) po[i * st[0]] = store<out_t>(load(px[i * st[1]]));
      });
    });
  });
}

void CpuBackend::where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) {
  auto it = make_iter<4>(out.layout->shape, {out.layout, cond.layout, a.layout, b.layout});
  if (cond.dtype != DType::u8) throw DTypeError("where: cpu kernel needs a u8 condition");
  const std::uint8_t* c = data_of<std::uint8_t>(cond);
  RUMUS_DISPATCH_ALL(out.dtype, "where", [&] {
    scalar_t* o = data_of<scalar_t>(out);
    const scalar_t* pa = data_of<scalar_t>(a);
    const scalar_t* pb = data_of<scalar_t>(b);
    for_each_run(it, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i)
        o[off[0] + i * st[0]] = c[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
    });
  });
}

namespace {
// bernoulli_f32 over [0, n) in chunks that start on whole draws, across the team.
void bernoulli_chunks(float* o, std::int64_t n, std::uint64_t seed, std::uint64_t offset, std::uint32_t limit,
                      float value, const float* x, float* y) {
  const std::int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
  _Pragma("omp parallel for if (chunks > 1) schedule(dynamic, 1)")
  for (std::int64_t c = 0; c < chunks; ++c)
    bernoulli_f32(o, c * chunk, std::min(n, (c + 1) * chunk), seed, offset, limit, value, x, y);
}
}  // namespace

void CpuBackend::dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed,
                                 std::uint64_t offset, double keep, double scale) {
  for (TensorArg t : {out, mask, in})
    if (!t.layout->is_contiguous() || t.dtype != DType::f32)
      throw Error("dropout_forward: cpu kernel needs contiguous f32 operands");
  bernoulli_chunks(data_of<float>(mask) + mask.layout->offset, out.layout->numel(), seed, offset,
                   std::uint32_t(std::ceil(keep * 16777216.0)), float(scale), data_of<float>(in) + in.layout->offset,
                   data_of<float>(out) + out.layout->offset);
}

void CpuBackend::random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
                        double b, TensorArg /*state: the CPU runs at once, with seed and offset*/) {
  // Contiguous output: element i (in logical order) draws counter offset + i.
  if (!out.layout->is_contiguous()) throw Error("random: cpu kernel needs a contiguous output");
  std::int64_t n = out.layout->numel();
  if (kind == RandomKind::bernoulli) {
    // b where uniform24(r) < a, decided on the 24-bit integer; four elements per draw.
    const auto limit = std::uint32_t(std::ceil(a * 16777216.0));
    if (out.dtype == DType::f32) {
      bernoulli_chunks(data_of<float>(out) + out.layout->offset, n, seed, offset, limit, float(b), nullptr, nullptr);
      return;
    }
    RUMUS_DISPATCH_ALL(out.dtype, "random", [&] {
      scalar_t* o = data_of<scalar_t>(out) + out.layout->offset;
      const scalar_t hit = store<scalar_t>(b), miss = store<scalar_t>(0.0);
      _Pragma("omp parallel for if (n > 16384) schedule(static)")
      for (std::int64_t i = 0; i < n; i += 4) {
        const auto r = philox::draw(seed, offset + std::uint64_t(i / 4));
        for (std::int64_t j = 0; j < 4 && i + j < n; ++j) o[i + j] = (r[j] >> 8) < limit ? hit : miss;
      }
    });
    return;
  }
  RUMUS_DISPATCH_ALL(out.dtype, "random", [&] {
    scalar_t* o = data_of<scalar_t>(out) + out.layout->offset;
    auto fill_with = [&](auto draw) {
      _Pragma("omp parallel for if (n > kParallelGrain / 8) schedule(dynamic, 4096)")
      for (std::int64_t i = 0; i < n; ++i) o[i] = store<scalar_t>(draw(philox::draw(seed, offset + std::uint64_t(i))));
    };
    switch (kind) {
      case RandomKind::uniform:
        fill_with([&](auto r) { return a + (b - a) * philox::uniform24(r[0]); });
        break;
      case RandomKind::normal:
        fill_with([&](auto r) { return a + b * philox::normal(r[0], r[1]); });
        break;
      case RandomKind::bernoulli:  // above
        break;
      case RandomKind::randint: {
        const std::uint64_t range = std::uint64_t(b - a);
        fill_with([&](auto r) { return a + double(((std::uint64_t(r[0]) << 32) | r[1]) % range); });
        break;
      }
    }
  });
}

namespace {

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

constexpr std::int64_t kParallelConvert = std::int64_t(1) << 16;  // elements; fewer convert on one thread

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
// or row blocks of C).
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

void CpuBackend::gemm(const GemmArgs& g) {
  if (g.bias.storage) return gemm_bias_by_copy(*this, g);
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
    if constexpr (std::is_same_v<T, float>) {
      // oneDNN splits one product over the team itself; inside a parallel loop it runs single-threaded.
      if (threads > 1 && g.batch >= 2 * threads && g.stride_c != 0) {
        _Pragma("omp parallel for schedule(dynamic, 1)")
        for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
      } else {
        for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
      }
      return;
    }
    const double flops = 2.0 * double(g.m) * double(g.n) * double(g.k) * double(g.batch);
    if (threads == 1 || flops < 4e6) {
      for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
    } else if (g.batch >= 2 * threads && g.stride_c != 0) {
      _Pragma("omp parallel for schedule(dynamic, 1)")
      for (std::int64_t i = 0; i < g.batch; ++i) block(i, 0, g.m, 0, g.n);
    } else {
      // Tasks of whole 16-column (or row) units keep each share aligned to the
      // micro-kernels. Big products get several tasks per thread, taken
      // dynamically, so a preempted thread does not stall the rest; small ones
      // one per thread, as every task repacks the shared operand.
      const bool by_cols = g.n >= g.m;
      const std::int64_t extent = by_cols ? g.n : g.m, units = (extent + 15) / 16;
      const std::int64_t per_thread = std::clamp<std::int64_t>(std::int64_t(flops / 64e6), 1, 4);
      const std::int64_t tasks = std::min<std::int64_t>(units, per_thread * threads);
      _Pragma("omp parallel for schedule(dynamic, 1) collapse(2)")
      for (std::int64_t i = 0; i < g.batch; ++i)
        for (std::int64_t t = 0; t < tasks; ++t) {
          const std::int64_t lo = std::min(extent, units * t / tasks * 16);
          const std::int64_t hi = std::min(extent, units * (t + 1) / tasks * 16);
          if (by_cols) block(i, 0, g.m, lo, hi);
          else block(i, lo, hi, 0, g.n);
        }
    }
  };
  auto at = [](auto* base, TensorArg t) { return base + t.layout->offset; };
  if (is_16bit(g.a.dtype) || is_16bit(g.b.dtype) || is_16bit(g.c.dtype)) {
    // 16-bit operands are widened to f32, multiplied by the f32 kernel and the
    // result narrowed once: f32 accumulation, as the GPU kernels do.
    const std::int64_t rows[2] = {g.trans_a ? g.k : g.m, g.trans_b ? g.n : g.k};
    const std::int64_t cols[2] = {g.trans_a ? g.m : g.k, g.trans_b ? g.k : g.n};
    const std::int64_t ld[2] = {g.lda, g.ldb}, stride[2] = {g.stride_a, g.stride_b};
    const TensorArg in[2] = {g.a, g.b};
    // Scratch from this backend's block cache: fresh pages would cost a page
    // fault each on every call (most of the time, measured on the CNN).
    struct Scratch {
      CpuBackend& be;
      std::size_t bytes;
      float* p;
      Scratch(CpuBackend& b, std::int64_t n)
          : be(b), bytes(std::size_t(std::max<std::int64_t>(n, 1)) * 4), p(static_cast<float*>(b.allocate(bytes))) {}
      ~Scratch() { be.deallocate(p, bytes); }
    };
    const std::int64_t spans[3] = {span(g.batch, stride[0], rows[0], ld[0], cols[0]),
                                   span(g.batch, stride[1], rows[1], ld[1], cols[1]),
                                   span(g.batch, g.stride_c, g.m, g.ldc, g.n)};
    Scratch wa(*this, spans[0]), wb(*this, spans[1]), wc(*this, spans[2]);
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
