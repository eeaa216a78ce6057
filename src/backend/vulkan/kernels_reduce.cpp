// Host side of reduce.comp.
#include "rumus/core/error.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::ReducePush;
constexpr int kMaxDims = REDUCE_DIMS;
constexpr std::uint32_t kLocal = 256;
constexpr std::int64_t kSerialLimit = 64;  // reduced extents up to this run one invocation per output

}  // namespace

void VulkanBackend::reduce(ReduceOp op, TensorArg out, TensorArg in) {
  const Layout& li = *in.layout;
  const Layout& lo = *out.layout;
  ReducePush pc{};
  pc.offset_out = std::int32_t(lo.offset);
  pc.offset_in = std::int32_t(li.offset);
  std::int64_t n_red = 1;
  int nd = 0;
  for (std::size_t d = 0; d < li.shape.size(); ++d) {
    if (li.shape[d] == 1) continue;  // size-1 dims change no offset
    if (nd == kMaxDims)
      throw DeviceError("reduce: the Vulkan kernel takes at most 6 non-trivial dims, got shape " + shape_str(li.shape));
    pc.shape[nd] = std::uint32_t(li.shape[d]);
    pc.stride_in[nd] = std::int32_t(li.strides[d]);
    if (lo.shape[d] == 1) {
      pc.reduced_mask |= 1u << nd;
      n_red *= li.shape[d];
    } else {
      pc.stride_out[nd] = std::int32_t(lo.strides[d]);
    }
    ++nd;
  }
  pc.rank = std::uint32_t(nd);
  const std::int64_t n_out = lo.numel();
  if (n_out == 0) return;
  pc.n_out = std::uint32_t(n_out);
  pc.n_red = std::uint32_t(n_red);
  const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  if (is_arg && std::popcount(pc.reduced_mask) > 1) throw Error("reduce: argmax/argmin reduce over one dim");
  // A workgroup per output unless outputs are many and each reduction short:
  // serial loops over a few outputs leave the GPU idle behind memory latency.
  const bool per_group = !is_arg && (n_red > kSerialLimit || (n_red > 8 && n_out < 8192));
  std::vector<std::uint32_t> spec = {kLocal, std::uint32_t(op), std::uint32_t(out.dtype), std::uint32_t(in.dtype),
                                     per_group ? 1u : 0u};
  Operand ops[] = {{out, true}, {in, false}};
  if (per_group) {
    std::uint32_t gx = std::uint32_t(std::min<std::int64_t>(n_out, 65535));
    std::uint32_t gy = std::uint32_t((n_out + gx - 1) / gx);
    launch("reduce", spec, ops, &pc, sizeof pc, gx, gy);
  } else {
    launch("reduce", spec, ops, &pc, sizeof pc, groups_for(n_out, kLocal));
  }
}

}  // namespace rumus::vulkan
