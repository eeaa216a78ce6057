#include "rumus/ops/creation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "op_util.hpp"
#include "deferred_empty.hpp"
#include "../backend/pointwise.hpp"
#include "../backend/random.hpp"
#include "rumus/core/capture.hpp"

namespace rumus {

// Captured draws take fresh numbers at every replay, the ones eager calls
// would take: before each replay the generator advances as an eager draw
// advances it, and the seed and offset go to a small device tensor the
// kernel reads.
void detail::random_kernel(const char* op, RandomKind kind, const Tensor& out, double a, double b, Generator& g) {
  const BoundKernel<RandomKernel> draw = kernel<RandomKernel>(op, out);
  const Backend& be = backend(out.device());
  const std::uint64_t n = std::uint64_t(out.numel());
  if (!is_capturing() || !be.can_capture()) {  // a device that cannot capture runs the closure at each replay
    const std::uint64_t seed = g.seed(), offset = g.advance(n);
    draw(kind, arg(out), seed, offset, a, b, TensorArg{nullptr, DType::i32, nullptr});
    return;
  }
  Tensor state = alloc({4}, DType::i32, out.device());
  on_replay([&g, n, state]() mutable {
    const std::uint64_t seed = g.seed(), offset = g.advance(n);
    const std::uint32_t words[4] = {std::uint32_t(seed), std::uint32_t(seed >> 32), std::uint32_t(offset),
                                    std::uint32_t(offset >> 32)};
    device_backend(state.device()).write(state.storage(), 0, words, sizeof words);
  });
  draw(kind, arg(out), g.seed(), std::uint64_t(0), a, b, arg(state));  // seed and offset here are unused: `state` is read
}

using detail::alloc;
using detail::arg;

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}
Tensor random_tensor(RandomKind kind, const Shape& shape, double a, double b, TensorOptions o, Generator* gen,
                     const char* op) {
  Tensor t = alloc(shape, o.dtype, o.device);
  detail::random_kernel(op, kind, t, a, b, gen ? *gen : default_generator());
  return finish(t, o);
}
void check_float_option(const char* op, DType dt) {
  if (!is_floating(dt))
    throw DTypeError(fmt::format("{}: expected a floating dtype, got {}", op, dtype_name(dt)));
}
}  // namespace

bool& detail::deferring_empty() {
  thread_local bool deferring = false;
  return deferring;
}

Tensor empty(const Shape& shape, TensorOptions o) {
  if (detail::deferring_empty()) {
    Layout layout = Layout::contiguous(shape);
    auto storage = std::make_shared<Storage>(o.device, std::size_t(layout.numel()) * dtype_size(o.dtype),
                                             Storage::Unallocated{});
    return finish(Tensor(std::move(storage), std::move(layout), o.dtype), o);
  }
  return finish(alloc(shape, o.dtype, o.device), o);
}

Tensor full(const Shape& shape, double value, TensorOptions o) {
  Tensor t = alloc(shape, o.dtype, o.device);
  if (t.numel() > 0) detail::kernel<FillKernel>("full", t)(arg(t), value);
  return finish(t, o);
}
Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1.0, o); }

Tensor arange(double end, TensorOptions o) { return arange(0, end, 1, o); }
Tensor arange(double start, double end, double step, TensorOptions o) {
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw ValueError(fmt::format("arange: expected finite start, end and step, got {}, {}, {}", start, end, step));
  if (step == 0 || (end - start) / step < 0)
    throw Error(fmt::format("arange: step {} cannot go from {} to {}", step, start, end));
  // Checked: a count past int64 (or past memory) is an error, not a wrapped size.
  const double count = std::ceil((end - start) / step);
  if (!(count < 0x1p62))
    throw ShapeError(fmt::format("arange: {} to {} step {} gives {} elements, more than an int64 can count", start,
                                 end, step, count));
  const auto n = std::int64_t(count);
  // The values are built on the host first: refuse more than its memory
  // rather than asking the allocator (sanitizers abort instead of throwing).
  const double host_bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (double(n) * sizeof(double) > host_bytes)
    throw ShapeError(fmt::format("arange: {} elements ({} to {} step {}) do not fit in memory ({} bytes)", n, start,
                                 end, step, host_bytes));
  std::vector<double> v(std::size_t(std::max<std::int64_t>(n, 0)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + double(i) * step;
  TensorOptions host = o;
  host.device = Device::cpu();
  host.requires_grad = false;
  Tensor t = tensor(v, host).to(o.dtype).to(o.device);
  return finish(t, o);
}

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) { return uniform(shape, 0, 1, o, gen); }
Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) { return normal(shape, 0, 1, o, gen); }
Tensor uniform(const Shape& shape, double low, double high, TensorOptions o, Generator* gen) {
  check_float_option("uniform", o.dtype);
  return random_tensor(RandomKind::uniform, shape, low, high, o, gen, "uniform");
}
Tensor normal(const Shape& shape, double mean, double std, TensorOptions o, Generator* gen) {
  check_float_option("normal", o.dtype);
  if (std < 0) throw Error(fmt::format("normal: expected std >= 0, got {}", std));
  return random_tensor(RandomKind::normal, shape, mean, std, o, gen, "normal");
}
Tensor bernoulli(const Shape& shape, double p, TensorOptions o, Generator* gen) {
  if (!(p >= 0 && p <= 1)) throw Error(fmt::format("bernoulli: expected 0 <= p <= 1, got {}", p));
  return random_tensor(RandomKind::bernoulli, shape, p, 1, o, gen, "bernoulli");
}
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  if (high <= low) throw Error(fmt::format("randint: expected low < high, got [{}, {})", low, high));
  return random_tensor(RandomKind::randint, shape, double(low), double(high), o, gen, "randint");
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor empty_like(const Tensor& t) { return alloc(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}

Tensor rand_like(const Tensor& t, Generator* gen) { return rand(t.shape(), {.dtype = t.dtype(), .device = t.device()}, gen); }
Tensor randn_like(const Tensor& t, Generator* gen) {
  return randn(t.shape(), {.dtype = t.dtype(), .device = t.device()}, gen);
}
Tensor randint_like(const Tensor& t, std::int64_t high, Generator* gen) { return randint_like(t, 0, high, gen); }
Tensor randint_like(const Tensor& t, std::int64_t low, std::int64_t high, Generator* gen) {
  return randint(low, high, t.shape(), {.dtype = t.dtype(), .device = t.device()}, gen);
}

Tensor& Tensor::normal_(double mean, double std, Generator* gen) {
  check_float_option("Tensor.normal_", dtype());
  return copy_(normal(shape(), mean, std, {.dtype = dtype(), .device = device()}, gen));
}
Tensor& Tensor::uniform_(double from, double to, Generator* gen) {
  check_float_option("Tensor.uniform_", dtype());
  if (!(from <= to)) throw ValueError(fmt::format("Tensor.uniform_: expected from <= to, got [{}, {})", from, to));
  return copy_(uniform(shape(), from, to, {.dtype = dtype(), .device = device()}, gen));
}

namespace {
// Values computed on the host in double, then cast and moved (as arange).
Tensor from_host(const std::vector<double>& values, const Shape& shape, const TensorOptions& o) {
  Tensor t = tensor(values, shape, {.dtype = DType::f64}).to(o.dtype).to(o.device);
  return finish(t, o);
}
std::vector<double> spaced(const char* op, double start, double end, std::int64_t steps) {
  if (steps < 0) throw ValueError(fmt::format("{}: expected steps >= 0, got {}", op, steps));
  std::vector<double> v(std::size_t(steps), start);
  const double step = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // From both ends towards the middle, as PyTorch: the last value is `end` exactly.
  if (steps == 1) return v;  // the start alone
  for (std::int64_t i = 0; i < steps; ++i)
    v[std::size_t(i)] = i < steps / 2 ? start + step * double(i) : end - step * double(steps - 1 - i);
  return v;
}
}  // namespace

Tensor linspace(double start, double end, std::int64_t steps, TensorOptions o) {
  return from_host(spaced("linspace", start, end, steps), {steps}, o);
}

Tensor logspace(double start, double end, std::int64_t steps, double base, TensorOptions o) {
  std::vector<double> v = spaced("logspace", start, end, steps);
  for (double& x : v) x = std::pow(base, x);
  return from_host(v, {steps}, o);
}

Tensor eye(std::int64_t n, TensorOptions o) { return eye(n, n, o); }
Tensor eye(std::int64_t n, std::int64_t m, TensorOptions o) {
  if (n < 0 || m < 0) throw ValueError(fmt::format("eye: expected n >= 0 and m >= 0, got n = {}, m = {}", n, m));
  std::vector<double> v(std::size_t(n * m), 0.0);
  for (std::int64_t i = 0; i < std::min(n, m); ++i) v[std::size_t(i * m + i)] = 1.0;
  return from_host(v, {n, m}, o);
}

Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions o) {
  Tensor t = alloc(shape, dtype, o.device);
  std::size_t n = std::size_t(t.numel()) * dtype_size(dtype);
  if (n) t.storage().backend().write(t.storage(), 0, data, n);
  return finish(t, o);
}

Tensor tensor(std::initializer_list<double> values, TensorOptions o) {
  std::vector<double> v(values);
  Tensor t = from_blob(v.data(), {std::int64_t(v.size())}, DType::f64, {.device = o.device});
  return finish(t.to(o.dtype), o);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions o) {
  std::vector<double> v;
  std::size_t cols = rows.size() ? rows.begin()->size() : 0;
  for (auto& r : rows) {
    if (r.size() != cols)
      throw ShapeError(fmt::format("tensor: ragged rows ({} and {} values)", cols, r.size()));
    v.insert(v.end(), r.begin(), r.end());
  }
  Tensor t = from_blob(v.data(), {std::int64_t(rows.size()), std::int64_t(cols)}, DType::f64, {.device = o.device});
  return finish(t.to(o.dtype), o);
}

Tensor scalar_tensor(double value, TensorOptions o) { return full({}, value, o); }

}  // namespace rumus
