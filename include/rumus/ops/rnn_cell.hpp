#pragma once
// Recurrent cells as functions, libtorch's torch::lstm_cell and the fused
// gate step under it. nn::LSTM and nn::LSTMCell run on them.
#include <tuple>
#include <vector>

#include "rumus/core/tensor.hpp"

namespace rumus {

// One LSTM step from its gate projections, as PyTorch's fused LSTM cell:
// input_gates = x W_ih^T + b_ih and hidden_gates = h W_hh^T + b_hh, both
// [batch, 4 * hidden] with the gates in the order (i, f, g, o), and the cell
// state cx [batch, hidden]. Returns (h', c'):
//   c' = sigmoid(f) cx + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c').
// One kernel forward and one backward on f32 and f64 (other dtypes compose
// the same formula with ops); differentiable to any order.
std::tuple<Tensor, Tensor> lstm_cell_gates(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& cx);

// libtorch's torch::lstm_cell: one LSTM step of input [batch, in] with the
// state hx = {h, c} ([batch, hidden] each) and PyTorch's LSTMCell weights
// (w_ih [4 * hidden, in], w_hh [4 * hidden, hidden], optional biases [4 * hidden]).
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& input, const std::vector<Tensor>& hx, const Tensor& w_ih,
                                     const Tensor& w_hh, const Tensor& b_ih = {}, const Tensor& b_hh = {});

}  // namespace rumus
