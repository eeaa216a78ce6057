// Vulkan kernels of the negative log-likelihood family (../nll.hpp): host
// side of nll.comp.
#include "../nll.hpp"

#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::NllPush;
using Operand = VulkanBackend::Operand;

constexpr std::uint32_t kLocal = 256;

NllPush nll_push(const char* op, TensorArg log_probs, TensorArg target, std::int64_t ignore_index) {
  require_contiguous(op, log_probs);
  require_contiguous(op, target);
  const std::uint64_t ignore = std::uint64_t(ignore_index);
  return {std::uint32_t(log_probs.layout->shape[0]), std::uint32_t(log_probs.layout->shape[1]),
          std::uint32_t(ignore), std::uint32_t(ignore >> 32), {}};
}

// One workgroup: the rows are few next to a step's other work (a batch, or
// a batch times a context), and one group needs no second pass.
void nll_forward(Backend& be, TensorArg out, TensorArg count, TensorArg log_probs, TensorArg target,
                 std::int64_t ignore_index, bool mean) {
  VulkanBackend& vk = device_of(be);
  NllPush pc = nll_push("nll_forward", log_probs, target, ignore_index);
  pc.off[0] = std::int32_t(out.layout->offset);
  pc.off[1] = std::int32_t(count.layout->offset);
  pc.off[2] = std::int32_t(log_probs.layout->offset);
  pc.off[4] = std::int32_t(target.layout->offset);
  Operand ops[] = {{out, true}, {count, true}, {log_probs, false}, {vk.index_fault_operand(), true}, {target, false}};
  vk.launch(shader_for(ShaderId::nll, log_probs.dtype), {kLocal, std::uint32_t(log_probs.dtype), 0, mean, 0}, ops,
            &pc, sizeof pc, 1);
}

void nll_backward(Backend& be, TensorArg grad_in, TensorArg grad_out, TensorArg count, TensorArg log_probs,
                  TensorArg target, std::int64_t ignore_index, bool mean, bool softmax) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("nll_backward", grad_in);
  NllPush pc = nll_push("nll_backward", log_probs, target, ignore_index);
  const std::int64_t total = log_probs.layout->numel();
  if (total == 0) return;
  pc.off[0] = std::int32_t(grad_in.layout->offset);
  pc.off[1] = std::int32_t(grad_out.layout->offset);
  pc.off[2] = std::int32_t(log_probs.layout->offset);
  pc.off[3] = std::int32_t(count.layout->offset);
  pc.off[4] = std::int32_t(target.layout->offset);
  Operand ops[] = {{grad_in, true}, {grad_out, false}, {log_probs, false}, {count, false}, {target, false}};
  vk.launch(shader_for(ShaderId::nll, log_probs.dtype), {kLocal, std::uint32_t(log_probs.dtype), 1, mean, softmax},
            ops, &pc, sizeof pc, groups_for(total, kLocal));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, nll) {
  register_kernel<NllForwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::nll_forward, &runs_f64);
  register_kernel<NllBackwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::nll_backward, &runs_f64);
}

}  // namespace rumus
