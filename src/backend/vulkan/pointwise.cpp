// Host side of elementwise.comp: dim merging and push constants.
#include <array>
#include <cstring>

#include "rumus/core/error.hpp"
#include "rumus/core/saturate_cast.hpp"
#include "../pointwise.hpp"
#include "../strided.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

constexpr int kMaxDims = PW_DIMS;  // per dispatch; outer dims beyond are looped here
constexpr std::uint32_t kLocal = 256;

// One pointwise kernel over out's shape (elementwise.comp).
void pointwise(VulkanBackend& vk, const char* op_name, PointwiseKind kind, std::uint32_t op,
               std::span<const TensorArg> args, double p0, double p1, std::uint32_t elem_bytes = 4,
               const std::uint32_t* bits = nullptr) {
  const Layout& lo = *args[0].layout;
  const std::int64_t n = lo.numel();
  if (n == 0) return;
  if (n > std::int64_t(UINT32_MAX)) throw DeviceError(std::string(op_name) + ": more than 2^32 elements on Vulkan");
  push::PointwisePush pc{};
  pc.n = std::uint32_t(n);
  pc.p0 = float(p0);
  pc.p1 = float(p1);
  push::split_double(p0, pc.p0_lo, pc.p0_hi);
  push::split_double(p1, pc.p1_lo, pc.p1_hi);
  if (bits) {  // raw words instead of floats
    std::memcpy(&pc.p0, &bits[0], 4);
    std::memcpy(&pc.p1, &bits[1], 4);
  }
  const std::size_t k = args.size();
  std::array<const Layout*, 4> layouts{};
  for (std::size_t i = 0; i < 4; ++i) layouts[i] = args[i < k ? i : 0].layout;  // spare slots repeat operand 0
  const StridedDims<4> dims = coalesce<4>(lo.shape, layouts, op_name);
  const int nd = dims.nd;
  const auto& size = dims.size;
  const auto& stride = dims.stride;
  // The inner kMaxDims dims go to the kernel; any outer ones become one dispatch per index.
  const int outer = std::max(0, nd - kMaxDims);
  const int inner = nd - outer;
  bool contiguous = inner <= 1;
  pc.rank = std::uint32_t(inner);
  std::int64_t per_dispatch = 1;
  for (int d = 0; d < inner; ++d) {
    pc.shape[d] = std::uint32_t(size[outer + d]);
    per_dispatch *= size[outer + d];
    for (std::size_t i = 0; i < k; ++i) {
      pc.stride[i * kMaxDims + d] = std::int32_t(stride[i][outer + d]);
      if (stride[i][outer + d] != 1) contiguous = false;
    }
  }
  pc.n = std::uint32_t(per_dispatch);
  std::uint32_t dt[4] = {0, 0, 0, 0};
  std::array<VulkanBackend::Operand, 4> ops{};
  DType widest = args[0].dtype;  // a 64-bit operand selects the double-precision variant
  for (std::size_t i = 0; i < k; ++i) {
    dt[i] = std::uint32_t(args[i].dtype);
    ops[i] = {args[i], i == 0};
    if (args[i].dtype == DType::f64 || args[i].dtype == DType::i64) widest = args[i].dtype;
  }
  // Products of i16 and i32 pass 2^24, past which float is inexact: their
  // arithmetic runs in double where the device has it (exact for i16).
  if (kind == PointwiseKind::binary && widest != DType::f64 && widest != DType::i64 && vk.context().float64)
    for (std::size_t i = 0; i < k; ++i)
      if (args[i].dtype == DType::i16 || args[i].dtype == DType::i32) widest = DType::i64;
  const bool raw = kind == PointwiseKind::fill || kind == PointwiseKind::fill64 || kind == PointwiseKind::raw_copy;
  const ShaderId shader = raw ? ShaderId::elementwise : shader_for(ShaderId::elementwise, widest);
  // Four elements an invocation where every access can be 16 bytes (8 for f16
  // operands): wide accesses keep more bytes in flight. Contiguous means one
  // dispatch. Measured on an H200 with f16 unary and binary ops, and batch
  // norm's passes in fours too: ResNet-18's amp step 1.08x (batch 128) and
  // 1.09x (512) faster. Fills and casts take the same path.
  bool quads = contiguous && (kind == PointwiseKind::raw_copy ? elem_bytes == 4
                                                              : kind == PointwiseKind::fill ||
                                                                    kind == PointwiseKind::cast ||
                                                                    kind == PointwiseKind::unary ||
                                                                    kind == PointwiseKind::binary);
  for (std::size_t i = 0; i < k; ++i)
    quads = quads && args[i].layout->offset % 4 == 0 &&
            (kind == PointwiseKind::raw_copy || args[i].dtype == DType::f32 || args[i].dtype == DType::f16);
  std::vector<std::uint32_t> spec = {kLocal,     op,           dt[0], dt[1], dt[2], dt[3], contiguous ? 1u : 0u,
                                     elem_bytes, std::uint32_t(kind), quads ? 1u : 0u};
  std::int64_t outer_count = n / per_dispatch;
  for (std::int64_t o = 0; o < outer_count; ++o) {
    std::int64_t r = o;
    for (std::size_t i = 0; i < k; ++i) pc.offset[i] = std::int32_t(args[i].layout->offset);
    for (int d = outer - 1; d >= 0; --d) {
      std::int64_t idx = r % size[d];
      r /= size[d];
      for (std::size_t i = 0; i < k; ++i) pc.offset[i] += std::int32_t(idx * stride[i][d]);
    }
    vk.launch(shader, spec, std::span(ops.data(), k), &pc, sizeof pc,
              groups_for(quads ? (per_dispatch + 3) / 4 : per_dispatch, kLocal));
  }
}

}  // namespace

void copy(Backend& be, TensorArg out, TensorArg in) {
  TensorArg args[] = {out, in};
  if (out.dtype == in.dtype)
    pointwise(device_of(be), "copy", PointwiseKind::raw_copy, 0, args, 0, 0, std::uint32_t(dtype_size(in.dtype)));
  else pointwise(device_of(be), "copy", PointwiseKind::cast, 0, args, 0, 0);
}

namespace {

void where(Backend& be, TensorArg out, TensorArg cond, TensorArg a, TensorArg b) {
  TensorArg args[] = {out, cond, a, b};
  pointwise(device_of(be), "where", PointwiseKind::where, 0, args, 0, 0);
}

}  // namespace

void fill(Backend& be, TensorArg out, double value) {
  if (out.dtype == DType::f64 || out.dtype == DType::i64) {
    // Exact 64-bit patterns travel as two raw words.
    std::uint64_t v;
    if (out.dtype == DType::f64) std::memcpy(&v, &value, 8);
    else v = std::uint64_t(saturate_cast<std::int64_t>(value));  // 1e20, NaN: defined, as on the CPU
    const std::uint32_t words[2] = {std::uint32_t(v), std::uint32_t(v >> 32)};
    TensorArg args[] = {out};
    pointwise(device_of(be), "fill", PointwiseKind::fill64, 0, args, 0, 0, 8, words);
    return;
  }
  TensorArg args[] = {out};
  pointwise(device_of(be), "fill", PointwiseKind::fill, 0, args, value, 0);
}

void unary(Backend& be, UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) {
  TensorArg args[] = {out, in};
  pointwise(device_of(be), "unary", PointwiseKind::unary, std::uint32_t(op), args, p0, p1);
}

void binary(Backend& be, BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) {
  TensorArg args[] = {out, a, b};
  pointwise(device_of(be), "binary", PointwiseKind::binary, std::uint32_t(op), args, p0, p1);
}

}  // namespace rumus::vulkan

namespace rumus {

using vulkan::runs_f64;

RUMUS_KERNEL_FAMILY(vulkan, pointwise) {
  register_kernel<FillKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::fill);
  register_kernel<CopyKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::copy);
  register_kernel<UnaryKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::unary, &runs_f64);
  register_kernel<BinaryKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::binary, &runs_f64);
  register_kernel<WhereKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::where, &runs_f64);
}

}  // namespace rumus
