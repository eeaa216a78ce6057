#pragma once
#include <cstdint>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::data {

// A batch of inputs and targets; `for (auto& [x, y] : loader)` binds them.
struct Batch {
  Tensor x, y;
};

// Random access to examples, a batch at a time (one copy per batch, not one
// tensor per example). get_batch is const and may run on loader worker threads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  // Examples `indices`, stacked along a new first dim.
  virtual Batch get_batch(const std::vector<std::int64_t>& indices) const = 0;
  Batch get(std::int64_t index) const { return get_batch({index}); }
};

// Rows of two host tensors with the same first dim.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  std::int64_t size() const override { return x_.size(0); }
  Batch get_batch(const std::vector<std::int64_t>& indices) const override;
  const Tensor& inputs() const { return x_; }
  const Tensor& targets() const { return y_; }

 private:
  Tensor x_, y_;
};

// Copies rows `indices` of a contiguous host tensor into a new tensor; names `op` in errors.
Tensor gather_rows(const Tensor& source, const std::vector<std::int64_t>& indices, const char* op);

}  // namespace rumus::data

RUMUS_API_END
