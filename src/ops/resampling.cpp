// interpolate as one gather per spatial dim (nearest) or two and a weighted
// sum (linear modes), with PyTorch's source positions; pixel_shuffle and
// pixel_unshuffle as a reshape, a permute and a reshape.
#include "rumus/ops/resampling.hpp"

#include <algorithm>
#include <cmath>

#include "gather_along.hpp"
#include "op_util.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/elementwise.hpp"

namespace rumus {

namespace {

// How far apart output positions read the input: the given factor's inverse, else input over output size.
double source_step(std::int64_t in, std::int64_t out, std::optional<double> factor) {
  return factor ? 1.0 / *factor : double(in) / double(out);
}

// PyTorch's nearest index (computed in float, as its kernels do).
std::int64_t nearest_source(std::int64_t j, std::int64_t in, std::int64_t out, std::optional<double> factor) {
  if (out == in) return j;
  if (out == 2 * in) return j >> 1;
  const float step = float(source_step(in, out, factor));
  return std::min<std::int64_t>(std::int64_t(std::floor(float(j) * step)), in - 1);
}

// PyTorch's source coordinate for the linear modes.
double linear_source(std::int64_t j, std::int64_t in, std::int64_t out, bool align_corners,
                     std::optional<double> factor) {
  if (align_corners) return out > 1 ? double(j) * double(in - 1) / double(out - 1) : 0.0;
  return std::max(0.0, (double(j) + 0.5) * source_step(in, out, factor) - 0.5);
}

Tensor resample_dim(const Tensor& x, std::int64_t dim, std::int64_t out, bool linear, bool align_corners,
                    std::optional<double> factor) {
  const std::int64_t in = x.shape()[std::size_t(dim)];
  std::vector<std::int64_t> lo(std::size_t(out), 0), hi(std::size_t(out), 0);
  std::vector<double> weight(std::size_t(out), 0.0);
  for (std::int64_t j = 0; j < out; ++j) {
    if (!linear) {
      lo[std::size_t(j)] = nearest_source(j, in, out, factor);
      continue;
    }
    const double src = linear_source(j, in, out, align_corners, factor);
    const std::int64_t a = std::min<std::int64_t>(std::int64_t(src), in - 1);
    lo[std::size_t(j)] = a;
    hi[std::size_t(j)] = std::min<std::int64_t>(a + 1, in - 1);
    weight[std::size_t(j)] = std::clamp(src - double(a), 0.0, 1.0);
  }
  const Tensor near = detail::gather_along(x, dim, lo);
  if (!linear) return near;
  Shape ws(std::size_t(x.dim()), 1);
  ws[std::size_t(dim)] = out;
  const Tensor w = tensor(weight, ws).to(x.dtype()).to(x.device());
  return add(near, mul(sub(detail::gather_along(x, dim, hi), near), w));
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateOptions& o) {
  const char* op = "interpolate";
  detail::check_defined(op, input);
  detail::check_floating(op, input);
  const bool linear = o.mode == "linear" || o.mode == "bilinear";
  if (o.mode != "nearest" && !linear)
    throw ValueError(fmt::format("{}: expected mode \"nearest\", \"linear\" or \"bilinear\", got \"{}\"", op, o.mode));
  if (input.dim() != 3 && input.dim() != 4)
    throw ShapeError(fmt::format("{}: expected input of 3 dims [N, C, L] or 4 [N, C, H, W], got {}", op,
                                 shape_str(input.shape())));
  const std::int64_t spatial = input.dim() - 2;
  if ((o.mode == "linear" && spatial != 1) || (o.mode == "bilinear" && spatial != 2))
    throw ShapeError(fmt::format("{}: mode \"{}\" expects input of {} dims, got {}", op, o.mode,
                                 o.mode == "linear" ? 3 : 4, shape_str(input.shape())));
  if (o.align_corners && !linear)
    throw ValueError(fmt::format("{}: align_corners applies to the linear modes only, not \"{}\"", op, o.mode));
  if (o.size.empty() == o.scale_factor.empty())
    throw ValueError(fmt::format("{}: expected either size or scale_factor, got {}", op,
                                 o.size.empty() ? "neither" : "both"));
  const std::size_t given = o.size.empty() ? o.scale_factor.size() : o.size.size();
  if (given != 1 && given != std::size_t(spatial))
    throw ShapeError(fmt::format("{}: expected {} given for 1 or {} spatial dims, got {} values for input {}", op,
                                 o.size.empty() ? "scale_factor" : "size", spatial, given, shape_str(input.shape())));
  Tensor out = input;
  for (std::int64_t k = 0; k < spatial; ++k) {
    const std::int64_t dim = 2 + k, in = input.shape()[std::size_t(dim)];
    const std::size_t at = given == 1 ? 0 : std::size_t(k);
    std::optional<double> factor;
    std::int64_t size;
    if (o.size.empty()) {
      factor = o.scale_factor[at];
      if (!(*factor > 0.0)) throw ValueError(fmt::format("{}: expected scale_factor > 0, got {}", op, *factor));
      size = std::int64_t(std::floor(double(in) * *factor));
    } else {
      size = o.size[at];
    }
    if (size < 1 || in < 1)
      throw ShapeError(fmt::format("{}: input {} would give an output of size {} in dim {}", op,
                                   shape_str(input.shape()), size, dim));
    if (size != in || factor.value_or(1.0) != 1.0 || o.align_corners.value_or(false))
      out = resample_dim(out, dim, size, linear, o.align_corners.value_or(false), factor);
  }
  return out;
}

namespace {

void check_factor(const char* op, const char* what, const Tensor& input, std::int64_t r) {
  detail::check_defined(op, input);
  if (r < 1) throw ValueError(fmt::format("{}: expected {} >= 1, got {}", op, what, r));
  if (input.dim() < 3)
    throw ShapeError(fmt::format("{}: expected input of at least 3 dims [*, C, H, W], got {}", op,
                                 shape_str(input.shape())));
}

}  // namespace

Tensor pixel_shuffle(const Tensor& input, std::int64_t r) {
  const char* op = "pixel_shuffle";
  check_factor(op, "upscale_factor", input, r);
  const Shape& s = input.shape();
  const std::size_t lead = s.size() - 3;
  const std::int64_t c = s[lead], h = s[lead + 1], w = s[lead + 2];
  if (c % (r * r) != 0)
    throw ShapeError(fmt::format("{}: expected channels divisible by upscale_factor^2 = {}, got input {}", op, r * r,
                                 shape_str(s)));
  Shape split(s.begin(), s.begin() + std::ptrdiff_t(lead)), out = split;
  split.insert(split.end(), {c / (r * r), r, r, h, w});
  out.insert(out.end(), {c / (r * r), h * r, w * r});
  std::vector<std::int64_t> order;
  for (std::size_t d = 0; d < lead; ++d) order.push_back(std::int64_t(d));
  const auto l = std::int64_t(lead);
  order.insert(order.end(), {l, l + 3, l + 1, l + 4, l + 2});  // [C, H, r, W, r]
  return input.reshape(split).permute(order).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& input, std::int64_t r) {
  const char* op = "pixel_unshuffle";
  check_factor(op, "downscale_factor", input, r);
  const Shape& s = input.shape();
  const std::size_t lead = s.size() - 3;
  const std::int64_t c = s[lead], h = s[lead + 1], w = s[lead + 2];
  if (h % r != 0 || w % r != 0)
    throw ShapeError(fmt::format("{}: expected height and width divisible by downscale_factor {}, got input {}", op,
                                 r, shape_str(s)));
  Shape split(s.begin(), s.begin() + std::ptrdiff_t(lead)), out = split;
  split.insert(split.end(), {c, h / r, r, w / r, r});
  out.insert(out.end(), {c * r * r, h / r, w / r});
  std::vector<std::int64_t> order;
  for (std::size_t d = 0; d < lead; ++d) order.push_back(std::int64_t(d));
  const auto l = std::int64_t(lead);
  order.insert(order.end(), {l, l + 2, l + 4, l + 1, l + 3});  // [C, r, r, H, W]
  return input.reshape(split).permute(order).reshape(out);
}

}  // namespace rumus
