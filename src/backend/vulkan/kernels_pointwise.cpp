// Host side of elementwise.comp: dim merging, push constants, dtype checks.
#include <array>
#include <cstring>

#include "rumus/core/error.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

constexpr int kMaxDims = 4;  // per dispatch; outer dims beyond are looped here
constexpr std::uint32_t kLocal = 256;
constexpr std::uint32_t kFill = 100, kCast = 101, kRawCopy = 102, kWhere = 103, kFill64 = 104, kBinaryBase = 32;

struct PointwisePush {
  std::uint32_t n, rank;
  float p0, p1;
  std::uint32_t shape[kMaxDims];
  std::int32_t offset[4];
  std::int32_t stride[4 * kMaxDims];
};
static_assert(sizeof(PointwisePush) <= kPushBytes);

// Arithmetic runs in f32; f64 tensors only copy and fill exactly.
void check_arith(const char* op, DType t) {
  if (t == DType::f64)
    throw DTypeError(std::string(op) + ": the Vulkan backend computes in f32, f16, bf16 and integer dtypes, got f64 "
                                       "(cast to f32 first)");
}

}  // namespace

void VulkanBackend::pointwise(const char* op_name, std::uint32_t op, std::span<const TensorArg> args, double p0,
                              double p1, std::uint32_t elem_bytes, const std::uint32_t* bits) {
  const Layout& lo = *args[0].layout;
  const std::int64_t n = lo.numel();
  if (n == 0) return;
  if (n > std::int64_t(UINT32_MAX)) throw DeviceError(std::string(op_name) + ": more than 2^32 elements on Vulkan");
  PointwisePush pc{};
  pc.n = std::uint32_t(n);
  pc.p0 = float(p0);
  pc.p1 = float(p1);
  if (bits) {  // raw words instead of floats
    std::memcpy(&pc.p0, &bits[0], 4);
    std::memcpy(&pc.p1, &bits[1], 4);
  }
  const std::size_t k = args.size();
  // Merge dims that every operand walks contiguously; drop size-1 dims.
  int nd = 0;
  std::int64_t size[16], stride[4][16];
  for (std::size_t d = 0; d < lo.shape.size(); ++d) {
    if (lo.shape[d] == 1) continue;
    bool merge = nd > 0;
    for (std::size_t i = 0; i < k && merge; ++i)
      merge = stride[i][nd - 1] == args[i].layout->strides[d] * lo.shape[d];
    if (merge) {
      size[nd - 1] *= lo.shape[d];
      for (std::size_t i = 0; i < k; ++i) stride[i][nd - 1] = args[i].layout->strides[d];
      continue;
    }
    if (nd == 16) throw DeviceError(std::string(op_name) + ": more than 16 dims on Vulkan");
    size[nd] = lo.shape[d];
    for (std::size_t i = 0; i < k; ++i) stride[i][nd] = args[i].layout->strides[d];
    ++nd;
  }
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
  std::array<Operand, 4> ops{};
  for (std::size_t i = 0; i < k; ++i) {
    dt[i] = std::uint32_t(args[i].dtype);
    ops[i] = {args[i], i == 0};
  }
  std::vector<std::uint32_t> spec = {kLocal, op, dt[0], dt[1], dt[2], dt[3], contiguous ? 1u : 0u, elem_bytes};
  std::int64_t outer_count = n / per_dispatch;
  for (std::int64_t o = 0; o < outer_count; ++o) {
    std::int64_t r = o;
    for (std::size_t i = 0; i < k; ++i) pc.offset[i] = std::int32_t(args[i].layout->offset);
    for (int d = outer - 1; d >= 0; --d) {
      std::int64_t idx = r % size[d];
      r /= size[d];
      for (std::size_t i = 0; i < k; ++i) pc.offset[i] += std::int32_t(idx * stride[i][d]);
    }
    launch("elementwise", spec, std::span(ops.data(), k), &pc, sizeof pc, groups_for(per_dispatch, kLocal));
  }
}

void VulkanBackend::fill(TensorArg out, double value) {
  if (out.dtype == DType::f64 || out.dtype == DType::i64) {
    // Exact 64-bit patterns travel as two raw words.
    std::uint64_t v;
    if (out.dtype == DType::f64) std::memcpy(&v, &value, 8);
    else v = std::uint64_t(std::int64_t(value));
    const std::uint32_t words[2] = {std::uint32_t(v), std::uint32_t(v >> 32)};
    TensorArg args[] = {out};
    pointwise("fill", kFill64, args, 0, 0, 8, words);
    return;
  }
  TensorArg args[] = {out};
  pointwise("fill", kFill, args, value, 0);
}

void VulkanBackend::copy(TensorArg out, TensorArg in) {
  TensorArg args[] = {out, in};
  if (out.dtype == in.dtype) pointwise("copy", kRawCopy, args, 0, 0, std::uint32_t(dtype_size(in.dtype)));
  else pointwise("copy", kCast, args, 0, 0);
}

void VulkanBackend::unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) {
  check_arith("unary", in.dtype);
  TensorArg args[] = {out, in};
  pointwise("unary", std::uint32_t(op), args, p0, p1);
}

void VulkanBackend::binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) {
  check_arith("binary", a.dtype);
  TensorArg args[] = {out, a, b};
  pointwise("binary", kBinaryBase + std::uint32_t(op), args, p0, p1);
}

void VulkanBackend::where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) {
  check_arith("where", out.dtype);
  TensorArg args[] = {out, cond, a, b};
  pointwise("where", kWhere, args, 0, 0);
}

}  // namespace rumus::vulkan
