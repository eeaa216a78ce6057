// Host side of gemm.comp: tile choice, the aligned (vec4) fast path, and the
// operand dtypes (f32, or f16/bf16 inputs with f32 accumulation).
#include <cstdlib>
#include <cstdio>

#include "rumus/core/error.hpp"
#include "../../core/env.hpp"
#include "../gemm.hpp"
#include "gemm_coopmat.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::GemmPush;
using Operand = VulkanBackend::Operand;

// gemm.comp's IN_TYPE / OUT_TYPE codes.
std::uint32_t type_code(DType t) { return t == DType::f16 ? 1u : t == DType::bf16 ? 2u : 0u; }

// f32 x f32 -> f32, f64 x f64 -> f64, or 16-bit x 16-bit (both the same) -> f32 or that 16-bit dtype.
void check_dtypes(const GemmArgs& g) {
  const DType in = g.a.dtype;
  const bool ok = g.b.dtype == in && (in == DType::f32 || in == DType::f64
                                          ? g.c.dtype == in
                                          : (in == DType::f16 || in == DType::bf16) &&
                                                (g.c.dtype == in || g.c.dtype == DType::f32));
  if (!ok)
    throw DTypeError("gemm: the Vulkan kernel multiplies f32 x f32 -> f32, f64 x f64 -> f64, or f16/bf16 pairs into "
                     "the same dtype or f32, got " + std::string(dtype_name(g.a.dtype)) + " x " +
                     std::string(dtype_name(g.b.dtype)) + " -> " + std::string(dtype_name(g.c.dtype)));
}

// gemm_f64.comp: one 32 x 32 tile of C per workgroup, no split K or tuning.
void push_f64_gemm(const GemmArgs& g, push::GemmF64Push& pc) {
  pc = {std::uint32_t(g.m), std::uint32_t(g.n), std::uint32_t(g.k), std::uint32_t(g.lda), std::uint32_t(g.ldb),
        std::uint32_t(g.ldc), std::uint32_t(g.a.layout->offset), std::uint32_t(g.b.layout->offset),
        std::uint32_t(g.c.layout->offset), std::uint32_t(g.stride_a), std::uint32_t(g.stride_b),
        std::uint32_t(g.stride_c), 0, 0, 0, 0};
  push::split_double(g.k == 0 ? 0.0 : g.alpha, pc.alpha_lo, pc.alpha_hi);  // k == 0: C = beta * C
  push::split_double(g.beta, pc.beta_lo, pc.beta_hi);
}
}  // namespace

void gemm(Backend& be, const GemmArgs& g) {
  VulkanBackend& vk = device_of(be);
  const Context& ctx = vk.context();
  check_dtypes(g);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  // gemm.comp adds a dense bias of C's dtype in its epilogue; other kernels get it copied into C.
  const bool bias = g.bias.storage != nullptr;
  if (bias && (g.a.dtype == DType::f64 || g.bias.dtype != g.c.dtype || g.bias.layout->strides.back() != 1 ||
               coopmat_gemm_applies(ctx, g)))
    return gemm_bias_by_copy(vk, g);
  if (g.a.dtype == DType::f64) {
    if (g.relu) return gemm_relu_after(vk, g);  // gemm_f64.comp has no ReLU epilogue
    push::GemmF64Push pc;
    push_f64_gemm(g, pc);
    Operand ops[] = {{g.a, false}, {g.b, false}, {g.c, true}};
    vk.launch(ShaderId::gemm_f64, {g.trans_a ? 1u : 0u, g.trans_b ? 1u : 0u}, ops, &pc, sizeof pc,
              std::uint32_t((g.n + 31) / 32), std::uint32_t((g.m + 31) / 32), std::uint32_t(g.batch));
    return;
  }
  if (coopmat_gemm_applies(ctx, g)) return g.relu ? gemm_relu_after(vk, g) : coopmat_gemm(vk, g);  // f16 on the matrix units
  GemmPush pc{std::uint32_t(g.m), std::uint32_t(g.n), std::uint32_t(g.k), std::uint32_t(g.lda),
              std::uint32_t(g.ldb), std::uint32_t(g.ldc), std::uint32_t(g.a.layout->offset),
              std::uint32_t(g.b.layout->offset), std::uint32_t(g.c.layout->offset), std::uint32_t(g.stride_a),
              std::uint32_t(g.stride_b), std::uint32_t(g.stride_c), float(g.alpha), float(g.beta), 1,
              std::uint32_t(g.k), bias ? std::uint32_t(g.bias.layout->offset) : 0u};
  if (g.k == 0) {  // C = beta * C
    pc.alpha = 0;
    pc.K = 0;
  }
  // Tile (bm x bn; 8 x 8 per invocation, K sliced in groups on 64 x 64): 128 on a side unless the matrix is
  // thinner, then smaller tiles while the grid has fewer than 256 (on an H200,
  // 8192 x 256 products ran 1.08x faster in 256 tiles of 64 x 128 than in 512
  // of 64 x 64, and slower in 128 of 128 x 128: bench/RESULTS.md at 7811d18).
  auto tiles = [&](std::int64_t bm, std::int64_t bn) { return ((g.m + bm - 1) / bm) * ((g.n + bn - 1) / bn) * g.batch; };
  std::uint32_t bm = g.m <= 64 ? 64 : 128, bn = g.n <= 64 ? 64 : 128;
  // A long K over 64 to 255 tiles of 128 x 128 (a 1024³ product): those
  // tiles, unsplit. Measured on an H100: 1024³ 1.21x faster than in 256
  // tiles of 64 x 64 (0.79 of cuBLAS against 0.65), 2048³ and 4096³ level
  // (split, 1024³ ran 0.53x), ResNet-18 f32 level. Thin products (M or N up
  // to 64) were not measured so and keep the rule below.
  const bool long_k = g.batch == 1 && g.k >= 1024 && g.m > 64 && g.n > 64 && tiles(128, 128) >= 64;
  if (!long_k && tiles(bm, bn) < 256 && bm == 128) bm = 64;
  if (!long_k && tiles(bm, bn) < 256 && bn == 128) bn = 64;
  // Too few 64 x 64 tiles to fill the GPU over a K long enough to split, and
  // K under kLongK: 32 x 32 tiles, four times as many, fewer slices or none.
  // Measured on an H100: the MNIST MLP at batch 512 1.29x faster (its 512 x
  // 512 products over K = 512 and 784, then 256 tiles unsplit), at batch 64
  // 1.01x (its first layer, 64 x 512 x 784, in 32 tiles); char_lm's weight
  // gradients over K = 4,096 lost 5 % (f32) and 19 % (amp) on them, hence kLongK.
  if (bm == 64 && bn == 64 && gemm_splits_k(tiles(64, 64), g.k) && g.k < kLongK)
    bm = bn = 32;
  // A handful of tiles over a long K (the MNIST CNN's fc1 at batch 64: K =
  // 9,216, two 64 x 64 tiles): four times as many 32 x 32 ones, so that K is
  // cut into fewer slices. Its step 1.05x faster on an H100, char_lm level.
  if (bm == 64 && bn == 64 && g.batch == 1 && g.k >= kLongK && tiles(64, 64) <= 8) bm = bn = 32;
  // 128 x 128 x 8 measured fastest on an H200; 64 x 64 and 32 x 32 tiles take
  // 32, 8 (or 4) for each of their K groups.
  std::uint32_t bk = bm == bn && bm <= 64 ? 32 : 8;
  if (auto tile = gemm_tile_for(vk, g, {bm, bn, bk})) {  // measured on this device (gemm_tune.cpp)
    bm = tile->bm;
    bn = tile->bn;
    bk = tile->bk;
  }
  // Few output tiles but a long K (e.g. a weight gradient summed over a batch):
  // split K across workgroups so the whole GPU works, then add the slices.
  std::uint32_t splits = 1;
  if (!long_k && gemm_splits_k(tiles(bm, bn), g.k)) {
    std::int64_t want = (264 + tiles(bm, bn) - 1) / tiles(bm, bn);
    // A K of 8,192 or more (weight gradients over many tokens): up to 16
    // slices, about 1,056 workgroups. Measured on an H200 (char_lm, context
    // 1024, bench/RESULTS.md at cf1fd47): its three weight-gradient products with their
    // slice sums 1.15x faster in 17-22 slices than in 5-6, slower in 32-43.
    if (g.k >= 8192 && want < 16) want = std::min<std::int64_t>(16, (1056 + tiles(bm, bn) - 1) / tiles(bm, bn));
    // Batched products of a handful of tiles each and a long K (Winograd's
    // weight pass: 16 products of rows x channels summed over the tiles):
    // about 1,056 workgroups in all, slices of 512 or more. Measured on an
    // H100: the MNIST CNN's step at batch 512 1.07x faster (conv 64's weight
    // pass 1.74 ms -> 1.10 ms, 17 slices -> 66), ResNet-18's level.
    if (g.batch > 1 && g.k >= 8192)
      want = std::max(want, std::min<std::int64_t>((1056 + tiles(bm, bn) - 1) / tiles(bm, bn), g.k / 512));
    want = std::min<std::int64_t>(want, g.k / (gemm_split_k_min() / 4));
    // A tile's last slice adds all its slices alone (SLICES_MEET): past 16
    // that sum costs more than more workgroups gain. The MNIST CNN's fc1 (K =
    // 9,216) at batch 64 had 96 slices: 64 us a step on an H100. With 16 its
    // step ran 1.04x faster at batch 64 and 1.01x at 512.
    if (g.batch == 1) want = std::min<std::int64_t>(want, 16);
    pc.k_chunk = split_k_chunk(g.k, want, bk);
    splits = std::uint32_t((g.k + pc.k_chunk - 1) / pc.k_chunk);
  }
  // Tuning knob for benchmarks: RUMUS_VULKAN_GEMM_TILE="bm,bn,bk" (one of gemm_tile_candidates()).
  static const std::optional<std::string> forced = env::text("RUMUS_VULKAN_GEMM_TILE");
  if (forced && splits == 1) {
    unsigned fm = 0, fn = 0, fk = 0;
    if (std::sscanf(forced->c_str(), "%u,%u,%u", &fm, &fn, &fk) == 3 && is_gemm_tile_candidate({fm, fn, fk})) {
      bm = fm;
      bn = fn;
      bk = fk;
    }
  }
  bool aligned = g.m % bm == 0 && g.n % bn == 0 && g.k % bk == 0 && pc.k_chunk % bk == 0 && g.k > 0;
  for (std::uint32_t v : {pc.lda, pc.ldb, pc.ldc, pc.offset_a, pc.offset_b, pc.offset_c, pc.batch_a, pc.batch_b,
                          pc.batch_c, pc.offset_bias})
    if (v % 4) aligned = false;
  // Ragged, but every operand's rows are whole vec4s: bounds-checked vec4 fetches.
  bool vec4 = !aligned && g.k > 0 && (g.trans_a ? g.m : g.k) % 4 == 0 && (g.trans_b ? g.k : g.n) % 4 == 0 &&
              pc.k_chunk % 4 == 0 && pc.lda % 4 == 0 && pc.ldb % 4 == 0 && pc.offset_a % 4 == 0 &&
              pc.offset_b % 4 == 0 && pc.batch_a % 4 == 0 && pc.batch_b % 4 == 0;
  std::uint32_t kslices = gemm_tile_kslices(bm, bn, ctx.properties.limits.maxComputeWorkGroupInvocations);
  if (auto forced = gemm_kslices_override(); forced && kslices > 1) kslices = *forced;
  std::vector<std::uint32_t> spec = {(bm / 8) * (bn / 8) * kslices, bm, bn, bk, g.trans_a ? 1u : 0u, g.trans_b ? 1u : 0u,
                                     aligned ? 1u : 0u, type_code(g.a.dtype), type_code(g.c.dtype), bias ? 1u : 0u,
                                     kslices, g.relu ? 1u : 0u, splits > 1 ? 1u : 0u, vec4 ? 1u : 0u};
  const std::uint32_t gx = std::uint32_t((g.n + bn - 1) / bn), gy = std::uint32_t((g.m + bm - 1) / bm);
  const Operand bias_op{bias ? g.bias : g.a, false};
  if (splits == 1) {
    Operand ops[] = {{g.a, false}, {g.b, false}, {g.c, true}, bias_op, {g.a, false}, {g.a, false}};
    vk.launch(ShaderId::gemm, spec, ops, &pc, sizeof pc, gx, gy, std::uint32_t(g.batch));
    return;
  }
  // The slices meet in the kernel (SLICES_MEET): each tile's last slice adds
  // them and runs the epilogue, so split K costs no second pass.
  pc.splits = splits;
  const std::int64_t tile_count = tiles(bm, bn);
  const Layout parts_layout = Layout::contiguous({tile_count * splits * bm * bn});
  Storage parts(vk.device(), std::size_t(parts_layout.shape[0]) * 4);
  Operand ops[] = {{g.a, false},  {g.b, false}, {g.c, true}, bias_op, {{&parts, DType::f32, &parts_layout}, true},
                   {vk.split_k_counters(tile_count), true}};
  vk.launch(ShaderId::gemm, spec, ops, &pc, sizeof pc, gx, gy, std::uint32_t(g.batch) * splits);
}

void gemm_split_k(VulkanBackend& vk, const GemmArgs& g, GemmPush pc, std::uint32_t splits,
                  const std::function<void(TensorArg parts, const GemmPush& pc)>& launch_slices) {
  const std::int64_t mn = g.m * g.n;
  Layout parts_layout = Layout::contiguous({g.batch, std::int64_t(splits), g.m, g.n});
  Storage parts(vk.device(), std::size_t(g.batch * splits * mn) * 4);
  TensorArg parts_arg{&parts, DType::f32, &parts_layout};
  pc.splits = splits;
  pc.offset_c = 0;
  pc.ldc = std::uint32_t(g.n);
  pc.batch_c = std::uint32_t(mn);
  pc.beta = 0;
  launch_slices(parts_arg, pc);
  Layout c_layout{{g.batch, 1, g.m, g.n}, {g.stride_c, 0, g.ldc, 1}, g.c.layout->offset};
  TensorArg c_arg{g.c.storage, g.c.dtype, &c_layout};
  if (g.beta == 0) {
    reduce(vk, ReduceOp::sum, c_arg, parts_arg);
    return;
  }
  Layout sum_layout = Layout::contiguous({g.batch, 1, g.m, g.n});
  Storage sum_storage(vk.device(), std::size_t(g.batch * mn) * 4);
  TensorArg sum_arg{&sum_storage, DType::f32, &sum_layout};
  reduce(vk, ReduceOp::sum, sum_arg, parts_arg);
  unary(vk, UnaryOp::mul_scalar, c_arg, c_arg, g.beta, 0);
  binary(vk, BinaryOp::add, c_arg, c_arg, sum_arg, 0, 0);
}

}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, gemm) {
  register_kernel<GemmKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::gemm, &vulkan::runs_f64);
}

}  // namespace rumus
