// Vulkan kernels of the LSTM-cell family (../lstm.hpp): host side of
// lstm_cell.comp.
#include "../lstm.hpp"

#include <algorithm>

#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

constexpr std::uint32_t kLocal = 256;  // lstm_cell.comp's workgroup

push::LstmPush lstm_push(TensorArg c, std::initializer_list<TensorArg> operands, bool has_dc) {
  push::LstmPush pc{std::uint32_t(c.layout->shape[0]), std::uint32_t(c.layout->shape[1]), has_dc ? 1u : 0u, {}};
  int k = 0;
  for (TensorArg t : operands) pc.off[k++] = t.storage ? std::int32_t(t.layout->offset) : 0;
  return pc;
}

ShaderId shader_of(DType dtype) { return dtype == DType::f64 ? ShaderId::lstm_cell_f64 : ShaderId::lstm_cell; }

void lstm_cell_forward(Backend& be, TensorArg h, TensorArg c_next, TensorArg act, TensorArg xp, TensorArg hp,
                       TensorArg c) {
  for (TensorArg t : {h, c_next, act, xp, hp, c}) require_contiguous("lstm_cell_forward", t);
  const std::int64_t n = c.layout->numel();
  if (n == 0) return;
  push::LstmPush pc = lstm_push(c, {h, c_next, act, xp, hp, c, c}, false);
  VulkanBackend::Operand ops[] = {{h, true}, {c_next, true}, {act, true}, {xp, false},
                                  {hp, false}, {c, false}, {c, false}};
  device_of(be).launch(shader_of(c.dtype), {std::uint32_t(c.dtype), 0u}, ops, &pc, sizeof pc, groups_for(n, kLocal));
}

void lstm_cell_backward(Backend& be, TensorArg d_gates, TensorArg d_c, TensorArg dh_next, TensorArg dc_next,
                        TensorArg act, TensorArg c, TensorArg c_next) {
  const bool has_dc = dc_next.storage != nullptr;
  for (TensorArg t : {d_gates, d_c, dh_next, act, c, c_next}) require_contiguous("lstm_cell_backward", t);
  if (has_dc) require_contiguous("lstm_cell_backward", dc_next);
  const std::int64_t n = c.layout->numel();
  if (n == 0) return;
  const TensorArg dc = has_dc ? dc_next : dh_next;  // bound but unread without dc'
  push::LstmPush pc = lstm_push(c, {d_gates, d_c, dh_next, dc, act, c, c_next}, has_dc);
  VulkanBackend::Operand ops[] = {{d_gates, true}, {d_c, true}, {dh_next, false}, {dc, false},
                                  {act, false},    {c, false},  {c_next, false}};
  device_of(be).launch(shader_of(c.dtype), {std::uint32_t(c.dtype), 1u}, ops, &pc, sizeof pc, groups_for(n, kLocal));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, lstm) {
  const DTypeSet dtypes{DType::f32, DType::f64};
  register_kernel<LstmCellForwardKernel>(Device::Kind::vulkan, dtypes, &vulkan::lstm_cell_forward, &vulkan::runs_f64);
  register_kernel<LstmCellBackwardKernel>(Device::Kind::vulkan, dtypes, &vulkan::lstm_cell_backward,
                                          &vulkan::runs_f64);
}

}  // namespace rumus
