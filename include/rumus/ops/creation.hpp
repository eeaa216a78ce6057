#pragma once
#include <initializer_list>
#include <vector>

#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor arange(double end, TensorOptions options = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
// With a dtype alone, as torch::arange(0, 3, torch::kLong).
inline Tensor arange(double end, DType dtype) { return arange(0.0, end, 1.0, {.dtype = dtype}); }
inline Tensor arange(double start, double end, DType dtype) { return arange(start, end, 1.0, {.dtype = dtype}); }
inline Tensor arange(double start, double end, double step, DType dtype) {
  return arange(start, end, step, {.dtype = dtype});
}
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);  // N(0, 1)
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, TensorOptions options = {.dtype = DType::i64},
               Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions options = {}, Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double std, TensorOptions options = {}, Generator* gen = nullptr);
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {}, Generator* gen = nullptr);

Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// Random tensors of t's shape, dtype and device.
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
Tensor randint_like(const Tensor& t, std::int64_t high, Generator* gen = nullptr);
Tensor randint_like(const Tensor& t, std::int64_t low, std::int64_t high, Generator* gen = nullptr);

// `steps` values from start to end inclusive, evenly spaced (torch.linspace).
Tensor linspace(double start, double end, std::int64_t steps, TensorOptions options = {});
// base^linspace(start, end, steps) (torch.logspace).
Tensor logspace(double start, double end, std::int64_t steps, double base = 10.0, TensorOptions options = {});
// The n x m identity (m = n when omitted; torch.eye).
Tensor eye(std::int64_t n, TensorOptions options = {});
Tensor eye(std::int64_t n, std::int64_t m, TensorOptions options = {});
// A random permutation of 0..n-1 (torch.randperm). Drawn as the argsort of
// Philox keys on the host, so a seed gives the same order on every device.
Tensor randperm(std::int64_t n, TensorOptions options = {.dtype = DType::i64}, Generator* gen = nullptr);
// num_samples category indices per row of `probs` ([k] or [rows, k]
// non-negative weights, not necessarily normalised), with or without
// replacement (torch.multinomial); i64 on probs' device.
Tensor multinomial(const Tensor& probs, std::int64_t num_samples, bool replacement = false, Generator* gen = nullptr);

// Copies numel(shape) elements of type `dtype` from host memory (options.dtype is ignored).
Tensor from_blob(const void* data, const Shape& shape, DType dtype, TensorOptions options = {});

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions options = {}) {
  options.dtype = dtype_of<T>();
  if (numel_of(shape) != static_cast<std::int64_t>(values.size()))
    throw ShapeError("tensor: " + std::to_string(values.size()) + " values do not fill shape " + shape_str(shape));
  return from_blob(values.data(), shape, options.dtype, options);
}
template <class T>
Tensor tensor(const std::vector<T>& values, TensorOptions options = {}) {
  return tensor(values, Shape{static_cast<std::int64_t>(values.size())}, options);
}
// Floating-point literals become f32 unless options say otherwise.
Tensor tensor(std::initializer_list<double> values, TensorOptions options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});

}  // namespace rumus

RUMUS_API_END
