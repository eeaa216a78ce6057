#pragma once
// libtorch's tensor indexing: x.index({Slice(1, None), 0, None, Ellipsis, idx})
// and x.index_put_({...}, value), with the names of torch::indexing. An index
// is an integer (select), a Slice (start, stop, step; None for the default),
// None (a new dim of size 1), Ellipsis (as many full dims as needed, also
// written "..."), true/false (a new dim of size 1 or 0), or a tensor: integer
// indices, or a bool (or u8) mask over as many dims as it has. Integers, slices, None
// and Ellipsis give views; tensors gather as PyTorch's advanced indexing.
#include <cstdint>
#include <optional>
#include <string_view>

#include "rumus/core/export.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus {
namespace indexing {

// None is std::nullopt, as libtorch's is c10::nullopt: Slice(None, 3), x.index({None}).
inline constexpr std::nullopt_t None = std::nullopt;

struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis;

struct Slice {
  Slice(std::optional<std::int64_t> start = std::nullopt, std::optional<std::int64_t> stop = std::nullopt,
        std::optional<std::int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<std::int64_t> start, stop, step;
};

}  // namespace indexing

class TensorIndex {
 public:
  enum class Kind { integer, slice, none, ellipsis, boolean, tensor };
  TensorIndex(std::int64_t i) : kind_(Kind::integer), integer_(i) {}
  TensorIndex(int i) : kind_(Kind::integer), integer_(i) {}
  TensorIndex(bool b) : kind_(Kind::boolean), boolean_(b) {}
  TensorIndex(std::nullopt_t) : kind_(Kind::none) {}
  TensorIndex(indexing::EllipsisIndexType) : kind_(Kind::ellipsis) {}
  TensorIndex(const char* text);  // "..." only
  TensorIndex(indexing::Slice s) : kind_(Kind::slice), slice_(s) {}
  TensorIndex(Tensor t) : kind_(Kind::tensor), tensor_(std::move(t)) {}

  Kind kind() const { return kind_; }
  std::int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const indexing::Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  std::int64_t integer_ = 0;
  bool boolean_ = false;
  indexing::Slice slice_;
  Tensor tensor_;
};

}  // namespace rumus

RUMUS_API_END
