// Vulkan kernels of the sort family (../sort.hpp): shaders/sort.comp, one
// dispatch per bitonic pass.
#include "../sort.hpp"

#include <algorithm>

#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {
namespace {

constexpr std::uint32_t kLocal = 256;  // sort.comp's local size
constexpr std::uint32_t kBlock = 512;  // sort.comp's BLOCK: positions sorted in shared memory

void sort(Backend& be, TensorArg values, TensorArg indices, TensorArg in, bool descending) {
  VulkanBackend& vk = device_of(be);
  const Shape& s = in.layout->shape;
  for (TensorArg t : {values, indices, in})
    if (!t.layout->is_contiguous()) throw Error("sort: the Vulkan kernel needs contiguous operands");
  if (s.size() != 2 || values.layout->shape != s || indices.layout->shape != s || indices.dtype != DType::i64)
    throw Error("sort: the Vulkan kernel needs equal 2-D views and i64 indices");
  const std::uint32_t rows = std::uint32_t(s[0]), n = std::uint32_t(s[1]);
  if (rows == 0 || n == 0) return;
  std::uint32_t padded = 1;
  while (padded < n) padded <<= 1;
  push::SortPush pc{rows, n, padded, 0, 0, 0, 0, descending ? 1u : 0u, std::int32_t(values.layout->offset),
                    std::int32_t(indices.layout->offset), std::int32_t(in.layout->offset)};
  VulkanBackend::Operand ops[] = {{values, true}, {indices, true}, {in, false}};
  // Integers compare in double arithmetic, where i32 and u8 are exact.
  const ShaderId shader = in.dtype == DType::f64 || !is_floating(in.dtype) ? ShaderId::sort_f64 : ShaderId::sort;
  const std::vector<std::uint32_t> spec{std::uint32_t(in.dtype)};
  auto pass = [&](std::uint32_t stage, std::uint32_t k, std::uint32_t j, bool flip, std::int64_t threads) {
    pc.stage = stage;
    pc.k = k;
    pc.j = j;
    pc.flip = flip ? 1u : 0u;
    vk.launch(shader, spec, ops, &pc, sizeof pc, groups_for(threads, kLocal));
  };
  const std::int64_t elements = std::int64_t(rows) * n, pairs = std::int64_t(rows) * (padded / 2);
  // Blocks of up to kBlock positions sort in shared memory (stage 3); each
  // larger merge runs its passes with pairs kBlock or more apart globally and
  // the rest in shared memory again (stage 4). One workgroup per (row, block).
  const std::uint32_t block = std::min(padded, kBlock);
  const std::int64_t block_groups = std::int64_t(rows) * (padded / block);
  auto block_stage = [&](std::uint32_t stage, std::uint32_t k) {
    pc.stage = stage;
    pc.k = k;
    vk.launch(shader, spec, ops, &pc, sizeof pc, std::uint32_t(std::min<std::int64_t>(block_groups, 65535)));
  };
  block_stage(3, 0);
  for (std::uint32_t k = 2 * kBlock; k <= padded; k <<= 1) {
    pass(1, k, k / 2, true, pairs);
    for (std::uint32_t j = k / 4; j >= kBlock; j >>= 1) pass(1, k, j, false, pairs);
    block_stage(4, k);
  }
  pass(2, 0, 0, false, elements);
}

// f64 and the integers need the device's double arithmetic.
bool sort_runs(Backend& be, DType dtype) {
  return is_floating(dtype) && dtype != DType::f64 ? true : device_of(be).context().float64;
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, sort) {
  register_kernel<SortKernel>(Device::Kind::vulkan,
                              DTypeSet{DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8,
                                       DType::i8, DType::i16, DType::boolean},
                              &vulkan::sort, &vulkan::sort_runs);
}

}  // namespace rumus
