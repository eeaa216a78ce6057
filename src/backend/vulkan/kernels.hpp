#pragma once
// The Vulkan kernels and GEMM helpers that one Vulkan file calls from another,
// each defined in the family file named beside it; kernels used only where
// they are written stay out of sight there.
#include <cstdint>
#include <functional>
#include <optional>

#include "../backend.hpp"
#include "../conv.hpp"
#include "../gemm.hpp"
#include "../pointwise.hpp"
#include "../reduce.hpp"
#include "gemm_tuner.hpp"

namespace rumus::vulkan {

class VulkanBackend;
namespace push {
struct GemmPush;  // push_constants.hpp
struct ConvIgemmPush;
}

// pointwise.cpp
void fill(Backend& be, TensorArg out, double value);
void copy(Backend& be, TensorArg out, TensorArg in);
void unary(Backend& be, UnaryOp op, TensorArg out, TensorArg in, double p0, double p1);
void binary(Backend& be, BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1);

// im2col.cpp: the lowering's column kernels (cols viewed as [N, C*KH*KW, OH*OW]).
void im2col(Backend& be, const Conv2dGeometry& g, TensorArg cols, TensorArg in);
void col2im(Backend& be, const Conv2dGeometry& g, TensorArg out, TensorArg cols);

// conv_columns.cpp: f32 convolutions (groups 1) as im2col + gemm on a chunked
// workspace, for the shapes where that beats conv_igemm.comp; conv.cpp asks
// conv_takes_columns per pass.
enum class ConvPass { forward, backward_data, backward_weight };
// Which way every convolution goes: automatic per shape, or one way for all
// (tests and benchmarks; RUMUS_VULKAN_CONV=columns|implicit_gemm|weight_columns|winograd|winograd_no_weight
// sets it at start), or the columns for the weight gradient alone, or
// Winograd for every pass where it applies (the rest automatic), or the
// automatic choice with the weight passes on the columns instead of Winograd.
enum class ConvRoute { automatic, implicit_gemm, columns, weight_columns, winograd, winograd_no_weight };
ConvRoute& conv_route_override();
// The column workspace's size, a chunk of the batch at a time (256 MiB; tests make it small).
std::int64_t& conv_workspace_bytes();
// The most workgroups of one launch of the one-pass Winograd kernel (65,535,
// the grid's least limit; tests make it small so that launches follow each other).
std::int64_t& winograd_fused_max_groups();
// The Winograd passes' tiles: 0 (automatic) or 2, F(2x2, 3x3); 4,
// F(4x4, 3x3) on workspaces, not the one-pass kernels (tests and benchmarks;
// RUMUS_VULKAN_WINOGRAD_TILE=2|4 sets it at start).
std::int64_t& winograd_tile_override();
bool conv_takes_columns(ConvPass pass, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups);
void conv2d_forward_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg out, TensorArg in,
                            TensorArg weight, TensorArg bias, bool relu);
void conv2d_backward_data_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_in,
                                  TensorArg grad_out, TensorArg weight);
void conv2d_backward_weight_columns(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                    TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in);
// The bias gradient (grad_out's sums over samples and positions) of the
// columns' and Winograd's weight passes.
void conv2d_backward_bias(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_bias,
                          TensorArg grad_out);
// conv_direct.cpp: f32 convolutions of one group over fewer than 8 channels
// whose window holds at most 32 inputs (a first layer), forward and weight
// gradient; `pc` as conv.cpp fills it for conv_igemm.comp.
bool conv_takes_direct(const Conv2dGeometry& g, std::int64_t groups, DType dtype);
// The most workgroups of one conv_direct.comp launch along x (65,535, the
// grid's least limit; tests make it small so that launches follow each other).
std::int64_t& conv_direct_max_groups();
void conv2d_forward_direct(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, push::ConvIgemmPush pc,
                           TensorArg out, TensorArg in, TensorArg weight, TensorArg bias, bool relu);
void conv2d_backward_weight_direct(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                   push::ConvIgemmPush pc, TensorArg grad_weight, TensorArg grad_bias,
                                   TensorArg grad_out, TensorArg in);
// conv_winograd.cpp: 3x3 stride-1 convolutions, f32 or 16-bit (groups 1, padding up to
// 2) as Winograd F(2x2, 3x3): forward, data and weight gradients.
bool conv_takes_winograd(ConvPass pass, const Conv2dGeometry& g, std::int64_t groups);
void conv2d_forward_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg out, TensorArg in,
                             TensorArg weight, TensorArg bias, bool relu);
void conv2d_backward_data_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc, TensorArg grad_in,
                                   TensorArg grad_out, TensorArg weight);
void conv2d_backward_weight_winograd(VulkanBackend& vk, const Conv2dGeometry& g, std::int64_t oc,
                                     TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in);

// reduce.cpp
void reduce(Backend& be, ReduceOp op, TensorArg out, TensorArg in);
// The most workgroups along x of a reduction with a workgroup per output or
// per few rows, the rest along y (65,535, the grid's least limit; tests make
// it small).
std::int64_t& reduce_max_groups();

// gemm.cpp
void gemm(Backend& be, const GemmArgs& g);
// Split-K for the tensor-core GEMM (gemm.comp's slices meet in the kernel):
// `launch_slices` runs the kernel with `pc` set to write [batch, splits, m, n]
// f32 slices (alpha applied) into `parts`; the slices are then summed into C
// with beta.
void gemm_split_k(VulkanBackend& vk, const GemmArgs& g, push::GemmPush pc, std::uint32_t splits,
                  const std::function<void(TensorArg parts, const push::GemmPush& pc)>& launch_slices);

// gemm_coopmat.cpp: the tensor-core GEMM where coopmat_gemm_applies().
void coopmat_gemm(VulkanBackend& vk, const GemmArgs& g);

// gemm_tune.cpp: the f32 GEMM's tile from the override or the tuner; nothing
// leaves the choice to the heuristic's tile.
std::optional<GemmTile> gemm_tile_for(VulkanBackend& vk, const GemmArgs& g, const GemmTile& heuristic);

}  // namespace rumus::vulkan
