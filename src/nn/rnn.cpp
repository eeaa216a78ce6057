#include "rumus/nn/rnn.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "rumus/nn/init.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/compare.hpp"
#include "rumus/ops/conv.hpp"
#include "rumus/ops/creation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/rnn.hpp"
#include "rumus/ops/rnn_cell.hpp"

namespace rumus::nn {

namespace {

std::int64_t gate_count(RNNBase::Mode mode) {
  return mode == RNNBase::Mode::lstm ? 4 : mode == RNNBase::Mode::gru ? 3 : 1;
}

void check_size(const char* module, const char* what, std::int64_t v) {
  if (v <= 0) throw ValueError(fmt::format("{}: expected {} > 0, got {}", module, what, v));
}

// PyTorch's initialisation of every recurrent weight and bias: U(-1/sqrt(H), 1/sqrt(H)).
void init_uniform(std::vector<Tensor*> params, std::int64_t hidden) {
  const double bound = 1.0 / std::sqrt(double(hidden));
  for (Tensor* p : params)
    if (p->defined()) init::uniform_(*p, -bound, bound);
}

// The zeros a missing state starts from.
Tensor zero_state(const Tensor& like, std::int64_t batch, std::int64_t size) {
  return zeros({batch, size}, {.dtype = like.dtype(), .device = like.device()});
}

// One time step of one layer and direction. xp: this step's input projection
// (W_ih x + b_ih), h and c the states; returns h' and c' (c' undefined unless LSTM).
std::pair<Tensor, Tensor> step(RNNBase::Mode mode, const Tensor& xp, const Tensor& h, const Tensor& c,
                               const Tensor& w_hh, const Tensor& b_hh, const Tensor& w_hr) {
  const Tensor gh = linear(h, w_hh, b_hh);
  switch (mode) {
    case RNNBase::Mode::rnn_tanh: return {tanh(add(xp, gh)), Tensor()};
    case RNNBase::Mode::rnn_relu: return {relu(add(xp, gh)), Tensor()};
    case RNNBase::Mode::lstm: {
      auto [h_next, c_next] = lstm_cell_gates(xp, gh, c);  // the gates in one kernel each way
      if (w_hr.defined()) h_next = linear(h_next, w_hr, Tensor());
      return {h_next, c_next};
    }
    case RNNBase::Mode::gru: {
      const std::vector<Tensor> x = chunk(xp, 3, 1), hh = chunk(gh, 3, 1);  // r, z, n
      Tensor r = sigmoid(add(x[0], hh[0])), z = sigmoid(add(x[1], hh[1]));
      Tensor n = tanh(add(x[2], mul(r, hh[2])));
      return {add(n, mul(z, sub(h, n))), Tensor()};  // (1 - z) n + z h
    }
  }
  return {};
}

}  // namespace

RNNBase::RNNBase(Mode mode, RNNOptions o) : mode_(mode), options_(std::move(o)) {
  const char* name = mode == Mode::lstm ? "LSTM" : mode == Mode::gru ? "GRU" : "RNN";
  check_size(name, "input_size", options_.input_size);
  check_size(name, "hidden_size", options_.hidden_size);
  check_size(name, "num_layers", options_.num_layers);
  if (!(options_.dropout >= 0 && options_.dropout <= 1))
    throw ValueError(fmt::format("{}: expected dropout in [0, 1], got {}", name, options_.dropout));
  if (options_.proj_size < 0 || (options_.proj_size > 0 && mode != Mode::lstm))
    throw ValueError(fmt::format("{}: proj_size is for LSTM only, and >= 0; got {}", name, options_.proj_size));
  if (options_.proj_size >= options_.hidden_size)
    throw ValueError(fmt::format("{}: expected proj_size < hidden_size ({}), got {}", name, options_.hidden_size,
                                 options_.proj_size));
  const std::int64_t h = options_.hidden_size, g = gate_count(mode);
  const std::int64_t out = options_.proj_size > 0 ? options_.proj_size : h;
  const std::int64_t dirs = options_.bidirectional ? 2 : 1;
  for (std::int64_t layer = 0; layer < options_.num_layers; ++layer)
    for (std::int64_t dir = 0; dir < dirs; ++dir) {
      const std::string suffix = fmt::format("_l{}{}", layer, dir == 1 ? "_reverse" : "");
      const std::int64_t in = layer == 0 ? options_.input_size : out * dirs;
      Weights w;
      w.w_ih = register_parameter("weight_ih" + suffix, empty({g * h, in}));
      w.w_hh = register_parameter("weight_hh" + suffix, empty({g * h, out}));
      if (options_.bias) {
        w.b_ih = register_parameter("bias_ih" + suffix, empty({g * h}));
        w.b_hh = register_parameter("bias_hh" + suffix, empty({g * h}));
      }
      if (options_.proj_size > 0) w.w_hr = register_parameter("weight_hr" + suffix, empty({out, h}));
      init_uniform({&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh, &w.w_hr}, h);
      weights_.push_back(std::move(w));
    }
}

std::string RNNBase::extra_repr() const {
  std::string s = fmt::format("{}, {}", options_.input_size, options_.hidden_size);
  if (options_.proj_size > 0) s += fmt::format(", proj_size={}", options_.proj_size);
  if (options_.num_layers != 1) s += fmt::format(", num_layers={}", options_.num_layers);
  if (mode_ == Mode::rnn_relu) s += ", nonlinearity='relu'";
  if (!options_.bias) s += ", bias=False";
  if (options_.batch_first) s += ", batch_first=True";
  if (options_.dropout != 0) s += fmt::format(", dropout={}", options_.dropout);
  if (options_.bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor RNNBase::forward(const Tensor& input) { return std::get<0>(run(input, Tensor(), Tensor(), false)); }

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in,
                                                bool states) {
  return run_steps(input, h0_in, c0_in, states, false, Tensor());
}

std::tuple<utils::rnn::PackedSequence, Tensor, Tensor> RNNBase::run(const utils::rnn::PackedSequence& input,
                                                                    const Tensor& h0, const Tensor& c0) {
  if (input.time_major().dim() != 3)
    throw ShapeError(fmt::format("{}: expected a packed batch of 3 dims, got {}", type_name(), shape_str(input.padded().shape())));
  auto [out, hn, cn] = run_steps(input.time_major(), h0, c0, true, true, input.lengths());
  return {utils::rnn::PackedSequence(out, input.lengths(), false), hn, cn};
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run_steps(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in,
                                                      bool states, bool time_major, const Tensor& lengths) {
  const std::string name = type_name();
  if (!input.defined() || (input.dim() != 2 && input.dim() != 3))
    throw ShapeError(fmt::format("{}: expected input of 3 dims ({}) or 2 (unbatched), got {}", name,
                                 options_.batch_first ? "N, L, H_in" : "L, N, H_in",
                                 input.defined() ? shape_str(input.shape()) : "an undefined tensor"));
  if (!is_floating(input.dtype()))
    throw DTypeError(fmt::format("{}: expected a floating input, got {}", name, dtype_name(input.dtype())));
  if (input.shape().back() != options_.input_size)
    throw ShapeError(fmt::format("{}: expected input_size {} in the last dim, got input {}", name, options_.input_size,
                                 shape_str(input.shape())));
  const bool unbatched = input.dim() == 2;
  Tensor x = unbatched ? input.unsqueeze(1) : options_.batch_first && !time_major ? input.transpose(0, 1) : input;  // (L, N, H_in)
  const std::int64_t steps = x.size(0), batch = x.size(1);
  const std::int64_t dirs = options_.bidirectional ? 2 : 1, layers = options_.num_layers;
  const std::int64_t h_size = options_.proj_size > 0 ? options_.proj_size : options_.hidden_size;
  auto state = [&](const Tensor& s, std::int64_t size, const char* what) {
    if (!s.defined()) return Tensor();
    const Shape want = unbatched ? Shape{layers * dirs, size} : Shape{layers * dirs, batch, size};
    if (s.shape() != want)
      throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", name, what, shape_str(want),
                                   shape_str(s.shape())));
    return unbatched ? s.unsqueeze(1) : s;
  };
  const Tensor h0 = state(h0_in, h_size, "h0"), c0 = state(c0_in, options_.hidden_size, "c0");
  // Variable lengths: valid[t] (N, 1) is set where step t is inside the sequence; elsewhere the
  // state is carried over unchanged and the output is zero.
  Tensor valid;
  if (lengths.defined())
    valid = lt(arange(double(steps), {.dtype = DType::i64}).reshape({steps, 1}), lengths.reshape({1, batch}))
                .reshape({steps, batch, 1})
                .to(x.device());

  // An LSTM over padded input is torch::lstm, which runs each layer in one call on a device
  // with sequence kernels (oneDNN on the CPU); packed batches step here, masking each step.
  if (mode_ == Mode::lstm && !valid.defined()) {
    std::vector<Tensor> params;
    for (const Weights& w : weights_)
      for (const Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh, &w.w_hr})
        if (t->defined()) params.push_back(*t);
    auto [y, hn, cn] = rumus::lstm(x, h0.defined() || c0.defined() ? std::vector<Tensor>{h0, c0} : std::vector<Tensor>{},
                            params, options_.bias, layers, options_.dropout, is_training(), options_.bidirectional,
                            false);
    Tensor out = unbatched ? y.squeeze(1) : options_.batch_first && !time_major ? y.transpose(0, 1) : y;
    if (!states) return {out, Tensor(), Tensor()};
    if (unbatched) return {out, hn.squeeze(1), cn.squeeze(1)};
    return {out, hn, cn};
  }

  std::vector<Tensor> h_n, c_n;
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    std::vector<Tensor> directions;
    for (std::int64_t dir = 0; dir < dirs; ++dir) {
      const Weights& w = weights_[std::size_t(layer * dirs + dir)];
      const std::int64_t k = layer * dirs + dir;
      const Tensor xp = linear(x, w.w_ih, w.b_ih);  // every time step's input projection: one GEMM
      Tensor h = h0.defined() ? h0.select(0, k) : zero_state(x, batch, h_size);
      Tensor c;
      if (mode_ == Mode::lstm) c = c0.defined() ? c0.select(0, k) : zero_state(x, batch, options_.hidden_size);
      std::vector<Tensor> outputs(static_cast<std::size_t>(steps));
      for (std::int64_t s = 0; s < steps; ++s) {
        const std::int64_t t = dir == 0 ? s : steps - 1 - s;
        auto [h_next, c_next] = step(mode_, xp.select(0, t), h, c, w.w_hh, w.b_hh, w.w_hr);
        if (valid.defined()) {
          const Tensor v = valid.select(0, t);
          outputs[std::size_t(t)] = where(v, h_next, 0.0);
          h = where(v, h_next, h);
          if (c.defined()) c = where(v, c_next, c);
        } else {
          h = h_next;
          c = c_next;
          outputs[std::size_t(t)] = h;
        }
      }
      directions.push_back(steps > 0 ? stack(outputs, 0) : zeros({0, batch, h_size}, {.dtype = x.dtype(), .device = x.device()}));
      h_n.push_back(h);
      if (c.defined()) c_n.push_back(c);
    }
    x = dirs == 2 ? cat(directions, 2) : directions[0];
    if (options_.dropout > 0 && is_training() && layer + 1 < layers) x = dropout(x, options_.dropout, true);
  }
  Tensor out = unbatched ? x.squeeze(1) : options_.batch_first && !time_major ? x.transpose(0, 1) : x;
  if (!states) return {out, Tensor(), Tensor()};
  Tensor hn = stack(h_n, 0), cn = c_n.empty() ? Tensor() : stack(c_n, 0);
  if (unbatched) {
    hn = hn.squeeze(1);
    if (cn.defined()) cn = cn.squeeze(1);
  }
  return {out, hn, cn};
}

RNN::RNN(RNNOptions o)
    : RNNBase(o.nonlinearity == "relu" ? Mode::rnn_relu : Mode::rnn_tanh, [&] {
        if (o.nonlinearity != "tanh" && o.nonlinearity != "relu")
          throw ValueError(fmt::format("RNN: expected nonlinearity \"tanh\" or \"relu\", got \"{}\"", o.nonlinearity));
        return o;
      }()) {}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

std::tuple<utils::rnn::PackedSequence, Tensor> RNN::forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                              const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

LSTM::LSTM(RNNOptions o) : RNNBase(Mode::lstm, std::move(o)) {}

std::tuple<utils::rnn::PackedSequence, std::tuple<Tensor, Tensor>> LSTM::forward_with_packed_input(
    const utils::rnn::PackedSequence& input, const std::tuple<Tensor, Tensor>& hx) {
  auto [out, hn, cn] = run(input, std::get<0>(hx), std::get<1>(hx));
  return {out, {hn, cn}};
}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hx) {
  auto [out, hn, cn] = run(input, std::get<0>(hx), std::get<1>(hx));
  return {out, {hn, cn}};
}

GRU::GRU(RNNOptions o) : RNNBase(Mode::gru, std::move(o)) {}

std::tuple<utils::rnn::PackedSequence, Tensor> GRU::forward_with_packed_input(const utils::rnn::PackedSequence& input,
                                                                              const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0) {
  auto [out, hn, cn] = run(input, h0, Tensor());
  return {out, hn};
}

// ---- cells ----

namespace {
// Registers weight_ih, weight_hh, bias_ih, bias_hh of a cell with `gates` gates.
void make_cell(const char* name, const RNNCellOptions& o, std::int64_t gates, Tensor& w_ih, Tensor& w_hh, Tensor& b_ih,
               Tensor& b_hh, const std::function<Tensor(const std::string&, Tensor)>& reg) {
  check_size(name, "input_size", o.input_size);
  check_size(name, "hidden_size", o.hidden_size);
  w_ih = reg("weight_ih", empty({gates * o.hidden_size, o.input_size}));
  w_hh = reg("weight_hh", empty({gates * o.hidden_size, o.hidden_size}));
  if (o.bias) {
    b_ih = reg("bias_ih", empty({gates * o.hidden_size}));
    b_hh = reg("bias_hh", empty({gates * o.hidden_size}));
  }
  init_uniform({&w_ih, &w_hh, &b_ih, &b_hh}, o.hidden_size);
}

// x (N, H_in) or unbatched (H_in), as (N, H_in); the state likewise, zeros when undefined.
struct CellArgs {
  Tensor x;
  bool unbatched;
};
CellArgs cell_input(const char* name, const Tensor& input, std::int64_t input_size) {
  if (!input.defined() || (input.dim() != 1 && input.dim() != 2) || input.shape().back() != input_size)
    throw ShapeError(fmt::format("{}: expected input (N, {}) or ({}), got {}", name, input_size, input_size,
                                 input.defined() ? shape_str(input.shape()) : "an undefined tensor"));
  return {input.dim() == 1 ? input.unsqueeze(0) : input, input.dim() == 1};
}
Tensor cell_state(const char* name, const Tensor& s, const CellArgs& a, std::int64_t size, const char* what) {
  if (!s.defined()) return zero_state(a.x, a.x.size(0), size);
  const Shape want = a.unbatched ? Shape{size} : Shape{a.x.size(0), size};
  if (s.shape() != want)
    throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", name, what, shape_str(want), shape_str(s.shape())));
  return a.unbatched ? s.unsqueeze(0) : s;
}
Tensor cell_output(const CellArgs& a, const Tensor& t) { return a.unbatched ? t.squeeze(0) : t; }
}  // namespace

RNNCell::RNNCell(RNNCellOptions o) : options(std::move(o)) {
  if (options.nonlinearity != "tanh" && options.nonlinearity != "relu")
    throw ValueError(fmt::format("RNNCell: expected nonlinearity \"tanh\" or \"relu\", got \"{}\"", options.nonlinearity));
  make_cell("RNNCell", options, 1, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](const std::string& n, Tensor t) { return register_parameter(n, std::move(t)); });
}

Tensor RNNCell::forward(const Tensor& input, const Tensor& h) {
  const CellArgs a = cell_input("RNNCell", input, options.input_size);
  const Tensor hs = cell_state("RNNCell", h, a, options.hidden_size, "h");
  const auto mode = options.nonlinearity == "relu" ? RNNBase::Mode::rnn_relu : RNNBase::Mode::rnn_tanh;
  return cell_output(a, step(mode, linear(a.x, weight_ih, bias_ih), hs, Tensor(), weight_hh, bias_hh, Tensor()).first);
}

LSTMCell::LSTMCell(RNNCellOptions o) : options(std::move(o)) {
  make_cell("LSTMCell", options, 4, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](const std::string& n, Tensor t) { return register_parameter(n, std::move(t)); });
}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const std::tuple<Tensor, Tensor>& hc) {
  const CellArgs a = cell_input("LSTMCell", input, options.input_size);
  const Tensor h = cell_state("LSTMCell", std::get<0>(hc), a, options.hidden_size, "h");
  const Tensor c = cell_state("LSTMCell", std::get<1>(hc), a, options.hidden_size, "c");
  auto [h2, c2] = step(RNNBase::Mode::lstm, linear(a.x, weight_ih, bias_ih), h, c, weight_hh, bias_hh, Tensor());
  return {cell_output(a, h2), cell_output(a, c2)};
}

GRUCell::GRUCell(RNNCellOptions o) : options(std::move(o)) {
  make_cell("GRUCell", options, 3, weight_ih, weight_hh, bias_ih, bias_hh,
            [this](const std::string& n, Tensor t) { return register_parameter(n, std::move(t)); });
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& h) {
  const CellArgs a = cell_input("GRUCell", input, options.input_size);
  const Tensor hs = cell_state("GRUCell", h, a, options.hidden_size, "h");
  return cell_output(a, step(RNNBase::Mode::gru, linear(a.x, weight_ih, bias_ih), hs, Tensor(), weight_hh, bias_hh,
                             Tensor()).first);
}

}  // namespace rumus::nn
