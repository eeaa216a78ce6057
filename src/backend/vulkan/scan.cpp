// Vulkan kernels of the scan family (../scan.hpp): shaders/scan.comp.
#include "../scan.hpp"

#include <algorithm>

#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

// f64 and the integers run the double build (i32 and u8 exact, i64 sums up to 2^53).
bool in_double(DType dtype) { return dtype == DType::f64 || !is_floating(dtype); }

void scan(Backend& be, TensorArg out, TensorArg in, ScanOp op) {
  VulkanBackend& vk = device_of(be);
  const Shape& s = in.layout->shape;
  if (!in.layout->is_contiguous() || !out.layout->is_contiguous() || s.size() != 3 || out.layout->shape != s)
    throw Error("scan: the Vulkan kernel needs equal contiguous 3-D views");
  push::ScanPush pc{std::uint32_t(s[0]), std::uint32_t(s[1]), std::uint32_t(s[2]), std::uint32_t(op),
                    std::int32_t(out.layout->offset), std::int32_t(in.layout->offset), 0};
  const std::int64_t columns = s[0] * s[2];
  if (columns == 0 || s[1] == 0) return;
  VulkanBackend::Operand ops[] = {{out, true}, {in, false}};
  vk.launch(in_double(in.dtype) ? ShaderId::scan_f64 : ShaderId::scan, {std::uint32_t(in.dtype)}, ops, &pc, sizeof pc,
            std::uint32_t(std::min<std::int64_t>(columns, 65535)));
}

void cumextreme(Backend& be, TensorArg values, TensorArg indices, TensorArg in, ExtremeOp op) {
  VulkanBackend& vk = device_of(be);
  const Shape& s = in.layout->shape;
  for (TensorArg t : {values, indices, in})
    if (!t.layout->is_contiguous()) throw Error("cumextreme: the Vulkan kernel needs contiguous operands");
  if (s.size() != 3 || values.layout->shape != s || indices.layout->shape != s || indices.dtype != DType::i64)
    throw Error("cumextreme: the Vulkan kernel needs equal 3-D views and i64 indices");
  push::ScanPush pc{std::uint32_t(s[0]), std::uint32_t(s[1]), std::uint32_t(s[2]), std::uint32_t(op),
                    std::int32_t(values.layout->offset), std::int32_t(in.layout->offset),
                    std::int32_t(indices.layout->offset)};
  const std::int64_t columns = s[0] * s[2];
  if (columns == 0 || s[1] == 0) return;
  VulkanBackend::Operand ops[] = {{values, true}, {in, false}, {indices, true}};
  vk.launch(in_double(in.dtype) ? ShaderId::cumextreme_f64 : ShaderId::cumextreme, {std::uint32_t(in.dtype)}, ops,
            &pc, sizeof pc, std::uint32_t(std::min<std::int64_t>(columns, 65535)));
}

// f64 and the integers (in double arithmetic: i32 and u8 exact, i64 sums up
// to 2^53) need the device's double arithmetic.
bool scan_runs(Backend& be, DType dtype) {
  return is_floating(dtype) && dtype != DType::f64 ? true : device_of(be).context().float64;
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, scan) {
  register_kernel<ScanKernel>(Device::Kind::vulkan,
                              DTypeSet{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64},
                              &vulkan::scan, &vulkan::scan_runs);
  register_kernel<CumExtremeKernel>(Device::Kind::vulkan,
                                    DTypeSet{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8,
                                             DType::i8, DType::i16, DType::boolean},
                                    &vulkan::cumextreme, &vulkan::scan_runs);
}

}  // namespace rumus
