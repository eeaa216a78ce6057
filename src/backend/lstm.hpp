#pragma once
// The LSTM-cell family (src/ops/rnn_cell.cpp): one time step's gate math,
// fused. Operands are contiguous: the input and hidden projections xp and hp
// [batch, 4H], whose sum is the pre-activation gates in PyTorch's order
// (i, f, g, o), and the cell states [batch, H].
//   forward:  act = (sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)) of xp + hp,
//             c' = f c + i g, h' = o tanh(c'); writes h', c' and act [batch, 4H]
//             (what backward reads).
//   backward: from dh' and dc' (a dc' whose storage is null is zero), act, c
//             and c': the gradient of the gates [batch, 4H] (xp's and hp's
//             alike) and of c.
#include "kernel_registry.hpp"

namespace rumus {

struct LstmCellForwardKernel {
  static constexpr std::string_view name = "lstm_cell_forward";
  using Fn = void(Backend&, TensorArg h_next, TensorArg c_next, TensorArg act, TensorArg xp, TensorArg hp, TensorArg c);
};

struct LstmCellBackwardKernel {
  static constexpr std::string_view name = "lstm_cell_backward";
  using Fn = void(Backend&, TensorArg d_gates, TensorArg d_c, TensorArg dh_next, TensorArg dc_next, TensorArg act,
                  TensorArg c, TensorArg c_next);
};

}  // namespace rumus
