// Host side of gemm.comp: tile choice and the aligned (vec4) fast path.
#include "rumus/core/error.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {
struct GemmPush {
  std::uint32_t m, n, k, lda, ldb, ldc;
  std::uint32_t offset_a, offset_b, offset_c, batch_a, batch_b, batch_c;
  float alpha, beta;
};
}  // namespace

void VulkanBackend::gemm(const GemmArgs& g) {
  if (g.a.dtype != DType::f32 || g.b.dtype != DType::f32 || g.c.dtype != DType::f32)
    throw DTypeError("gemm: the Vulkan kernel multiplies f32 matrices, got " + std::string(dtype_name(g.a.dtype)) +
                     " x " + std::string(dtype_name(g.b.dtype)) + " -> " + std::string(dtype_name(g.c.dtype)));
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  GemmPush pc{std::uint32_t(g.m), std::uint32_t(g.n), std::uint32_t(g.k), std::uint32_t(g.lda),
              std::uint32_t(g.ldb), std::uint32_t(g.ldc), std::uint32_t(g.a.layout->offset),
              std::uint32_t(g.b.layout->offset), std::uint32_t(g.c.layout->offset), std::uint32_t(g.stride_a),
              std::uint32_t(g.stride_b), std::uint32_t(g.stride_c), float(g.alpha), float(g.beta)};
  if (g.k == 0) {  // C = beta * C
    pc.alpha = 0;
    pc.k = 0;
  }
  // Large tiles where they still give enough workgroups to fill a big GPU.
  auto tiles = [&](std::int64_t t) { return ((g.m + t - 1) / t) * ((g.n + t - 1) / t) * g.batch; };
  std::uint32_t tile = tiles(128) >= 264 ? 128 : tiles(64) >= 132 ? 64 : 32;
  std::uint32_t bk = tile == 32 ? 8 : 16;
  bool aligned = g.m % tile == 0 && g.n % tile == 0 && g.k % bk == 0 && g.k > 0;
  for (std::uint32_t v : {pc.lda, pc.ldb, pc.ldc, pc.offset_a, pc.offset_b, pc.offset_c, pc.batch_a, pc.batch_b,
                          pc.batch_c})
    if (v % 4) aligned = false;
  std::vector<std::uint32_t> spec = {(tile / 8) * (tile / 8), tile, tile, bk, g.trans_a ? 1u : 0u,
                                     g.trans_b ? 1u : 0u, aligned ? 1u : 0u};
  Operand ops[] = {{g.a, false}, {g.b, false}, {g.c, true}};
  launch("gemm", spec, ops, &pc, sizeof pc, std::uint32_t((g.n + tile - 1) / tile),
         std::uint32_t((g.m + tile - 1) / tile), std::uint32_t(g.batch));
}

}  // namespace rumus::vulkan
