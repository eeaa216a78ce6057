// Host side of gemm_coopmat.comp: the tile chosen from the device's
// cooperative-matrix shapes, when the kernel applies, and its dispatch.
#include <algorithm>
#include <cstdio>

#include "gemm_coopmat.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {
constexpr std::uint32_t kUnit = 8;     // halves per 16-byte load and per shared-memory unit

bool valid_layout(const CoopMatTile& t, std::uint32_t max_shared, std::uint32_t max_threads) {
  if (t.wm == 0 || t.wn == 0 || t.bm % t.wm || t.bn % t.wn || t.wm % t.lm || t.wn % t.ln) return false;
  if ((t.bk != 32 && t.bk != 64) || t.bk % t.lk) return false;
  if (t.threads() > max_threads) return false;
  // Each invocation moves whole 16-byte units of both tiles, in either orientation.
  const std::uint32_t units_a = t.bm * t.bk / kUnit, units_b = t.bn * t.bk / kUnit;
  if (units_a % t.threads() || units_b % t.threads() || t.bm % kUnit || t.bn % kUnit) return false;
  return t.shared_bytes(true, true) <= max_shared && t.shared_bytes(false, false) <= max_shared;
}
}  // namespace

std::size_t CoopMatTile::shared_bytes(bool trans_a, bool trans_b) const {
  const std::size_t a = trans_a ? std::size_t(bk) * (bm / kUnit + 1) : std::size_t(bm) * (bk / kUnit + 1);
  const std::size_t b = trans_b ? std::size_t(bn) * (bk / kUnit + 1) : std::size_t(bk) * (bn / kUnit + 1);
  return 2 * (a + b) * 16 + std::size_t(threads() / subgroup) * lm * ln * 4;  // A and B double-buffered
}

std::optional<CoopMatTile> choose_coopmat_tile(std::span<const CoopMatShape> shapes, std::uint32_t subgroup_size,
                                               std::uint32_t max_shared_bytes, std::uint32_t max_threads,
                                               const std::string& layout) {
  CoopMatTile base;
  base.subgroup = subgroup_size;
  unsigned bm = 0, bn = 0, wm = 0, wn = 0, bk = 32;
  const int fields = layout.empty() ? 0 : std::sscanf(layout.c_str(), "%u,%u,%u,%u,%u", &bm, &bn, &wm, &wn, &bk);
  const bool custom = fields == 4 || fields == 5;
  std::optional<CoopMatTile> best;
  for (const CoopMatShape& s : shapes) {
    if (!s.subgroup_scope || s.a != CoopMatType::f16 || s.b != CoopMatType::f16 || s.c != CoopMatType::f32 ||
        s.d != CoopMatType::f32)
      continue;
    // The shader addresses shared memory in 8-half units and multiplies BK = 32 per slice.
    if (s.m == 0 || s.n == 0 || s.k == 0 || s.m % kUnit || s.n % kUnit || s.k % kUnit || base.bk % s.k) continue;
    CoopMatTile t = base;
    t.lm = s.m;
    t.ln = s.n;
    t.lk = s.k;
    if (custom) {
      CoopMatTile c = t;
      c.bm = bm;
      c.bn = bn;
      c.wm = wm;
      c.wn = wn;
      c.bk = bk;
      if (valid_layout(c, max_shared_bytes, max_threads)) t = c;
    }
    if (!valid_layout(t, max_shared_bytes, max_threads)) continue;
    auto volume = [](const CoopMatTile& x) { return std::uint64_t(x.lm) * x.ln * x.lk; };
    if (!best || volume(t) > volume(*best) || (volume(t) == volume(*best) && t.lk > best->lk)) best = t;
  }
  return best;
}

CoopMatTile fit_coopmat_tile(CoopMatTile t, std::int64_t m, std::int64_t n, std::uint32_t max_shared_bytes,
                             std::uint32_t max_threads) {
  for (bool narrowed = true; narrowed;) {
    narrowed = false;
    CoopMatTile c = t;
    if (m <= c.bm / 2 && c.wm / 2 >= c.lm) c.bm /= 2, c.wm /= 2;
    if (n <= c.bn / 2 && c.wn / 2 >= c.ln) c.bn /= 2, c.wn /= 2;
    if ((c.bm != t.bm || c.bn != t.bn) && valid_layout(c, max_shared_bytes, max_threads)) {
      t = c;
      narrowed = true;
    }
  }
  return t;
}

bool coopmat_gemm_applies(const Context& ctx, const GemmArgs& g) {
  if (!ctx.coopmat_tile) return false;
  if (g.a.dtype != DType::f16 || g.b.dtype != DType::f16) return false;
  if (g.c.dtype != DType::f16 && g.c.dtype != DType::f32) return false;
  // A short K (the Winograd products of 64 channels, a 1-channel im2col) runs
  // faster on the plain kernel, which converts f16 as it loads: ResNet-18's
  // amp step at batch 128 on an H100 1.20x faster, the MNIST CNN's 1.30x
  // (a bound of 256 gave ResNet-18 back 3-8 %).
  if (g.k < kShortK) return false;
  // A small product (the MNIST MLP's 512 x 512 layers: fewer than 132 tiles
  // of 64 x 64) over a K too short to split far: the plain kernel, whose 32 x 32
  // tiles fill the GPU without splitting K.
  if (g.batch == 1 && g.k < kLongK && ((g.m + 63) / 64) * ((g.n + 63) / 64) < 132) return false;
  // One workgroup per tile along x: the grid must fit the dispatch limits.
  const CoopMatTile& t = *ctx.coopmat_tile;
  const std::int64_t tiles = ((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn);
  return tiles <= std::int64_t(ctx.properties.limits.maxComputeWorkGroupCount[0]) &&
         g.batch <= std::int64_t(ctx.properties.limits.maxComputeWorkGroupCount[2]);
}

std::int64_t coopmat_split_k_slices(std::int64_t tiles, std::int64_t k, std::int64_t batch) {
  if (tiles <= 0 || !gemm_splits_k(tiles, k)) return 1;
  const std::int64_t most = std::max<std::int64_t>(1, std::min<std::int64_t>(32, k / 256));
  // Batched products over a K of 16,384 or more (Winograd's weight pass: 16
  // products of 64 x 64 channels over 32,768 tiles or more): about eight
  // waves. Measured on an H100 against two waves, ResNet-18's amp step ran
  // 1.01x faster at batch 128 and 1.04x at 512 (level and 1.03x with the bound
  // at 65,536). Single products (weight gradients over tokens) keep two.
  const std::int64_t target = batch > 1 && k >= 16384 ? 1056 : 264;
  return std::clamp<std::int64_t>((target + tiles - 1) / tiles, 1, most);
}

void coopmat_gemm(VulkanBackend& vk, const GemmArgs& g) {
  using Operand = VulkanBackend::Operand;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const auto& limits = vk.context().properties.limits;
  const CoopMatTile t = fit_coopmat_tile(*vk.context().coopmat_tile, g.m, g.n, limits.maxComputeSharedMemorySize,
                                         limits.maxComputeWorkGroupInvocations);
  push::GemmPush pc{std::uint32_t(g.m), std::uint32_t(g.n), std::uint32_t(g.k), std::uint32_t(g.lda),
                    std::uint32_t(g.ldb), std::uint32_t(g.ldc), std::uint32_t(g.a.layout->offset),
                    std::uint32_t(g.b.layout->offset), std::uint32_t(g.c.layout->offset), std::uint32_t(g.stride_a),
                    std::uint32_t(g.stride_b), std::uint32_t(g.stride_c), float(g.alpha), float(g.beta), 1,
                    std::uint32_t(g.k), 0u};  // no bias operand: gemm copies a bias into C first
  // 16-byte loads need every row start of A and B on a multiple of 8 halves;
  // whole-tile stores of C need the same of its rows.
  bool aligned = true;
  for (std::uint32_t v : {pc.M, pc.N, pc.K, pc.lda, pc.ldb, pc.ldc, pc.offset_a, pc.offset_b, pc.offset_c, pc.batch_a,
                          pc.batch_b, pc.batch_c})
    if (v % kUnit) aligned = false;
  std::vector<std::uint32_t> spec = {t.threads(), t.lm, t.ln, t.lk, t.bm, t.bn, t.wm, t.wn,
                                     g.trans_a ? 1u : 0u, g.trans_b ? 1u : 0u, g.c.dtype == DType::f16 ? 1u : 0u,
                                     aligned ? 1u : 0u, t.subgroup, t.bk};
  const std::uint32_t tiles = std::uint32_t(((g.m + t.bm - 1) / t.bm) * ((g.n + t.bn - 1) / t.bn));
  if (const std::int64_t want = coopmat_split_k_slices(std::int64_t(tiles) * g.batch, g.k, g.batch); want > 1) {
    pc.k_chunk = split_k_chunk(g.k, want, t.bk);
    const std::uint32_t splits = std::uint32_t((g.k + pc.k_chunk - 1) / pc.k_chunk);
    if (splits > 1) {
      spec[10] = 0;  // the slices are f32
      return gemm_split_k(vk, g, pc, splits, [&](TensorArg parts, const push::GemmPush& slices) {
        Operand ops[] = {{g.a, false}, {g.b, false}, {parts, true}};
        vk.launch(ShaderId::gemm_coopmat, spec, ops, &slices, sizeof slices, tiles, 1, std::uint32_t(g.batch) * splits);
      });
    }
    pc.k_chunk = pc.K;
  }
  Operand ops[] = {{g.a, false}, {g.b, false}, {g.c, true}};
  vk.launch(ShaderId::gemm_coopmat, spec, ops, &pc, sizeof pc, tiles, 1, std::uint32_t(g.batch));
}

}  // namespace rumus::vulkan
