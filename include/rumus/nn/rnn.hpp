#pragma once
// Recurrent layers (torch::nn::RNN, LSTM, GRU) and their cells, with
// PyTorch's options, gate order, initialisation and parameter names
// (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, weight_hr_l0 for an
// LSTM's projection; "_reverse" for the second direction), so a PyTorch state
// dict loads with strict.
//
// An LSTM over a padded batch runs on torch::lstm (rumus/ops/rnn.hpp). On the
// CPU in f32 each layer, both directions at once, is one call to oneDNN's LSTM
// primitive forward and one backward, and one node on the tape (projections,
// batch_first, given or zero states, no bias, dropout between the layers in
// training all included). It composes instead, as the other layers always do,
// in f64 and other dtypes, on Vulkan, inside an autocast scope, for empty
// sequences and for packed batches: the inputs of every time step projected
// in one GEMM, then per step a GEMM and the fused gate kernel
// (lstm_cell_gates). Every path differentiates to any order: under
// create_graph the oneDNN node's backward is the layer's backward through
// time written with ops.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "rumus/core/export.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/nn/packed_sequence.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

struct RNNOptions {
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 1;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
  bool bias = true;
  bool batch_first = false;  // input and output (N, L, H) instead of (L, N, H); states stay (layers * dirs, N, H)
  double dropout = 0.0;      // on the outputs of every layer but the last, in training
  bool bidirectional = false;
  std::int64_t proj_size = 0;  // LSTM only: h projected to this size (0: none)
};

// The common part of RNN, LSTM and GRU: parameters and the time loop.
class RNNBase : public Module {
 public:
  enum class Mode { rnn_tanh, rnn_relu, lstm, gru };
  RNNBase(Mode mode, RNNOptions options);

  // The output only (for Sequential); the states start at zero.
  Tensor forward(const Tensor& input) override;

  const RNNOptions& options() const { return options_; }
  std::string extra_repr() const override;

 protected:
  // input (L, N, H_in) or (N, L, H_in) with batch_first, or unbatched (L, H_in);
  // h0 (and c0 for an LSTM) (layers * dirs, N, H) or unbatched (layers * dirs, H),
  // undefined for zeros. Returns output, h_n, c_n (c_n undefined unless LSTM;
  // both undefined without `states`, so no op records what nobody reads).
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0, const Tensor& c0, bool states = true);
  // The same over a packed batch: each sequence only over its own length;
  // the output (a PackedSequence, time-major) holds zeros past each length.
  std::tuple<utils::rnn::PackedSequence, Tensor, Tensor> run(const utils::rnn::PackedSequence& input, const Tensor& h0,
                                                             const Tensor& c0);

 private:
  struct Weights {
    Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
  };
  // time_major: input is (L, N, H_in) whatever batch_first says; lengths:
  // i64 [N] on the CPU, or undefined when every sequence is L long.
  std::tuple<Tensor, Tensor, Tensor> run_steps(const Tensor& input, const Tensor& h0, const Tensor& c0, bool states,
                                               bool time_major, const Tensor& lengths);
  Mode mode_;
  RNNOptions options_;
  std::vector<Weights> weights_;  // layer-major: l0, l0_reverse, l1, ...
};

// torch::nn::RNN: h' = tanh (or relu)(W_ih x + b_ih + W_hh h + b_hh).
class RNN : public RNNBase {
 public:
  explicit RNN(RNNOptions options);
  RNN(std::int64_t input_size, std::int64_t hidden_size) : RNN(RNNOptions{.input_size = input_size, .hidden_size = hidden_size}) {}
  using RNNBase::forward;
  // (output, h_n), as libtorch's RNN::forward(input, hx).
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0);
  // libtorch's forward_with_packed_input.
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& h0 = {});
  std::string type_name() const override { return "RNN"; }
};

// torch::nn::LSTM: gates i, f, g, o; c' = f c + i g; h' = o tanh(c') (then W_hr h' with proj_size).
class LSTM : public RNNBase {
 public:
  explicit LSTM(RNNOptions options);
  LSTM(std::int64_t input_size, std::int64_t hidden_size) : LSTM(RNNOptions{.input_size = input_size, .hidden_size = hidden_size}) {}
  using RNNBase::forward;
  // (output, (h_n, c_n)), as libtorch's LSTM::forward(input, hx).
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hx);
  std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> forward_with_packed_input(
      const utils::rnn::PackedSequence& input, const std::tuple<Tensor, Tensor>& hx = {});
  std::string type_name() const override { return "LSTM"; }
};

// torch::nn::GRU: gates r, z, n; n = tanh(W_in x + b_in + r (W_hn h + b_hn)); h' = (1 - z) n + z h.
class GRU : public RNNBase {
 public:
  explicit GRU(RNNOptions options);
  GRU(std::int64_t input_size, std::int64_t hidden_size) : GRU(RNNOptions{.input_size = input_size, .hidden_size = hidden_size}) {}
  using RNNBase::forward;
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0);
  std::tuple<utils::rnn::PackedSequence, Tensor> forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                           const Tensor& h0 = {});
  std::string type_name() const override { return "GRU"; }
};

struct RNNCellOptions {
  std::int64_t input_size = 0;
  std::int64_t hidden_size = 0;
  bool bias = true;
  std::string nonlinearity = "tanh";  // RNNCell only
};

// One time step (torch::nn::RNNCell, LSTMCell, GRUCell): weight_ih, weight_hh,
// bias_ih, bias_hh. x (N, H_in) or unbatched (H_in); states (N, H) or (H),
// undefined for zeros.
class RNNCell : public Module {
 public:
  explicit RNNCell(RNNCellOptions options);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& h);
  std::string type_name() const override { return "RNNCell"; }
  RNNCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

class LSTMCell : public Module {
 public:
  explicit LSTMCell(RNNCellOptions options);
  Tensor forward(const Tensor& input) override { return std::get<0>(forward(input, {})); }
  // (h', c')
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hc);
  std::string type_name() const override { return "LSTMCell"; }
  RNNCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

class GRUCell : public Module {
 public:
  explicit GRUCell(RNNCellOptions options);
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  Tensor forward(const Tensor& input, const Tensor& h);
  std::string type_name() const override { return "GRUCell"; }
  RNNCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

}  // namespace rumus::nn

RUMUS_API_END
