// CPU kernels of the random family (../random.hpp): philox draws, the
// elements of a contiguous output spread over threads in whole draws.
#include "../random.hpp"

#include <algorithm>
#include <cmath>

#include "../philox.hpp"
#include "cpu_backend.hpp"
#include "cpu_bernoulli.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {

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

void dropout_forward(Backend& be, TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed,
                                 std::uint64_t offset, double keep, double scale) {
  for (TensorArg t : {out, mask, in})
    if (!t.layout->is_contiguous() || t.dtype != DType::f32)
      throw Error("dropout_forward: cpu kernel needs contiguous f32 operands");
  bernoulli_chunks(data_of<float>(mask) + mask.layout->offset, out.layout->numel(), seed, offset,
                   std::uint32_t(std::ceil(keep * 16777216.0)), float(scale), data_of<float>(in) + in.layout->offset,
                   data_of<float>(out) + out.layout->offset);
}

void random(Backend& be, RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
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

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, random) {
  register_kernel<RandomKernel>(Device::Kind::cpu, kAllDTypes, &cpu::random);
  register_kernel<DropoutForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::dropout_forward);
}

}  // namespace rumus
