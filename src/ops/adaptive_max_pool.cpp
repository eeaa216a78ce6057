// Adaptive max pooling as a gather of every window, each padded to the
// largest window's size by repeating its last position (which leaves its
// maximum unchanged), and max over the window positions.
#include <algorithm>
#include <limits>

#include "gather_along.hpp"
#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/indexing.hpp"
#include "rumus/ops/padding.hpp"
#include "rumus/ops/pooling.hpp"
#include "rumus/ops/reduction.hpp"

namespace rumus {

namespace {

// Per output position, its window's input positions (k of them, the last repeated).
struct Windows {
  std::int64_t k = 0;
  std::vector<std::int64_t> positions;  // out * k
};

Windows adaptive_windows(std::int64_t in, std::int64_t out) {
  Windows w;
  for (std::int64_t i = 0; i < out; ++i) w.k = std::max(w.k, (((i + 1) * in + out - 1) / out) - (i * in / out));
  for (std::int64_t i = 0; i < out; ++i) {
    const std::int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
    for (std::int64_t j = 0; j < w.k; ++j) w.positions.push_back(std::min(start + j, end - 1));
  }
  return w;
}

// The maximum of each window of `x` (rows wh, columns ww, in x's coordinates)
// and its flat index h * plane_w + w into the plane, where `row`/`col` map x's
// coordinates to the plane's (padding: -1, never a maximum).
std::tuple<Tensor, Tensor> window_max(const Tensor& x, std::int64_t out_h, std::int64_t out_w, const Windows& wh,
                                      const Windows& ww, std::int64_t row_offset, std::int64_t col_offset,
                                      std::int64_t plane_w) {
  const std::int64_t nd = x.dim();
  // [..., out_h * kh, out_w * kw] -> [..., out_h, out_w, kh * kw]
  Tensor g = detail::gather_along(detail::gather_along(x, nd - 2, wh.positions), nd - 1, ww.positions);
  Shape split(x.shape().begin(), x.shape().end() - 2), flat = split;
  split.insert(split.end(), {out_h, wh.k, out_w, ww.k});
  flat.insert(flat.end(), {out_h, out_w, wh.k * ww.k});
  std::vector<std::int64_t> order;
  for (std::int64_t d = 0; d < nd - 2; ++d) order.push_back(d);
  order.insert(order.end(), {nd - 2, nd, nd - 1, nd + 1});
  g = g.reshape(split).permute(order).reshape(flat);
  auto [values, arg] = max(g, -1);
  // Each window position's flat index into the plane, looked up at the argmax.
  std::vector<std::int64_t> plane;
  for (std::int64_t i = 0; i < out_h; ++i)
    for (std::int64_t j = 0; j < out_w; ++j)
      for (std::int64_t a = 0; a < wh.k; ++a)
        for (std::int64_t b = 0; b < ww.k; ++b)
          plane.push_back((wh.positions[std::size_t(i * wh.k + a)] - row_offset) * plane_w +
                          ww.positions[std::size_t(j * ww.k + b)] - col_offset);
  Shape table_shape(std::size_t(nd - 2), 1);
  table_shape.insert(table_shape.end(), {out_h, out_w, wh.k * ww.k});
  const Tensor table = tensor(plane, table_shape).to(x.device()).expand(flat).contiguous();
  const Tensor indices = gather(table, table.dim() - 1, arg.unsqueeze(-1)).squeeze(-1);
  return {values, indices};
}

}  // namespace

std::tuple<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& input, Size2 size) {
  const char* op = "adaptive_max_pool2d";
  detail::check_defined(op, input);
  detail::check_floating(op, input);
  if (input.dim() != 3 && input.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 4 dims [N, C, H, W] or 3 [C, H, W], got {}", op,
                                 shape_str(input.shape())));
  if (size[0] < 1 || size[1] < 1)
    throw ShapeError(fmt::format("{}: expected an output size of at least 1x1, got {}x{}", op, size[0], size[1]));
  const std::int64_t nd = input.dim(), h = input.shape()[std::size_t(nd - 2)], w = input.shape()[std::size_t(nd - 1)];
  if (h < 1 || w < 1)
    throw ShapeError(fmt::format("{}: expected a non-empty input plane, got {}", op, shape_str(input.shape())));
  return window_max(input, size[0], size[1], adaptive_windows(h, size[0]), adaptive_windows(w, size[1]), 0, 0, w);
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dOptions& o) {
  // max_pool2d checks the arguments and gives the output size.
  const Tensor pooled = max_pool2d(input.detach(), o);
  const std::int64_t nd = input.dim(), h = input.shape()[std::size_t(nd - 2)], w = input.shape()[std::size_t(nd - 1)];
  const std::int64_t out_h = pooled.shape()[std::size_t(nd - 2)], out_w = pooled.shape()[std::size_t(nd - 1)];
  auto fixed = [&](std::int64_t in, std::int64_t out, std::size_t d) {
    const std::int64_t k = o.kernel[d], s = o.stride[d] == 0 ? k : o.stride[d], pad = o.padding[d];
    Windows win;
    win.k = k;
    for (std::int64_t i = 0; i < out; ++i)  // ceil_mode's last window may run past the padded input: clamp
      for (std::int64_t j = 0; j < k; ++j) win.positions.push_back(std::min(i * s + j * o.dilation[d], in + 2 * pad - 1));
    return win;
  };
  const Tensor padded = o.padding == Size2(0)
                            ? input
                            : pad(input, {o.padding[1], o.padding[1], o.padding[0], o.padding[0]}, "constant",
                                  -std::numeric_limits<double>::infinity());
  return window_max(padded, out_h, out_w, fixed(h, out_h, 0), fixed(w, out_w, 1), o.padding[0], o.padding[1], w);
}

Tensor adaptive_max_pool2d(const Tensor& input, Size2 size) {
  return std::get<0>(adaptive_max_pool2d_with_indices(input, size));
}

std::tuple<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& input, std::int64_t size) {
  const char* op = "adaptive_max_pool1d";
  detail::check_defined(op, input);
  if (input.dim() != 2 && input.dim() != 3)
    throw ShapeError(fmt::format("{}: expected input of 3 dims [N, C, L] or 2 [C, L], got {}", op,
                                 shape_str(input.shape())));
  if (size < 1) throw ShapeError(fmt::format("{}: expected an output size of at least 1, got {}", op, size));
  // As a height-1 image: the flat plane index is then the position along L.
  auto [values, indices] = adaptive_max_pool2d_with_indices(input.unsqueeze(-2), {1, size});
  return {values.squeeze(-2), indices.squeeze(-2)};
}

Tensor adaptive_max_pool1d(const Tensor& input, std::int64_t size) {
  return std::get<0>(adaptive_max_pool1d_with_indices(input, size));
}

Tensor max_unpool2d(const Tensor& input, const Tensor& indices, const Pool2dOptions& o, std::optional<Size2> size) {
  const char* op = "max_unpool2d";
  detail::check_defined(op, input);
  detail::check_defined(op, indices);
  detail::check_floating(op, input);
  if (input.dim() != 3 && input.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 4 dims [N, C, H, W] or 3 [C, H, W], got {}", op,
                                 shape_str(input.shape())));
  if (indices.dtype() != DType::i64 || indices.shape() != input.shape())
    throw ShapeError(fmt::format("{}: expected i64 indices shaped as the input {}, got {} {}", op,
                                 shape_str(input.shape()), dtype_name(indices.dtype()), shape_str(indices.shape())));
  const std::int64_t nd = input.dim();
  std::int64_t out[2];
  for (std::size_t d = 0; d < 2; ++d) {
    const std::int64_t k = o.kernel[d], s = o.stride[d] == 0 ? k : o.stride[d];
    out[d] = size ? (*size)[d] : (input.shape()[std::size_t(nd) - 2 + d] - 1) * s - 2 * o.padding[d] + k;
    if (out[d] < 1) throw ShapeError(fmt::format("{}: expected an output size of at least 1, got {}", op, out[d]));
  }
  Shape flat(input.shape().begin(), input.shape().end() - 2), shape = flat;
  flat.push_back(input.shape()[std::size_t(nd - 2)] * input.shape()[std::size_t(nd - 1)]);
  shape.insert(shape.end(), {out[0], out[1]});
  Shape plane(input.shape().begin(), input.shape().end() - 2);
  plane.push_back(out[0] * out[1]);
  const Tensor zero = zeros(plane, {.dtype = input.dtype(), .device = input.device()});
  return scatter_add(zero, nd - 2, indices.reshape(flat), input.reshape(flat)).view(shape);
}

}  // namespace rumus
