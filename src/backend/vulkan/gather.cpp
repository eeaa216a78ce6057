// Vulkan kernels of the gather family (../gather.hpp): index_select.comp and
// index_add.comp built with an index per element (-DPER_ELEMENT).
#include "../gather.hpp"

#include "grid.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

constexpr std::uint32_t kLocal = 256;

// The builds of an adding kernel (index_add.comp): by float atomics of the
// width, or, on devices without them, by compare-and-swap.
struct AddShaders {
  ShaderId f32, f32_cas, f64, f64_cas;
};
constexpr AddShaders kIndexAdd{ShaderId::index_add, ShaderId::index_add_cas, ShaderId::index_add_f64,
                               ShaderId::index_add_f64cas};
constexpr AddShaders kScatterAdd{ShaderId::scatter_add, ShaderId::scatter_add_cas, ShaderId::scatter_add_f64,
                                 ShaderId::scatter_add_f64cas};

ShaderId add_shader(const Context& ctx, DType dtype, const AddShaders& s) {
  if (dtype == DType::f64) return ctx.float64_atomics ? s.f64 : s.f64_cas;
  return ctx.float_atomics ? s.f32 : s.f32_cas;
}

push::IndexPush per_element_push(const char* op, TensorArg big, TensorArg small, TensorArg index) {
  for (TensorArg t : {big, small, index})
    if (!t.layout->is_contiguous()) throw Error(std::string(op) + ": the Vulkan kernel needs contiguous operands");
  if (index.dtype != DType::i64) throw DTypeError(std::string(op) + ": the Vulkan kernel needs i64 indices");
  const Shape &b = big.layout->shape, &s = small.layout->shape;
  if (b.size() != 3 || s.size() != 3 || index.layout->shape != s)
    throw Error(std::string(op) + ": the Vulkan kernel needs 3-D views and an index shaped as the small operand");
  return {std::uint32_t(b[0]), std::uint32_t(b[1]), std::uint32_t(s[1]), std::uint32_t(b[2]), std::uint32_t(s[0]),
          std::int32_t(big.layout->offset), std::int32_t(small.layout->offset), std::int32_t(index.layout->offset),
          std::uint32_t(small.layout->numel())};
}

void gather(Backend& be, TensorArg out, TensorArg src, TensorArg index) {
  VulkanBackend& vk = device_of(be);
  push::IndexPush pc = per_element_push("gather", src, out, index);
  if (pc.total == 0) return;
  VulkanBackend::Operand ops[] = {{out, true}, {src, false}, {index, false}, {vk.index_fault_operand(), true}};
  vk.launch(ShaderId::gather, {kLocal, std::uint32_t(out.dtype), std::uint32_t(dtype_size(out.dtype))}, ops, &pc,
            sizeof pc, groups_for(pc.total, kLocal));
}

void scatter_add(Backend& be, TensorArg out, TensorArg index, TensorArg src) {
  VulkanBackend& vk = device_of(be);
  push::IndexPush pc = per_element_push("scatter_add", out, src, index);
  if (pc.total == 0) return;
  VulkanBackend::Operand ops[] = {{out, true}, {src, false}, {index, false}, {vk.index_fault_operand(), true}};
  vk.launch(add_shader(vk.context(), out.dtype, kScatterAdd), {kLocal}, ops, &pc, sizeof pc,
            groups_for(pc.total, kLocal));
}

// f64 adds need double arithmetic and either f64 atomics or 64-bit integer ones.
bool scatter_add_runs(Backend& be, DType dtype) {
  const Context& ctx = device_of(be).context();
  return dtype == DType::f32 || (dtype == DType::f64 && ctx.float64 && (ctx.float64_atomics || ctx.int64_atomics));
}

}  // namespace

namespace {
push::IndexPush index_push(const char* op, TensorArg big, TensorArg small, TensorArg index) {
  require_contiguous(op, big);
  require_contiguous(op, small);
  require_contiguous(op, index);
  if (index.dtype != DType::i64) throw DTypeError(std::string(op) + ": the Vulkan kernel needs i64 indices");
  const Shape& b = big.layout->shape;
  const Shape& s = small.layout->shape;
  const Shape& i = index.layout->shape;
  if (b.size() != 3 || s.size() != 3 || i.size() != 2)
    throw Error(std::string(op) + ": the Vulkan kernel needs 3-D views and a 2-D index");
  return {std::uint32_t(b[0]), std::uint32_t(b[1]), std::uint32_t(s[1]), std::uint32_t(b[2]), std::uint32_t(i[0]),
          std::int32_t(big.layout->offset), std::int32_t(small.layout->offset), std::int32_t(index.layout->offset),
          std::uint32_t(small.layout->numel())};
}

void index_select(Backend& be, TensorArg out, TensorArg src, TensorArg index) {
  VulkanBackend& vk = device_of(be);
  push::IndexPush pc = index_push("index_select", src, out, index);
  if (pc.total == 0) return;
  VulkanBackend::Operand ops[] = {{out, true}, {src, false}, {index, false}, {vk.index_fault_operand(), true}};
  vk.launch(ShaderId::index_select, {kLocal, std::uint32_t(out.dtype), std::uint32_t(dtype_size(out.dtype))}, ops, &pc,
            sizeof pc, groups_for(pc.total, kLocal));
}

void index_add(Backend& be, TensorArg out, TensorArg index, TensorArg src) {
  VulkanBackend& vk = device_of(be);
  push::IndexPush pc = index_push("index_add", out, src, index);
  if (pc.total == 0) return;
  VulkanBackend::Operand ops[] = {{out, true}, {src, false}, {index, false}, {vk.index_fault_operand(), true}};
  vk.launch(add_shader(vk.context(), out.dtype, kIndexAdd), {kLocal}, ops, &pc, sizeof pc,
            groups_for(pc.total, kLocal));
}

// f64 adds need double arithmetic and either f64 atomics or 64-bit integer
// ones (compare-and-swap).
bool index_add_runs(Backend& be, DType dtype) {
  const Context& ctx = device_of(be).context();
  return dtype == DType::f32 || (ctx.float64 && (ctx.float64_atomics || ctx.int64_atomics));
}
}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, gather) {
  register_kernel<GatherKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::gather);
  register_kernel<ScatterAddKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f64}, &vulkan::scatter_add,
                                    &vulkan::scatter_add_runs);
  register_kernel<IndexSelectKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::index_select);
  register_kernel<IndexAddKernel>(Device::Kind::vulkan, DTypeSet{DType::f32, DType::f64}, &vulkan::index_add,
                                  &vulkan::index_add_runs);
}

}  // namespace rumus
