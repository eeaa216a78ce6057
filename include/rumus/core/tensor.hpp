#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "rumus/core/device.hpp"
#include "rumus/core/dtype.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/layout.hpp"
#include "rumus/core/saturate_cast.hpp"
#include "rumus/core/storage.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// Identifies a tensor on the autograd tape; unique across all threads.
using GradId = std::uint64_t;
GradId next_grad_id();

class Generator;
class TensorIndex;  // core/tensor_index.hpp

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Layout layout;
  DType dtype = DType::f32;
  GradId id = next_grad_id();
  bool requires_grad = false;
  // Set when an op recorded this tensor as its output: the thread whose tape
  // holds its graph (backward must run there).
  std::thread::id recorded_on{};
};

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// A cheap value handle: copies share the same tensor (as in libtorch).
// The handle, its layout and autograd metadata belong to core; the methods
// that compute (views, copies, in-place updates, reductions) are ops, defined
// by the ops layer next to their free-function twins (src/ops/shape.cpp,
// copy.cpp, inplace.cpp, reduction.cpp). Core itself never includes ops.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A new tensor viewing `storage` through `layout`.
  Tensor(std::shared_ptr<Storage> storage, Layout layout, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().layout.shape; }
  const Shape& sizes() const { return shape(); }  // libtorch's name for the shape
  const Shape& strides() const { return impl().layout.strides; }
  std::int64_t offset() const { return impl().layout.offset; }
  const Layout& layout() const { return impl().layout; }
  std::int64_t dim() const { return impl().layout.dim(); }
  std::int64_t numel() const { return impl().layout.numel(); }
  std::int64_t size(std::int64_t dim) const;
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  Storage& storage() const { return *impl().storage; }
  const std::shared_ptr<Storage>& storage_ptr() const { return impl().storage; }
  bool is_contiguous() const { return impl().layout.is_contiguous(); }
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // Autograd.
  GradId grad_id() const { return impl().id; }
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  Tensor detach() const;  // same storage, off the tape

  // Element access (copies to the host when needed).
  double item() const;
  // Integer T saturates (NaN gives 0): see saturate_cast.hpp.
  template <class T> T item() const { return saturate_cast<T>(item()); }
  template <class T> std::vector<T> to_vector() const;

  // Views: share storage, never copy (reshape copies only when it must).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const std::vector<std::int64_t>& dims) const;
  Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  Tensor select(std::int64_t dim, std::int64_t index) const;
  Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor broadcast_to(const Shape& shape) const { return expand(shape); }
  Tensor squeeze() const;
  Tensor squeeze(std::int64_t dim) const;
  Tensor unsqueeze(std::int64_t dim) const;
  Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;

  // Copies.
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }

  // In place: every one bumps the storage's version counter.
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& zero_();
  Tensor& fill_(double value);
  // Draws in place from the generator (the default one unless given), as
  // PyTorch's x.normal_(mean, std) and x.uniform_(from, to); floating tensors only.
  Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
  Tensor& uniform_(double from = 0.0, double to = 1.0, Generator* gen = nullptr);
  Tensor& copy_(const Tensor& src);
  // PyTorch's in-place forms of the pointwise ops: the out-of-place op's
  // result written into this tensor, which keeps its shape (other operands
  // broadcast to it) and dtype (a floating result into an integer tensor is
  // refused, as in PyTorch). Not recorded: on a tensor that requires grad
  // they need NoGradGuard, as add_ and mul_ do.
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  Tensor& pow_(double exponent);
  Tensor& pow_(const Tensor& exponent);
  Tensor& clamp_(double min, double max);
  Tensor& clamp_min_(double min);
  Tensor& clamp_max_(double max);
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& lerp_(const Tensor& end, double weight);
  Tensor& lerp_(const Tensor& end, const Tensor& weight);
  Tensor& neg_();
  Tensor& abs_();
  Tensor& exp_();
  Tensor& log_();
  Tensor& sqrt_();
  Tensor& rsqrt_();
  Tensor& reciprocal_();
  Tensor& floor_();
  Tensor& ceil_();
  Tensor& round_();
  Tensor& trunc_();
  Tensor& relu_();
  Tensor& sigmoid_();
  Tensor& tanh_();

  Tensor masked_fill(const Tensor& mask, double value) const;

  // libtorch's indexing (core/tensor_index.hpp): x.index({Slice(1, None), 0, None, Ellipsis, idx}),
  // and writing through it: x.index_put_({mask}, 0.0).
  Tensor index(const std::vector<TensorIndex>& indices) const;
  Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value);
  Tensor& index_put_(const std::vector<TensorIndex>& indices, double value);

  // Calls through to the free functions of ops/ (same names and meaning).
  Tensor sum() const;
  Tensor sum(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> max(std::int64_t dim, bool keepdim = false) const;  // (values, indices)
  std::tuple<Tensor, Tensor> min(std::int64_t dim, bool keepdim = false) const;
  Tensor amax(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor amin(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(std::int64_t dim, bool keepdim = false) const;
  Tensor argmin(std::int64_t dim, bool keepdim = false) const;
  Tensor var(const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor std(const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false) const;
  Tensor norm(double p = 2, const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<std::int64_t>& dims, bool keepdim = false) const;
  Tensor prod() const;
  Tensor prod(std::int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(std::int64_t dim, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(std::int64_t dim, bool keepdim = false) const;
  Tensor nansum(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor nanmean(const std::vector<std::int64_t>& dims = {}, bool keepdim = false) const;
  Tensor softmax(std::int64_t dim) const;
  Tensor log_softmax(std::int64_t dim) const;

  Tensor eq(const Tensor& other) const;
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;
  Tensor logical_and(const Tensor& other) const;
  Tensor logical_or(const Tensor& other) const;
  Tensor logical_xor(const Tensor& other) const;
  Tensor logical_not() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;

  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor square() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor erf() const;
  Tensor erfc() const;
  Tensor erfinv() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor exp2() const;
  Tensor sign() const;
  Tensor reciprocal() const;
  Tensor rsqrt() const;
  Tensor logit(std::optional<double> eps = std::nullopt) const;
  Tensor frac() const;
  Tensor atan2(const Tensor& other) const;
  Tensor fmod(const Tensor& other) const;
  Tensor fmod(double other) const;
  Tensor remainder(const Tensor& other) const;
  Tensor remainder(double other) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor clamp(const std::optional<Tensor>& min, const std::optional<Tensor>& max) const;
  Tensor hypot(const Tensor& other) const;
  Tensor xlogy(const Tensor& other) const;
  Tensor copysign(const Tensor& other) const;
  Tensor relu() const&;
  Tensor sigmoid() const&;
  Tensor tanh() const&;
  // On a temporary nothing else holds, these write over it (see activation.hpp).
  Tensor relu() &&;
  Tensor sigmoid() &&;
  Tensor tanh() &&;
  Tensor matmul(const Tensor& other) const;
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(const Tensor& other) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;

  // Views of consecutive pieces along `dim` (the last may be shorter), as torch.split/chunk/unbind.
  std::vector<Tensor> split(std::int64_t split_size, std::int64_t dim = 0) const;
  std::vector<Tensor> chunk(std::int64_t chunks, std::int64_t dim = 0) const;
  std::vector<Tensor> unbind(std::int64_t dim = 0) const;

  // Reordering, indexing, sorting and scans (ops/rearrange.hpp, indexing.hpp, sorting.hpp, scan.hpp).
  Tensor flip(const std::vector<std::int64_t>& dims) const;
  Tensor roll(const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims = {}) const;
  Tensor repeat(const std::vector<std::int64_t>& repeats) const;
  Tensor tile(const std::vector<std::int64_t>& reps) const;
  Tensor repeat_interleave(std::int64_t repeats, std::optional<std::int64_t> dim = std::nullopt) const;
  Tensor movedim(std::int64_t source, std::int64_t destination) const;
  Tensor diagonal(std::int64_t offset = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1) const;
  Tensor tril(std::int64_t diagonal = 0) const;
  Tensor triu(std::int64_t diagonal = 0) const;
  Tensor as_strided(const Shape& size, const Shape& stride, std::optional<std::int64_t> storage_offset = std::nullopt) const;
  Tensor index_select(std::int64_t dim, const Tensor& index) const;
  Tensor gather(std::int64_t dim, const Tensor& index) const;
  Tensor scatter(std::int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(std::int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(std::int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor index_add(std::int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0) const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor nonzero() const;
  Tensor take_along_dim(const Tensor& indices, std::optional<std::int64_t> dim = std::nullopt) const;
  std::tuple<Tensor, Tensor> sort(std::int64_t dim = -1, bool descending = false) const;
  Tensor argsort(std::int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(std::int64_t k, std::int64_t dim = -1, bool largest = true, bool sorted = true) const;
  std::tuple<Tensor, Tensor> kthvalue(std::int64_t k, std::int64_t dim = -1, bool keepdim = false) const;
  Tensor cumsum(std::int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor cumprod(std::int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  std::tuple<Tensor, Tensor> cummax(std::int64_t dim) const;
  std::tuple<Tensor, Tensor> cummin(std::int64_t dim) const;
  std::tuple<Tensor, Tensor> median(std::int64_t dim, bool keepdim = false) const;
  Tensor median() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace rumus

RUMUS_API_END
