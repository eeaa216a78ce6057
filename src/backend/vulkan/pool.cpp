// Vulkan kernels of the pooling family (../pool.hpp): host side of pool.comp.
#include "../pool.hpp"

#include <vector>

#include "rumus/core/error.hpp"
#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::PoolPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 256;

// pool.comp's specialisation: its kernel, direction, dtype and geometry.
std::vector<std::uint32_t> pool_spec(const Pool2dParams& p, bool backward, DType dtype) {
  return {kLocal,
          std::uint32_t(p.kind),
          backward ? 1u : 0u,
          std::uint32_t(dtype),
          std::uint32_t(p.height),
          std::uint32_t(p.width),
          std::uint32_t(p.out_h),
          std::uint32_t(p.out_w),
          std::uint32_t(p.kernel_h),
          std::uint32_t(p.kernel_w),
          std::uint32_t(p.stride_h),
          std::uint32_t(p.stride_w)};
}

PoolPush pool_push(const Pool2dParams& p, std::int64_t total) {
  return {std::uint32_t(p.planes), std::int32_t(p.pad_h), std::int32_t(p.pad_w), std::uint32_t(p.dilation_h),
          std::uint32_t(p.dilation_w), p.count_include_pad ? 1u : 0u, 0, 0, 0, std::uint32_t(total)};
}

void pool2d_forward(Backend& be, const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("pool2d_forward", out);
  require_contiguous("pool2d_forward", in);
  const std::int64_t total = out.layout->numel();
  if (total == 0) return;
  const bool max = p.kind == PoolKind::max;
  PoolPush pc = pool_push(p, total);
  pc.off0 = std::int32_t(out.layout->offset);
  pc.off1 = std::int32_t(in.layout->offset);
  pc.off2 = max ? std::int32_t(indices.layout->offset) : 0;
  Operand ops[] = {{out, true}, {in, false}, {max ? indices : out, max}};
  vk.launch(shader_for(ShaderId::pool, in.dtype), pool_spec(p, false, in.dtype), ops, &pc, sizeof pc,
            groups_for(total, kLocal));
}

void pool2d_backward(Backend& be, const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("pool2d_backward", grad_in);
  require_contiguous("pool2d_backward", grad_out);
  const std::int64_t total = grad_in.layout->numel();
  if (total == 0) return;
  const bool max = p.kind == PoolKind::max;
  PoolPush pc = pool_push(p, total);
  pc.off0 = std::int32_t(grad_in.layout->offset);
  pc.off1 = std::int32_t(grad_out.layout->offset);
  pc.off2 = max ? std::int32_t(indices.layout->offset) : 0;
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {max ? indices : grad_out, false}};
  vk.launch(shader_for(ShaderId::pool, grad_in.dtype), pool_spec(p, true, grad_in.dtype), ops, &pc, sizeof pc,
            groups_for(total, kLocal));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, pool) {
  register_kernel<Pool2dForwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::pool2d_forward, &runs_f64);
  register_kernel<Pool2dBackwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::pool2d_backward, &runs_f64);
}

}  // namespace rumus
