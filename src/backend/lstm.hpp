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

// One layer over a sequence. x and out (and their gradients) are dense, time
// major [steps, batch, C] or, with batch_first, [batch, steps, C]; out holds
// both directions' h side by side (forward first), C = directions * proj.
// The states are dense [directions, batch, proj] (h) and [directions, batch,
// hidden] (c). Weights are PyTorch's, one per direction, dense: w_ih [4 hidden,
// input], w_hh [4 hidden, proj], w_hr [proj, hidden] (projection only), and
// the biases [4 hidden], gates in PyTorch's order (i, f, g, o).
struct LstmSequenceGeometry {
  std::int64_t steps = 0, batch = 0, input = 0, hidden = 0;
  std::int64_t proj = 0;  // h's size: hidden, or the projection's size
  std::int64_t directions = 1;
  bool projection = false, bias = true, batch_first = false;
  bool training = true;  // keep the workspace that the backward reads
};

struct LstmSequenceWeights {
  std::array<TensorArg, 2> w_ih, w_hh, w_hr, b_ih, b_hh;  // per direction; a null storage is absent
};

// out, h_n, c_n are overwritten; h0 or c0 with a null storage start at zero.
// `workspace` (u8, its size from LstmSequenceWorkspaceKernel) is written in
// training and read by the backward.
struct LstmSequenceForwardArgs {
  TensorArg x, h0, c0;
  LstmSequenceWeights weights;
  TensorArg out, h_n, c_n, workspace;
};

// From the forward's operands and results and the gradients of out, h_n and
// c_n: overwrites d_x, d_h0, d_c0 and the weights' gradients (each bias
// gradient goes to both biases). A gradient with a null storage is not wanted.
struct LstmSequenceBackwardArgs {
  TensorArg x, h0, c0;
  LstmSequenceWeights weights;
  TensorArg out, h_n, c_n, workspace;
  TensorArg d_out, d_h_n, d_c_n;
  TensorArg d_x, d_h0, d_c0;
  LstmSequenceWeights d_weights;
};

// The workspace a training forward needs, in bytes; -1 where the device
// cannot run this geometry (the op then composes the layer).
struct LstmSequenceWorkspaceKernel {
  static constexpr std::string_view name = "lstm_sequence_workspace";
  using Fn = void(Backend&, const LstmSequenceGeometry& g, std::int64_t& bytes);
};

struct LstmSequenceForwardKernel {
  static constexpr std::string_view name = "lstm_sequence_forward";
  using Fn = void(Backend&, const LstmSequenceGeometry& g, const LstmSequenceForwardArgs& a);
};

struct LstmSequenceBackwardKernel {
  static constexpr std::string_view name = "lstm_sequence_backward";
  using Fn = void(Backend&, const LstmSequenceGeometry& g, const LstmSequenceBackwardArgs& a);
};

}  // namespace rumus
