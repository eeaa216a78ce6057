// CPU backend: memory, copies, fills, random numbers and GEMM.
#include "cpu_backend.hpp"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "../philox.hpp"
#include "cpu_loops.hpp"

namespace rumus {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

namespace cpu {

void* CpuBackend::allocate(std::size_t nbytes) {
  std::size_t rounded = (std::max<std::size_t>(nbytes, 1) + 63) & ~std::size_t(63);
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw Error("cpu: out of memory allocating " + std::to_string(nbytes) + " bytes");
  return p;
}

void CpuBackend::deallocate(void* data, std::size_t) { std::free(data); }

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

void CpuBackend::random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
                        double b) {
  // Contiguous output: element i (in logical order) draws counter offset + i.
  if (!out.layout->is_contiguous()) throw Error("random: cpu kernel needs a contiguous output");
  std::int64_t n = out.layout->numel();
  RUMUS_DISPATCH_ALL(out.dtype, "random", [&] {
    scalar_t* o = data_of<scalar_t>(out) + out.layout->offset;
    _Pragma("omp parallel for if (n > kParallelGrain) schedule(static)")
    for (std::int64_t i = 0; i < n; ++i) {
      auto r = philox::draw(seed, offset + std::uint64_t(i));
      double v = 0;
      switch (kind) {
        case RandomKind::uniform: v = a + (b - a) * philox::uniform24(r[0]); break;
        case RandomKind::normal: v = a + b * philox::normal(r[0], r[1]); break;
        case RandomKind::bernoulli: v = philox::uniform24(r[0]) < a ? 1.0 : 0.0; break;
        case RandomKind::randint: {
          std::uint64_t range = std::uint64_t(b - a);
          std::uint64_t bits = (std::uint64_t(r[0]) << 32) | r[1];
          v = a + double(bits % range);
          break;
        }
      }
      o[i] = store<scalar_t>(v);
    }
  });
}

void CpuBackend::gemm(const GemmArgs& g) {
  const auto ta = g.trans_a ? CblasTrans : CblasNoTrans, tb = g.trans_b ? CblasTrans : CblasNoTrans;
  auto run = [&](auto* a, auto* b, auto* c) {
    for (std::int64_t i = 0; i < g.batch; ++i) {
      auto pa = a + g.a.layout->offset + i * g.stride_a;
      auto pb = b + g.b.layout->offset + i * g.stride_b;
      auto pc = c + g.c.layout->offset + i * g.stride_c;
      if constexpr (std::is_same_v<std::remove_const_t<std::remove_pointer_t<decltype(a)>>, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, float(g.alpha), pa, g.lda, pb, g.ldb, float(g.beta), pc,
                    g.ldc);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, g.m, g.n, g.k, g.alpha, pa, g.lda, pb, g.ldb, g.beta, pc, g.ldc);
    }
  };
  if (g.c.dtype == DType::f32)
    run(data_of<float>(g.a), data_of<float>(g.b), data_of<float>(g.c));
  else if (g.c.dtype == DType::f64)
    run(data_of<double>(g.a), data_of<double>(g.b), data_of<double>(g.c));
  else
    throw DTypeError(std::string("gemm: cpu kernel supports f32 and f64, got ") +
                     std::string(dtype_name(g.c.dtype)));
}

}  // namespace cpu
}  // namespace rumus
