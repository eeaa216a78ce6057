#pragma once
// Variable-length batches for the recurrent layers, with the names of
// torch::nn::utils::rnn: pad_sequence, pack_padded_sequence, pack_sequence,
// pad_packed_sequence. rumus keeps a PackedSequence as the padded batch and
// its lengths, where PyTorch interleaves the valid time steps (its data()):
// an RNN, LSTM or GRU given one runs each sequence only over its own length
// (each direction's state stops at the sequence's end, or starts there when
// reversed) and gives zeros past it, as PyTorch's packed path does.
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "rumus/core/export.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus::nn::utils::rnn {

class PackedSequence {
 public:
  // padded: (L, N, *) or (N, L, *) with batch_first, L the longest length;
  // lengths: i64 [N] on the CPU, each in [1, L].
  PackedSequence(Tensor padded, Tensor lengths, bool batch_first);
  const Tensor& padded() const { return padded_; }
  const Tensor& lengths() const { return lengths_; }
  bool batch_first() const { return batch_first_; }
  // (L, N, *) whatever the layout.
  Tensor time_major() const { return batch_first_ ? padded_.transpose(0, 1) : padded_; }

 private:
  Tensor padded_, lengths_;
  bool batch_first_;
};

// Stacks sequences of shapes (L_i, *) into (L, N, *) (or (N, L, *)),
// L = max L_i, filling with padding_value. Differentiable in every sequence.
Tensor pad_sequence(const std::vector<Tensor>& sequences, bool batch_first = false, double padding_value = 0.0);

// A padded batch and each sequence's length (any integer tensor; read on the
// host). enforce_sorted: the lengths must be non-increasing, as PyTorch
// requires; false accepts any order (the batch keeps its order either way).
PackedSequence pack_padded_sequence(const Tensor& input, const Tensor& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

// pad_sequence, then pack_padded_sequence with the sequences' lengths.
PackedSequence pack_sequence(const std::vector<Tensor>& sequences, bool enforce_sorted = true);

// The padded batch ((L, N, *) or (N, L, *)) with padding_value past each
// length, and the lengths (i64 [N]). total_length pads the time dim to that
// length (at least the longest sequence's), as PyTorch's.
std::tuple<Tensor, Tensor> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                               double padding_value = 0.0,
                                               std::optional<std::int64_t> total_length = std::nullopt);

}  // namespace rumus::nn::utils::rnn

RUMUS_API_END
