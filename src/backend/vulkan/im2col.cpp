// Vulkan kernels of the convolution lowering (../conv.hpp): host side of conv.comp.
#include "../conv.hpp"


#include "rumus/core/error.hpp"
#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

using push::ConvPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 256;

ConvPush conv_push(const Conv2dGeometry& g, TensorArg image, TensorArg cols, std::int64_t total) {
  ConvPush pc{std::uint32_t(g.batch), std::uint32_t(g.channels), std::uint32_t(g.height), std::uint32_t(g.width),
              std::uint32_t(g.kernel_h), std::uint32_t(g.kernel_w), std::uint32_t(g.stride_h),
              std::uint32_t(g.stride_w), std::int32_t(g.pad_h), std::int32_t(g.pad_w), std::uint32_t(g.dilation_h),
              std::uint32_t(g.dilation_w), std::uint32_t(g.out_h), std::uint32_t(g.out_w),
              std::int32_t(image.layout->offset), std::int32_t(cols.layout->offset), {}, {}, std::uint32_t(total)};
  for (int d = 0; d < 4; ++d) pc.in_stride[d] = std::int32_t(image.layout->strides[d]);
  for (int d = 0; d < 3; ++d) pc.cols_stride[d] = std::int32_t(cols.layout->strides[d]);
  return pc;
}

// conv.comp's QUADS: four positions (pixels) an invocation where its rows of
// columns (of the image) hold whole quads.
bool quad_dtype(DType dt) { return dt == DType::f32 || is_16bit_float(dt); }

}  // namespace

void im2col(Backend& be, const Conv2dGeometry& g, TensorArg cols, TensorArg in) {
  VulkanBackend& vk = device_of(be);
  const std::int64_t total = cols.layout->numel();
  if (total == 0) return;
  ConvPush pc = conv_push(g, in, cols, total);
  Operand ops[] = {{cols, true}, {in, false}};
  // One invocation per window (kernel_h * kernel_w entries), conv.comp's IM2COL.
  const bool quads = quad_dtype(in.dtype) && g.out_w % 4 == 0 && pc.cols_stride[2] == 1 && pc.cols_offset % 4 == 0 &&
                     pc.cols_stride[1] % 4 == 0 && pc.cols_stride[0] % 4 == 0;
  const std::int64_t items = total / (g.kernel_h * g.kernel_w) / (quads ? 4 : 1);
  if (quads) pc.total = std::uint32_t(items);
  vk.launch(shader_for(ShaderId::conv, in.dtype), {kLocal, 0, std::uint32_t(in.dtype), quads ? 1u : 0u}, ops, &pc,
            sizeof pc, groups_for(items, kLocal));
}

void col2im(Backend& be, const Conv2dGeometry& g, TensorArg out, TensorArg cols) {
  VulkanBackend& vk = device_of(be);
  require_contiguous("col2im", out);
  const std::int64_t total = out.layout->numel();
  if (total == 0) return;
  const bool quads = quad_dtype(out.dtype) && g.width % 4 == 0 && out.layout->offset % 4 == 0;
  ConvPush pc = conv_push(g, out, cols, quads ? total / 4 : total);
  Operand ops[] = {{out, true}, {cols, false}};
  vk.launch(shader_for(ShaderId::conv, out.dtype), {kLocal, 1, std::uint32_t(out.dtype), quads ? 1u : 0u}, ops, &pc,
            sizeof pc, groups_for(pc.total, kLocal));
}

}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, im2col) {
  register_kernel<Im2colKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::im2col, &runs_f64);
  register_kernel<Col2imKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::col2im, &runs_f64);
}

}  // namespace rumus
