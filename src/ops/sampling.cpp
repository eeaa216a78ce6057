// randperm and multinomial: drawn on the host from Philox uniforms taken on
// the CPU, so a seed gives the same result whatever the device; the result
// then moves to the requested device.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus {

Tensor randperm(std::int64_t n, TensorOptions o, Generator* gen) {
  if (n < 0) throw ValueError(fmt::format("randperm: expected n >= 0, got {}", n));
  std::vector<double> keys = rand({n}, {.dtype = DType::f64}, gen).to_vector<double>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return keys[std::size_t(a)] < keys[std::size_t(b)]; });
  Tensor t = tensor(order, {n}).to(o.dtype).to(o.device);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement, Generator* gen) {
  if (probs.dim() != 1 && probs.dim() != 2)
    throw ShapeError(fmt::format("multinomial: expected probs of 1 or 2 dims, got shape {}", shape_str(probs.shape())));
  if (!is_floating(probs.dtype()))
    throw DTypeError(fmt::format("multinomial: expected floating probs, got {}", dtype_name(probs.dtype())));
  const std::int64_t k = probs.size(-1), rows = probs.dim() == 2 ? probs.size(0) : 1;
  if (k == 0) throw ShapeError("multinomial: expected at least one category, got 0");
  if (num_samples <= 0) throw ValueError(fmt::format("multinomial: expected num_samples > 0, got {}", num_samples));
  if (!replacement && num_samples > k)
    throw ValueError(fmt::format("multinomial: cannot draw {} samples without replacement from {} categories",
                                 num_samples, k));
  std::vector<double> p;
  {
    NoGradGuard no_grad;
    p = probs.detach().to(DType::f64).to_vector<double>();
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    double total = 0;
    std::int64_t positive = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      const double w = p[std::size_t(r * k + j)];
      if (!(w >= 0) || std::isinf(w))
        throw ValueError(fmt::format("multinomial: expected finite non-negative probabilities, got {} in row {}", w, r));
      total += w;
      positive += w > 0;
    }
    if (!(total > 0)) throw ValueError(fmt::format("multinomial: expected a positive sum of probabilities in row {}", r));
    if (!replacement && positive < num_samples)
      throw ValueError(fmt::format("multinomial: row {} has {} non-zero categories, fewer than the {} samples drawn "
                                   "without replacement",
                                   r, positive, num_samples));
  }
  const std::vector<double> u = rand({rows * num_samples}, {.dtype = DType::f64}, gen).to_vector<double>();
  std::vector<std::int64_t> out(static_cast<std::size_t>(rows * num_samples));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> w(p.begin() + r * k, p.begin() + (r + 1) * k);
    for (std::int64_t s = 0; s < num_samples; ++s) {
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      const double target = u[std::size_t(r * num_samples + s)] * total;
      // The first category whose cumulative weight passes the target, skipping zero weights.
      std::int64_t pick = -1;
      double cumulative = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        if (w[std::size_t(j)] <= 0) continue;
        pick = j;
        cumulative += w[std::size_t(j)];
        if (target < cumulative) break;
      }
      out[std::size_t(r * num_samples + s)] = pick;
      if (!replacement) w[std::size_t(pick)] = 0;  // drawn once
    }
  }
  Shape shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  return tensor(out, shape).to(probs.device());
}

}  // namespace rumus
