#pragma once
// The Vulkan kernels and GEMM helpers that one Vulkan file calls from another,
// each defined in the family file named beside it; kernels used only where
// they are written stay out of sight there.
#include <cstdint>
#include <functional>
#include <optional>

#include "../backend.hpp"
#include "../gemm.hpp"
#include "../pointwise.hpp"
#include "../reduce.hpp"
#include "gemm_tuner.hpp"

namespace rumus::vulkan {

class VulkanBackend;
namespace push {
struct GemmPush;  // push_constants.hpp
}

// pointwise.cpp
void fill(Backend& be, TensorArg out, double value);
void unary(Backend& be, UnaryOp op, TensorArg out, TensorArg in, double p0, double p1);
void binary(Backend& be, BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1);

// reduce.cpp
void reduce(Backend& be, ReduceOp op, TensorArg out, TensorArg in);

// gemm.cpp
void gemm(Backend& be, const GemmArgs& g);
// Split-K, for either GEMM kernel: `launch_slices` runs the kernel with `pc`
// set to write [batch, splits, m, n] f32 slices (alpha applied) into `parts`;
// the slices are then summed into C with beta.
void gemm_split_k(VulkanBackend& vk, const GemmArgs& g, push::GemmPush pc, std::uint32_t splits,
                  const std::function<void(TensorArg parts, const push::GemmPush& pc)>& launch_slices);

// gemm_coopmat.cpp: the tensor-core GEMM where coopmat_gemm_applies().
void coopmat_gemm(VulkanBackend& vk, const GemmArgs& g);

// gemm_tune.cpp: the f32 GEMM's tile from the override or the tuner; nothing
// leaves the choice to the heuristic's tile.
std::optional<GemmTile> gemm_tile_for(VulkanBackend& vk, const GemmArgs& g, const GemmTile& heuristic);

}  // namespace rumus::vulkan
