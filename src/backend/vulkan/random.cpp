// Vulkan kernels of the random family (../random.hpp): host side of
// random.comp (Philox, the same stream as the CPU).
#include "../random.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "rumus/core/capture.hpp"
#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::RandomPush;
using Operand = VulkanBackend::Operand;
constexpr std::uint32_t kLocal = 256;

// Draw k (24 bits) gives 1 when k / 2^24 < p, i.e. k < ceil(p * 2^24): the CPU's test, exactly.
std::uint32_t bernoulli_threshold(double p) {
  return std::uint32_t(std::clamp(std::ceil(p * 16777216.0), 0.0, 16777216.0));
}

void random(Backend& be, RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
            TensorArg state) {
  VulkanBackend& vk = device_of(be);
  if (!out.layout->is_contiguous()) throw Error("random: the Vulkan kernel needs a contiguous output");
  const std::int64_t n = out.layout->numel();
  if (n == 0) return;
  RandomPush pc{std::uint32_t(n), std::uint32_t(out.layout->offset), std::uint32_t(seed), std::uint32_t(seed >> 32),
                std::uint32_t(offset), std::uint32_t(offset >> 32), float(a), float(b), 0, 0, 0, 0, 0, 0, 0, 0};
  push::split_double(a, pc.a_lo, pc.a_hi);
  push::split_double(b, pc.b_lo, pc.b_hi);
  if (kind == RandomKind::bernoulli) {
    pc.range_lo = bernoulli_threshold(a);
  } else if (kind == RandomKind::randint) {
    std::uint64_t range = std::uint64_t(b - a);
    std::int64_t low = std::int64_t(a);
    pc.range_lo = std::uint32_t(range);
    pc.range_hi = std::uint32_t(range >> 32);
    pc.low_lo = std::int32_t(std::uint32_t(std::uint64_t(low)));
    pc.low_hi = std::int32_t(std::uint32_t(std::uint64_t(low) >> 32));
  }
  const bool from_state = state.storage != nullptr;
  Operand ops[] = {{out, true}, {from_state ? state : out, false}};
  // bernoulli: an invocation sets 4 elements (one draw's four words).
  vk.launch(shader_for(ShaderId::random, out.dtype),
            {kLocal, std::uint32_t(kind), std::uint32_t(out.dtype), from_state}, ops, &pc, sizeof pc,
            groups_for(kind == RandomKind::bernoulli ? (n + 3) / 4 : n, kLocal));
}

void dropout_forward(Backend& be, TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed,
                     std::uint64_t offset, double keep, double scale) {
  VulkanBackend& vk = device_of(be);
  for (TensorArg t : {out, mask, in})
    if (!t.layout->is_contiguous() || t.dtype != in.dtype)
      throw Error(fmt::format("dropout_forward: the Vulkan kernel needs contiguous operands of one dtype, got {} {} "
                              "from {} {}", dtype_name(out.dtype), out.layout->is_contiguous() ? "contiguous" : "strided",
                              dtype_name(in.dtype), in.layout->is_contiguous() ? "contiguous" : "strided"));
  const std::int64_t n = in.layout->numel();
  if (n == 0) return;
  RandomPush pc{std::uint32_t(n), std::uint32_t(mask.layout->offset), std::uint32_t(seed), std::uint32_t(seed >> 32),
                std::uint32_t(offset), std::uint32_t(offset >> 32), float(keep), float(scale), bernoulli_threshold(keep),
                0, 0, 0, 0, 0, 0, 0, std::uint32_t(in.layout->offset), std::uint32_t(out.layout->offset)};
  push::split_double(keep, pc.a_lo, pc.a_hi);
  push::split_double(scale, pc.b_lo, pc.b_hi);
  Operand ops[] = {{mask, true}, {in, false}, {in, false}, {out, true}};
  vk.launch(shader_for(ShaderId::random, in.dtype),
            {kLocal, std::uint32_t(RandomKind::bernoulli), std::uint32_t(in.dtype), 0, 1}, ops, &pc, sizeof pc,
            groups_for((n + 3) / 4, kLocal));
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, random) {
  register_kernel<RandomKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::random, &runs_f64);
  register_kernel<DropoutForwardKernel>(Device::Kind::vulkan, kFloatDTypes, &vulkan::dropout_forward, &runs_f64);
}

}  // namespace rumus
