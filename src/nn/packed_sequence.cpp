#include "rumus/nn/packed_sequence.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "rumus/ops/compare.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/join.hpp"

namespace rumus::nn::utils::rnn {

namespace {
// The lengths as i64 on the CPU, each checked against the batch and time sizes.
Tensor checked_lengths(const char* op, const Tensor& lengths, std::int64_t batch, std::int64_t steps) {
  if (!lengths.defined() || lengths.dim() != 1 || is_floating(lengths.dtype()))
    throw ShapeError(fmt::format("{}: expected lengths to be a 1-D integer tensor, got {}", op,
                                 lengths.defined() ? std::string(dtype_name(lengths.dtype())) + " " + shape_str(lengths.shape())
                                                   : "an undefined tensor"));
  if (lengths.size(0) != batch)
    throw ShapeError(fmt::format("{}: expected {} lengths, one per sequence of the batch, got {}", op, batch, lengths.size(0)));
  Tensor l = lengths.to(Device::cpu()).to(DType::i64).contiguous();
  for (std::int64_t v : l.to_vector<std::int64_t>())
    if (v < 1 || v > steps)
      throw ValueError(fmt::format("{}: expected every length in [1, {}] (the time steps of the input), got {}", op, steps, v));
  return l;
}
}  // namespace

PackedSequence::PackedSequence(Tensor padded, Tensor lengths, bool batch_first)
    : padded_(std::move(padded)), batch_first_(batch_first) {
  if (!padded_.defined() || padded_.dim() < 2)
    throw ShapeError(fmt::format("PackedSequence: expected a padded batch of at least 2 dims, got {}",
                                 padded_.defined() ? shape_str(padded_.shape()) : "an undefined tensor"));
  lengths_ = checked_lengths("PackedSequence", lengths, padded_.size(batch_first ? 0 : 1), padded_.size(batch_first ? 1 : 0));
}

Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first, double padding_value) {
  if (sequences.empty()) throw ValueError("pad_sequence: expected at least one sequence, got none");
  const Tensor& first = sequences.front();
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    if (!s.defined() || s.dim() < 1)
      throw ShapeError(fmt::format("pad_sequence: sequence {} is {}, expected (L, *)", i,
                                   s.defined() ? "a 0-dim tensor" : "undefined"));
    Shape rest(s.shape().begin() + 1, s.shape().end()), want(first.shape().begin() + 1, first.shape().end());
    if (rest != want || s.dtype() != first.dtype() || s.device() != first.device())
      throw ShapeError(fmt::format("pad_sequence: sequence {} is {} {} on {}, expected (L, {}) {} on {} as sequence 0", i,
                                   dtype_name(s.dtype()), shape_str(s.shape()), s.device().str(),
                                   shape_str(want), dtype_name(first.dtype()), first.device().str()));
    longest = std::max(longest, s.size(0));
  }
  std::vector<Tensor> padded;
  for (const Tensor& s : sequences) {
    if (s.size(0) == longest) {
      padded.push_back(s);
      continue;
    }
    Shape fill = s.shape();
    fill[0] = longest - s.size(0);
    padded.push_back(cat({s, full(fill, padding_value, {.dtype = s.dtype(), .device = s.device()})}, 0));
  }
  return stack(padded, batch_first ? 0 : 1);
}

PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first, bool enforce_sorted) {
  if (!input.defined() || input.dim() < 2)
    throw ShapeError(fmt::format("pack_padded_sequence: expected input ({}) of at least 2 dims, got {}",
                                 batch_first ? "N, L, *" : "L, N, *", input.defined() ? shape_str(input.shape()) : "an undefined tensor"));
  const int time = batch_first ? 1 : 0;
  Tensor l = checked_lengths("pack_padded_sequence", lengths, input.size(batch_first ? 0 : 1), input.size(time));
  const auto v = l.to_vector<std::int64_t>();
  if (enforce_sorted)
    for (std::size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[i - 1])
        throw ValueError(fmt::format("pack_padded_sequence: with enforce_sorted the lengths must be non-increasing, but "
                                     "length {} ({}) is longer than length {} ({}); sort the batch or pass "
                                     "enforce_sorted = false",
                                     i, v[i], i - 1, v[i - 1]));
  const std::int64_t longest = *std::max_element(v.begin(), v.end());
  return PackedSequence(input.narrow(time, 0, longest), l, batch_first);
}

PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted) {
  std::vector<std::int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() > 0 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), tensor(lengths), false, enforce_sorted);
}

std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first, double padding_value,
                                               std::optional<std::int64_t> total_length) {
  Tensor x = sequence.time_major();  // (L, N, *)
  const std::int64_t steps = x.size(0);
  if (total_length && *total_length < steps)
    throw ValueError(fmt::format("pad_packed_sequence: expected total_length to be at least {} (the longest sequence), "
                                 "got {}",
                                 steps, *total_length));
  // Past each length: padding_value (the recurrent layers leave zeros there; a packed input may hold anything).
  Shape mask_shape(std::size_t(x.dim()), 1);
  mask_shape[0] = steps;
  mask_shape[1] = x.size(1);
  const Tensor valid = lt(arange(double(steps), {.dtype = DType::i64}).reshape({steps, 1}),
                          sequence.lengths().reshape({1, x.size(1)}))
                           .reshape(mask_shape)
                           .to(x.device());
  x = where(valid, x, padding_value);
  if (total_length && *total_length > steps) {
    Shape fill = x.shape();
    fill[0] = *total_length - steps;
    x = cat({x, full(fill, padding_value, {.dtype = x.dtype(), .device = x.device()})}, 0);
  }
  return {batch_first ? x.transpose(0, 1) : x, sequence.lengths()};
}

}  // namespace rumus::nn::utils::rnn
