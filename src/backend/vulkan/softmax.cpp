// Vulkan kernels of the softmax family (../softmax.hpp): host side of softmax.comp,
// one workgroup per row.
#include "../softmax.hpp"


#include "rumus/core/error.hpp"
#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::SoftmaxPush;
using Operand = VulkanBackend::Operand;

void softmax_forward(Backend& be, TensorArg out, TensorArg in, bool log) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("softmax_forward", out);
  require_contiguous("softmax_forward", in);
  const std::int64_t cols = in.layout->shape.back(), rows = cols ? in.layout->numel() / cols : 0;
  if (rows == 0) return;
  SoftmaxPush pc{std::uint32_t(rows), std::uint32_t(cols), std::int32_t(out.layout->offset),
                 std::int32_t(in.layout->offset), 0};
  Operand ops[] = {{out, true}, {in, false}};
  std::uint32_t gx, gy;
  row_grid(rows, gx, gy);
  vk.launch(shader_for(ShaderId::softmax, in.dtype), {row_group(cols), log, 0, std::uint32_t(in.dtype)}, ops, &pc,
            sizeof pc, gx, gy);
}

void softmax_backward(Backend& be, TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("softmax_backward", grad_in);
  require_contiguous("softmax_backward", grad_out);
  require_contiguous("softmax_backward", out);
  const std::int64_t cols = out.layout->shape.back(), rows = cols ? out.layout->numel() / cols : 0;
  if (rows == 0) return;
  SoftmaxPush pc{std::uint32_t(rows), std::uint32_t(cols), std::int32_t(grad_in.layout->offset),
                 std::int32_t(grad_out.layout->offset), std::int32_t(out.layout->offset)};
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {out, false}};
  std::uint32_t gx, gy;
  row_grid(rows, gx, gy);
  vk.launch(shader_for(ShaderId::softmax, out.dtype), {row_group(cols), log, 1, std::uint32_t(out.dtype)}, ops, &pc,
            sizeof pc, gx, gy);
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, softmax) {
  register_kernel<SoftmaxForwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::softmax_forward, &runs_f64);
  register_kernel<SoftmaxBackwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::softmax_backward, &runs_f64);
}

}  // namespace rumus
