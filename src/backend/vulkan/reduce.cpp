// Host side of reduce.comp and column_reduce.comp.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

#include "rumus/core/error.hpp"
#include "../reduce.hpp"
#include "../strided.hpp"
#include "kernels.hpp"
#include "push_constants.hpp"
#include "vulkan_backend.hpp"

namespace rumus::vulkan {

namespace {

using push::ReducePush;
constexpr int kMaxDims = REDUCE_DIMS;
constexpr std::uint32_t kLocal = 256;
constexpr std::int64_t kSerialLimit = 64;  // reduced extents up to this run one invocation per output
// One output over at least this many elements is split over workgroups
// (partials, then a second launch): one workgroup alone leaves the GPU idle.
constexpr std::int64_t kChunkedFrom = std::int64_t(1) << 16;
constexpr std::int64_t kChunk = 4096;  // elements per workgroup, at most 256 workgroups
constexpr std::int64_t kRowsUpTo = 2048;  // reduced extents of contiguous rows that share a workgroup
constexpr std::int64_t kColumnInvocations = std::int64_t(1) << 18;  // reduce_columns' first pass, wanted

using Operand = VulkanBackend::Operand;

// reduce() in one launch (two for one long output), down contiguous columns
// in column_reduce.comp (reduce_down_columns), or in two passes down other
// columns (reduce_columns). `serial`: one invocation per output;
// `no_columns`: the one-launch choices only.
enum class ReducePlan { any, serial, no_columns };
void reduce_pass(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, ReducePlan plan);
bool reduce_columns(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims);
bool reduce_down_columns(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims);

}  // namespace

std::int64_t& reduce_max_groups() {
  static std::int64_t groups = 65535;
  return groups;
}

void reduce(Backend& be, ReduceOp op, TensorArg out, TensorArg in) {
  reduce_pass(device_of(be), op, out, in, ReducePlan::any);
}

namespace {

void reduce_pass(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, ReducePlan plan) {
  const Layout& li = *in.layout;
  const Layout& lo = *out.layout;
  ReducePush pc{};
  pc.offset_out = std::int32_t(lo.offset);
  pc.offset_in = std::int32_t(li.offset);
  // Walk the input's shape with the output broadcast over the reduced dims
  // (stride 0): merging then never joins a reduced dim with a kept one.
  Layout lo_bcast{li.shape, lo.strides, lo.offset};
  for (std::size_t d = 0; d < li.shape.size(); ++d)
    if (lo.shape[d] == 1) lo_bcast.strides[d] = 0;
  const StridedDims<2> dims = coalesce<2>(li.shape, {&li, &lo_bcast}, "reduce");
  if (dims.nd > kMaxDims)
    throw DeviceError("reduce: the Vulkan kernel takes at most 6 dims after merging, got shape " + shape_str(li.shape));
  std::int64_t n_red = 1;
  const int nd = dims.nd;
  for (int d = 0; d < nd; ++d) {
    pc.shape[d] = std::uint32_t(dims.size[d]);
    pc.stride_in[d] = std::int32_t(dims.stride[0][d]);
    pc.stride_out[d] = std::int32_t(dims.stride[1][d]);
    if (dims.stride[1][d] == 0 && dims.size[d] > 1) {
      pc.reduced_mask |= 1u << d;
      n_red *= dims.size[d];
    }
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
  const bool per_group =
      !is_arg && plan != ReducePlan::serial && (n_red > kSerialLimit || (n_red > 8 && n_out < 8192));
  if (plan == ReducePlan::any && !is_arg && reduce_down_columns(vk, op, out, in, dims)) return;
  if (per_group && plan == ReducePlan::any && reduce_columns(vk, op, out, in, dims)) return;
  std::vector<std::uint32_t> spec = {kLocal, std::uint32_t(op), std::uint32_t(out.dtype), std::uint32_t(in.dtype),
                                     per_group ? 1u : 0u, 0u, 0u};
  Operand ops[] = {{out, true}, {in, false}};
  const ShaderId shader = shader_for(ShaderId::reduce, out.dtype == DType::f64 ? out.dtype : in.dtype);
  const bool splits = op == ReduceOp::sum || op == ReduceOp::max || op == ReduceOp::min;
  if (n_out == 1 && n_red >= kChunkedFrom && splits) {
    // Partials in the output's dtype (f32 for 16-bit outputs), combined by a second reduce.
    const DType pdt = is_16bit_float(out.dtype) ? DType::f32 : out.dtype;
    const std::int64_t groups = std::min<std::int64_t>(256, n_red / kChunk);
    Layout partial_layout = Layout::contiguous({groups});
    Storage partials(vk.device(), std::size_t(groups) * dtype_size(pdt));
    const TensorArg part{&partials, pdt, &partial_layout};
    ReducePush first = pc;
    first.offset_out = 0;
    Operand chunk_ops[] = {{part, true}, {in, false}};
    vk.launch(shader, {kLocal, std::uint32_t(op), std::uint32_t(pdt), std::uint32_t(in.dtype), 1u, 1u}, chunk_ops,
              &first, sizeof first, std::uint32_t(groups));
    Layout out_view{{1}, {1}, lo.offset};
    reduce(vk, op, TensorArg{out.storage, out.dtype, &out_view}, part);
    return;
  }
  // Short contiguous rows: several to a workgroup, bit_ceil(n_red) / 16 lanes
  // each. One workgroup of 256 per row of 576 (the CNN's bias gradient,
  // [512 x 64] per-sample sums) spent its time in its tree: 105 us a step on
  // an H100, 39 us four rows to a workgroup.
  const bool rows = per_group && n_red <= kRowsUpTo && pc.reduced_mask == 1u << (nd - 1) && dims.stride[0][nd - 1] == 1;
  if (rows) {
    const std::uint32_t lanes = std::uint32_t(std::clamp<std::uint64_t>(std::bit_ceil(std::uint64_t(n_red)) / 16, 8, 64));
    spec[6] = lanes;
    const std::int64_t groups = (n_out + kLocal / lanes - 1) / (kLocal / lanes);
    std::uint32_t gx = std::uint32_t(std::min<std::int64_t>(groups, reduce_max_groups()));
    std::uint32_t gy = std::uint32_t((groups + gx - 1) / gx);
    vk.launch(shader, spec, ops, &pc, sizeof pc, gx, gy);
  } else if (per_group) {
    std::uint32_t gx = std::uint32_t(std::min<std::int64_t>(n_out, reduce_max_groups()));
    std::uint32_t gy = std::uint32_t((n_out + gx - 1) / gx);
    vk.launch(shader, spec, ops, &pc, sizeof pc, gx, gy);
  } else {
    vk.launch(shader, spec, ops, &pc, sizeof pc, groups_for(n_out, kLocal));
  }
}

// Down contiguous columns, [batch, rows, columns] of f32, f16 or bf16
// (column_reduce.comp): bias gradients and split-K slices. The generic
// kernel's one invocation per output waited on memory at every row (16 us for
// the 16 slices of a 1024 x 256 weight gradient on an H200). False where it
// does not apply.
bool reduce_down_columns(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims) {
  const auto takes = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
  if (!takes(in.dtype) || !takes(out.dtype)) return false;
  const int nd = dims.nd, dr = nd - 2;  // [rows, columns] or [batch, rows, columns]
  if (dr < 0 || dr > 1 || dims.stride[1][dr] != 0 || dims.size[dr] < 2) return false;
  if (dims.stride[0][nd - 1] != 1 || dims.stride[1][nd - 1] != 1) return false;
  if (dr == 1 && (dims.stride[1][0] == 0 || dims.size[0] > 65535)) return false;
  const std::int64_t rows = dims.size[dr], columns = dims.size[nd - 1], batch = dr == 1 ? dims.size[0] : 1;
  // The kernel indexes elements with 32-bit ints.
  const std::int64_t last_in = in.layout->offset + (batch - 1) * (dr == 1 ? dims.stride[0][0] : 0) +
                               (rows - 1) * dims.stride[0][dr] + columns;
  const std::int64_t last_out = out.layout->offset + (batch - 1) * (dr == 1 ? dims.stride[1][0] : 0) + columns;
  if (dims.stride[0][dr] < 0 || last_in > INT32_MAX || last_out > INT32_MAX || batch * rows * columns > INT32_MAX)
    return false;
  push::ColumnReducePush pc{};
  pc.rows = std::uint32_t(rows);
  pc.offset_in = std::int32_t(in.layout->offset);
  pc.row_stride = std::int32_t(dims.stride[0][dr]);
  pc.batch_stride_in = dr == 1 ? std::int32_t(dims.stride[0][0]) : 0;
  pc.offset_out = std::int32_t(out.layout->offset);
  pc.batch_stride_out = dr == 1 ? std::int32_t(dims.stride[1][0]) : 0;
  bool aligned = columns % 4 == 0;
  for (std::int64_t v : {std::int64_t(pc.offset_in), std::int64_t(pc.row_stride), std::int64_t(pc.batch_stride_in),
                         std::int64_t(pc.offset_out), std::int64_t(pc.batch_stride_out)})
    if (v % 4) aligned = false;
  const std::int64_t units = aligned ? columns / 4 : columns;
  const std::int64_t lx = std::min<std::int64_t>(64, std::int64_t(std::bit_ceil(std::uint64_t(units))));
  const std::int64_t ly = 256 / lx, column_groups = (units + lx - 1) / lx;
  if (column_groups > 65535) return false;
  pc.units = std::uint32_t(units);
  // Row runs: about two workgroups per SM of a large GPU, at least 16 rows per
  // invocation (two rounds of its eight loads: fewer rows cost less than the
  // second launch and its barrier, as a bias gradient over a batch of 64), and
  // at most 64 runs, so the second launch is short.
  std::int64_t runs = std::clamp<std::int64_t>(264 / (column_groups * batch), 1, 64);
  runs = std::max<std::int64_t>(1, std::min(runs, rows / (16 * ly)));
  pc.run = std::uint32_t((rows + runs - 1) / runs);
  runs = (rows + pc.run - 1) / pc.run;
  const std::uint32_t divide_by = op == ReduceOp::mean ? std::uint32_t(rows) : 0u;
  std::vector<std::uint32_t> spec = {256, std::uint32_t(op), std::uint32_t(lx), aligned ? 1u : 0u,
                                     std::uint32_t(in.dtype), std::uint32_t(out.dtype)};
  const auto groups = [&](std::int64_t y) {
    return std::array<std::uint32_t, 3>{std::uint32_t(column_groups), std::uint32_t(y), std::uint32_t(batch)};
  };
  if (runs == 1) {
    pc.divide_by = divide_by;
    Operand ops[] = {{out, true}, {in, false}};
    const auto g = groups(1);
    vk.launch(ShaderId::column_reduce, spec, ops, &pc, sizeof pc, g[0], g[1], g[2]);
    return true;
  }
  // Partial rows [batch, runs, columns], then the same kernel down them.
  Layout partial_layout = Layout::contiguous({batch, runs, columns});
  Storage partials(vk.device(), std::size_t(partial_layout.numel()) * 4);
  const TensorArg part{&partials, DType::f32, &partial_layout};
  push::ColumnReducePush first = pc;
  first.offset_out = 0;
  first.part_stride = std::int32_t(columns);
  first.batch_stride_out = std::int32_t(runs * columns);
  Operand first_ops[] = {{part, true}, {in, false}};
  auto g = groups(runs);
  spec[5] = std::uint32_t(DType::f32);
  vk.launch(ShaderId::column_reduce, spec, first_ops, &first, sizeof first, g[0], g[1], g[2]);
  spec[4] = std::uint32_t(DType::f32);
  spec[5] = std::uint32_t(out.dtype);
  push::ColumnReducePush second = pc;
  second.rows = std::uint32_t(runs);
  second.run = std::uint32_t(runs);
  second.offset_in = 0;
  second.row_stride = std::int32_t(columns);
  second.batch_stride_in = std::int32_t(runs * columns);
  second.divide_by = divide_by;
  Operand second_ops[] = {{out, true}, {part, false}};
  g = groups(1);
  vk.launch(ShaderId::column_reduce, spec, second_ops, &second, sizeof second, g[0], g[1], g[2]);
  return true;
}

// Down the columns: one reduced dim outside a contiguous kept one (a bias
// gradient's sum over the rows of [tokens, features]). A workgroup per output
// reads one element per memory sector of every row; instead every invocation
// first sums a run of rows down its column (neighbours read neighbours) into
// partials [parts, outputs], and the usual kernel then reduces the partials.
// Runs are short enough that about 2^18 invocations share the first pass: at
// 64 rows a run, [8192, 256] kept 32,768 invocations waiting on memory.
bool reduce_columns(VulkanBackend& vk, ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims) {
  const int nd = dims.nd;
  int dr = -1;
  for (int d = 0; d < nd; ++d) {
    if (dims.stride[1][d] != 0 || dims.size[d] == 1) continue;
    if (dr >= 0) return false;  // more than one reduced dim
    dr = d;
  }
  if (dr < 0 || dr == nd - 1 || dims.stride[0][nd - 1] != 1 || dims.size[nd - 1] < 8 || nd + 1 > kMaxDims)
    return false;
  // Equal runs (so a mean of means is the mean): the divisor of the extent in [8, 128] nearest the run
  // length that gives kColumnInvocations.
  const std::int64_t extent = dims.size[dr];
  std::int64_t outputs = 1;
  for (int d = 0; d < nd; ++d)
    if (d != dr) outputs *= dims.size[d];
  const std::int64_t want = std::clamp<std::int64_t>(extent * outputs / kColumnInvocations, 8, 64);
  std::int64_t rows = 0;
  for (std::int64_t r = 8; r <= 128 && r < extent; ++r)
    if (extent % r == 0 && (rows == 0 || std::abs(r - want) < std::abs(rows - want))) rows = r;
  if (rows == 0) return false;
  const std::int64_t parts = extent / rows;
  Shape split, partial_shape, out_shape;
  std::vector<std::int64_t> split_strides, out_strides;
  for (int d = 0; d < nd; ++d) {
    if (d == dr) {
      split.insert(split.end(), {parts, rows});
      split_strides.insert(split_strides.end(), {dims.stride[0][d] * rows, dims.stride[0][d]});
      partial_shape.insert(partial_shape.end(), {parts, 1});
      out_shape.push_back(1);
      out_strides.push_back(0);
      continue;
    }
    split.push_back(dims.size[d]);
    split_strides.push_back(dims.stride[0][d]);
    partial_shape.push_back(dims.size[d]);
    out_shape.push_back(dims.size[d]);
    out_strides.push_back(dims.stride[1][d]);
  }
  const DType pdt = is_16bit_float(out.dtype) ? DType::f32 : out.dtype;
  Layout in_view{split, split_strides, in.layout->offset};
  Layout partial_layout = Layout::contiguous(partial_shape);
  Storage partials(vk.device(), std::size_t(partial_layout.numel()) * dtype_size(pdt));
  reduce_pass(vk, op, TensorArg{&partials, pdt, &partial_layout}, TensorArg{in.storage, in.dtype, &in_view},
              ReducePlan::serial);
  partial_shape.erase(partial_shape.begin() + dr + 1);  // [.., parts, ..]
  Layout partial_view = Layout::contiguous(partial_shape);
  Layout out_view{out_shape, out_strides, out.layout->offset};
  reduce_pass(vk, op, TensorArg{out.storage, out.dtype, &out_view}, TensorArg{&partials, pdt, &partial_view},
              ReducePlan::no_columns);
  return true;
}

}  // namespace
}  // namespace rumus::vulkan

namespace rumus {

RUMUS_KERNEL_FAMILY(vulkan, reduce) {
  register_kernel<ReduceKernel>(Device::Kind::vulkan, kAllDTypes, &vulkan::reduce, &vulkan::runs_f64);
}

}  // namespace rumus
