#pragma once
// The tensor-core GEMM (shaders/gemm_coopmat.comp): the matrix shapes a device
// offers through VK_NV_cooperative_matrix and the choice of the kernel's tiles
// from them. Free of Vulkan types so the choice can be tested from a list.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace rumus {
struct GemmArgs;
}

namespace rumus::vulkan {

class Context;

enum class CoopMatType { f16, f32, other };

// One entry of vkGetPhysicalDeviceCooperativeMatrixPropertiesNV: D (m x n) =
// A (m x k) B (k x n) + C, and whether a subgroup owns the matrices.
struct CoopMatShape {
  std::uint32_t m = 0, n = 0, k = 0;
  CoopMatType a = CoopMatType::other, b = CoopMatType::other, c = CoopMatType::other, d = CoopMatType::other;
  bool subgroup_scope = false;
};

// The kernel's specialisation: one matrix-unit product lm x ln x lk, the
// workgroup tile bm x bn, each subgroup's wm x wn part of it.
struct CoopMatTile {
  std::uint32_t lm = 0, ln = 0, lk = 0;
  std::uint32_t bm = 128, bn = 128, wm = 64, wn = 64;
  std::uint32_t bk = 32;  // K per slice through shared memory
  std::uint32_t subgroup = 32;

  std::uint32_t threads() const { return (bm / wm) * (bn / wn) * subgroup; }
  std::size_t shared_bytes(bool trans_a, bool trans_b) const;
};

// The tile for f16 x f16 -> f32 products on a device with these shapes, or none
// when no shape fits (then the plain f32 kernel is the only path). Among those
// that fit, the largest product (fewest instructions per tile), then the longest k.
// `layout` picks the workgroup tile ("bm,bn,wm,wn" or "bm,bn,wm,wn,bk", e.g.
// from an environment knob); an empty or invalid one keeps 128,128,64,64,32.
std::optional<CoopMatTile> choose_coopmat_tile(std::span<const CoopMatShape> shapes, std::uint32_t subgroup_size,
                                               std::uint32_t max_shared_bytes, std::uint32_t max_threads,
                                               const std::string& layout = "");

// The device's tile `t` narrowed for a thin product: halved along M (its
// subgroups' parts too) while M fits in half of it, the same along N, as long
// as the layout stays valid. Winograd's weight gradients of 64 channels (64 x
// 64 products over the tiles) filled a quarter of the 128 x 128 tile.
CoopMatTile fit_coopmat_tile(CoopMatTile t, std::int64_t m, std::int64_t n, std::uint32_t max_shared_bytes,
                             std::uint32_t max_threads);

// Whether a product takes the tensor-core kernel: the device has a tile, A and
// B are f16, C is f16 or f32, K is kShortK or more, the product is not a
// small one (one matrix of fewer than 132 64 x 64 tiles over a K under kLongK)
// and the grid fits the dispatch limits. Otherwise the plain kernel
// (shaders/gemm.comp) runs it.
inline constexpr std::int64_t kShortK = 128;
// Small single products with a K under this go to the plain kernel's 32 x 32
// tiles too, f32 or f16 (gemm.cpp). Longer ones (char_lm's weight gradients
// over 4,096 tokens) keep split K: on 32 x 32 tiles and the plain kernel they
// ran 5 % (f32) and 19 % (amp) slower on an H100.
inline constexpr std::int64_t kLongK = 2048;
bool coopmat_gemm_applies(const Context& ctx, const GemmArgs& g);

// How many slices along K the tensor-core kernel splits `batch` products of
// `tiles` output tiles in all into, 1 for none: few tiles over a long K
// (weight gradients: 4 to 16 tiles over 8,192 tokens left most of an H200
// idle) take about two waves of workgroups (eight for batched products from
// K = 16,384 on), slices of at least 256 along K, at most 32 of them.
std::int64_t coopmat_split_k_slices(std::int64_t tiles, std::int64_t k, std::int64_t batch = 1);

}  // namespace rumus::vulkan
