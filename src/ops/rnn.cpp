// torch::lstm: layer by layer, each on the device's sequence kernels where it
// has them (src/backend/lstm.hpp), else composed of a GEMM per step and the
// fused gate kernel.
//
// A fused layer is one node whose output is one buffer holding out, h_n and
// c_n back to back (the views the caller sees), so one backward call takes
// all three gradients. Its backward under create_graph is the layer again
// and its backward through time written with ops, on the saved inputs with
// their graph, so the node differentiates to any order like the composition.
#include "rumus/ops/rnn.hpp"

#include <optional>

#include "../backend/lstm.hpp"
#include "op_util.hpp"
#include "rumus/autograd/autocast.hpp"
#include "rumus/ops/conv.hpp"  // linear
#include "rumus/ops/creation.hpp"
#include "rumus/ops/dropout.hpp"
#include "rumus/ops/activation.hpp"
#include "rumus/ops/elementwise.hpp"
#include "rumus/ops/join.hpp"
#include "rumus/ops/linalg.hpp"
#include "rumus/ops/reduction.hpp"
#include "rumus/ops/rnn_cell.hpp"

namespace rumus {

using autograd::SavedTensor;
using detail::arg;

namespace {

constexpr const char* kOp = "lstm";

struct Direction {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;
};

struct LayerResult {
  Tensor out, h_n, c_n;  // out time-major (L, N, dirs * proj); the states (dirs, N, proj) and (dirs, N, H)
};

// One layer composed of ops: every step's input projection in one GEMM, then
// per step the hidden projection and the fused gates. x is time-major.
LayerResult composed_layer(const Tensor& x, const Tensor& h0, const Tensor& c0, const std::vector<Direction>& dirs,
                           std::int64_t hidden, std::int64_t proj) {
  const std::int64_t steps = x.size(0), batch = x.size(1);
  std::vector<Tensor> outs, hs, cs;
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    const Direction& w = dirs[d];
    const Tensor xp = linear(x, w.w_ih, w.b_ih);
    Tensor h = h0.defined() ? h0.select(0, std::int64_t(d)) : zeros({batch, proj}, {.dtype = x.dtype(), .device = x.device()});
    Tensor c = c0.defined() ? c0.select(0, std::int64_t(d)) : zeros({batch, hidden}, {.dtype = x.dtype(), .device = x.device()});
    std::vector<Tensor> steps_out(static_cast<std::size_t>(steps));
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t t = d == 0 ? s : steps - 1 - s;
      auto [h_next, c_next] = lstm_cell_gates(xp.select(0, t), linear(h, w.w_hh, w.b_hh), c);
      h = w.w_hr.defined() ? linear(h_next, w.w_hr, Tensor()) : h_next;
      c = c_next;
      steps_out[std::size_t(t)] = h;
    }
    outs.push_back(steps > 0 ? stack(steps_out, 0) : zeros({0, batch, proj}, {.dtype = x.dtype(), .device = x.device()}));
    hs.push_back(h);
    cs.push_back(c);
  }
  return {outs.size() == 2 ? cat(outs, 2) : outs[0], stack(hs, 0), stack(cs, 0)};
}

// The gradients of one layer written with ops, for create_graph: the layer
// again from its inputs (saved with their graph), then back through time.
// d_out is time-major. Returns the gradients of x, h0, c0, then per direction
// w_ih, w_hh, b_ih, b_hh (the same), w_hr; each differentiates again.
std::vector<Tensor> composed_layer_grads(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                         const std::vector<Direction>& dirs, std::int64_t hidden, std::int64_t proj,
                                         const Tensor& d_out, const Tensor& d_h_n, const Tensor& d_c_n) {
  const std::int64_t steps = x.size(0), batch = x.size(1);
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  std::vector<Tensor> grads(3 + 5 * dirs.size()), dh0, dc0;
  for (std::size_t d = 0; d < dirs.size(); ++d) {
    const Direction& w = dirs[d];
    const auto order = [&](std::int64_t s) { return d == 0 ? s : steps - 1 - s; };  // the forward's order
    const Tensor xp = linear(x, w.w_ih, w.b_ih);
    const std::size_t n = std::size_t(steps);
    std::vector<Tensor> h_prev(n), c_prev(n), c_next(n), act(n), m(n);
    Tensor h = h0.defined() ? h0.select(0, std::int64_t(d)) : zeros({batch, proj}, like);
    Tensor c = c0.defined() ? c0.select(0, std::int64_t(d)) : zeros({batch, hidden}, like);
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::size_t t = std::size_t(order(s));
      h_prev[t] = h;
      c_prev[t] = c;
      const std::vector<Tensor> g = chunk(add(xp.select(0, std::int64_t(t)), linear(h, w.w_hh, w.b_hh)), 4, 1);
      act[t] = cat({sigmoid(g[0]), sigmoid(g[1]), tanh(g[2]), sigmoid(g[3])}, 1);
      const std::vector<Tensor> a = chunk(act[t], 4, 1);  // i, f, g, o
      c = add(mul(a[1], c), mul(a[0], a[2]));
      c_next[t] = c;
      m[t] = mul(a[3], tanh(c));
      h = w.w_hr.defined() ? linear(m[t], w.w_hr, Tensor()) : m[t];
    }
    Tensor dh = d_h_n.select(0, std::int64_t(d)), dc = d_c_n.select(0, std::int64_t(d)), dw_hh, dw_hr;
    std::vector<Tensor> d_gates(n);
    for (std::int64_t s = steps - 1; s >= 0; --s) {
      const std::size_t t = std::size_t(order(s));
      const Tensor dh_t = add(dh, d_out.select(0, std::int64_t(t)).slice(1, std::int64_t(d) * proj, std::int64_t(d + 1) * proj));
      Tensor dm = dh_t;
      if (w.w_hr.defined()) {
        const Tensor part = matmul(dh_t.transpose(0, 1), m[t]);
        dw_hr = dw_hr.defined() ? add(dw_hr, part) : part;
        dm = matmul(dh_t, w.w_hr);
      }
      const std::vector<Tensor> a = chunk(act[t], 4, 1);
      const Tensor tc = tanh(c_next[t]);
      // The cell state's gradient: through m = o tanh(c'), and from c' directly.
      const Tensor dcs = add(dc, mul(mul(dm, a[3]), sub(1.0, square(tc))));
      d_gates[t] = cat({mul(mul(dcs, a[2]), mul(a[0], sub(1.0, a[0]))), mul(mul(dcs, c_prev[t]), mul(a[1], sub(1.0, a[1]))),
                        mul(mul(dcs, a[0]), sub(1.0, square(a[2]))), mul(mul(dm, tc), mul(a[3], sub(1.0, a[3])))},
                       1);
      const Tensor part = matmul(d_gates[t].transpose(0, 1), h_prev[t]);
      dw_hh = dw_hh.defined() ? add(dw_hh, part) : part;
      dh = matmul(d_gates[t], w.w_hh);
      dc = mul(dcs, a[1]);
    }
    const Tensor dg = stack(d_gates, 0);  // (L, N, 4H)
    const Tensor dx = matmul(dg, w.w_ih);
    grads[0] = grads[0].defined() ? add(grads[0], dx) : dx;
    const std::size_t k = 3 + 5 * d;
    grads[k] = matmul(dg.reshape({steps * batch, 4 * hidden}).transpose(0, 1), x.reshape({steps * batch, x.size(2)}));
    grads[k + 1] = dw_hh;
    if (w.b_ih.defined()) grads[k + 2] = grads[k + 3] = sum(dg, {0, 1});
    grads[k + 4] = dw_hr;
    dh0.push_back(dh);
    dc0.push_back(dc);
  }
  grads[1] = stack(dh0, 0);
  grads[2] = stack(dc0, 0);
  return grads;
}

TensorArg absent(const Tensor& like) { return {nullptr, like.dtype(), &like.layout()}; }
TensorArg optional(const Tensor& t, const Tensor& like) { return t.defined() ? arg(t) : absent(like); }

// The directions' weights as kernel operands (contiguous, detached).
LstmSequenceWeights weight_args(const std::vector<Direction>& dirs, const Tensor& like) {
  LstmSequenceWeights w;
  for (std::size_t d = 0; d < 2; ++d) {
    const bool has = d < dirs.size();
    w.w_ih[d] = has ? optional(dirs[d].w_ih, like) : absent(like);
    w.w_hh[d] = has ? optional(dirs[d].w_hh, like) : absent(like);
    w.b_ih[d] = has ? optional(dirs[d].b_ih, like) : absent(like);
    w.b_hh[d] = has ? optional(dirs[d].b_hh, like) : absent(like);
    w.w_hr[d] = has ? optional(dirs[d].w_hr, like) : absent(like);
  }
  return w;
}

Tensor dense(const Tensor& t) { return t.defined() ? t.detach().contiguous() : Tensor(); }

// One layer on the sequence kernels, or nothing where the device has none
// for this dtype and geometry.
std::optional<LayerResult> fused_layer(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                       const std::vector<Direction>& dirs, std::int64_t hidden, std::int64_t proj) {
  if (!detail::has_kernels<LstmSequenceWorkspaceKernel, LstmSequenceForwardKernel, LstmSequenceBackwardKernel>(x))
    return std::nullopt;
  const std::int64_t steps = x.size(0), batch = x.size(1), input = x.size(2);
  const std::int64_t n_dirs = std::int64_t(dirs.size());
  if (steps == 0 || batch == 0) return std::nullopt;
  std::vector<Tensor> inputs{x, h0, c0};
  for (const Direction& w : dirs)
    for (const Tensor* t : {&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh, &w.w_hr}) inputs.push_back(*t);
  LstmSequenceGeometry g{.steps = steps, .batch = batch, .input = input, .hidden = hidden, .proj = proj,
                         .directions = n_dirs, .projection = dirs[0].w_hr.defined(), .bias = dirs[0].b_ih.defined(),
                         // A batch-first input (a transposed dense tensor) is read as it lies, and the
                         // output is written batch-first too, so the caller's transpose back is dense.
                         .batch_first = !x.is_contiguous() && x.transpose(0, 1).is_contiguous(),
                         .training = autograd::needs_grad(inputs)};
  std::int64_t workspace_bytes = -1;
  detail::kernel<LstmSequenceWorkspaceKernel>(kOp, x)(g, workspace_bytes);
  if (workspace_bytes < 0) return std::nullopt;

  const Tensor xd = g.batch_first ? x.detach().transpose(0, 1) : dense(x);  // in memory order
  const Tensor h0d = dense(h0), c0d = dense(c0);
  std::vector<Direction> wd;
  for (const Direction& w : dirs) wd.push_back({dense(w.w_ih), dense(w.w_hh), dense(w.b_ih), dense(w.b_hh), dense(w.w_hr)});
  const std::int64_t out_n = steps * batch * n_dirs * proj, hn_n = n_dirs * batch * proj, cn_n = n_dirs * batch * hidden;
  const Shape out_shape = g.batch_first ? Shape{batch, steps, n_dirs * proj} : Shape{steps, batch, n_dirs * proj};
  Tensor all = detail::alloc({out_n + hn_n + cn_n}, x.dtype(), x.device(), kOp);
  auto parts = [=](const Tensor& buf) {
    return std::array<Tensor, 3>{buf.slice(0, 0, out_n).view(out_shape),
                                 buf.slice(0, out_n, out_n + hn_n).view({n_dirs, batch, proj}),
                                 buf.slice(0, out_n + hn_n, out_n + hn_n + cn_n).view({n_dirs, batch, hidden})};
  };
  const auto [out, h_n, c_n] = parts(all);
  const Tensor workspace = g.training ? detail::alloc({workspace_bytes}, DType::u8, x.device(), kOp) : Tensor();
  LstmSequenceForwardArgs fa{arg(xd), optional(h0d, x), optional(c0d, x), weight_args(wd, x),
                             arg(out), arg(h_n), arg(c_n), g.training ? arg(workspace) : absent(x)};
  detail::kernel<LstmSequenceForwardKernel>(kOp, x)(g, fa);

  if (g.training) {
    std::vector<SavedTensor> saved(inputs.begin(), inputs.end());  // with their graph, for create_graph
    std::vector<bool> wanted;
    for (const Tensor& t : inputs) wanted.push_back(t.defined() && t.requires_grad());
    autograd::record(
        kOp, inputs, all,
        [g, xd, h0d, c0d, wd, workspace, saved, wanted, hidden, proj, parts,
         s_all = SavedTensor(all.detach())](const Tensor& grad) -> std::vector<Tensor> {
          std::vector<Tensor> grads(saved.size());
          for (const SavedTensor& s : saved)
            if (s.defined()) (void)s.get();  // an input written in place since the forward is an error
          if (grad_enabled()) {  // under create_graph: back through time in ops, on the inputs with their graph
            std::vector<Tensor> ins;
            for (const SavedTensor& s : saved) ins.push_back(s.defined() ? s.get() : Tensor());
            std::vector<Direction> dirs;
            for (std::size_t k = 3; k + 4 < ins.size(); k += 5)
              dirs.push_back({ins[k], ins[k + 1], ins[k + 2], ins[k + 3], ins[k + 4]});
            const auto [d_out, d_h_n, d_c_n] = parts(grad.contiguous());
            std::vector<Tensor> all_grads = composed_layer_grads(ins[0], ins[1], ins[2], dirs, hidden, proj,
                                                                 g.batch_first ? d_out.transpose(0, 1) : d_out,
                                                                 d_h_n, d_c_n);
            for (std::size_t i = 0; i < grads.size(); ++i)
              if (wanted[i]) grads[i] = all_grads[i];
            return grads;
          }
          const Tensor gd = grad.contiguous();
          const auto [d_out, d_h_n, d_c_n] = parts(gd);
          const auto [out, h_n, c_n] = parts(s_all.get());
          auto fresh = [&](std::size_t i, const Tensor& like) {
            return wanted[i] ? detail::alloc(like.shape(), like.dtype(), like.device(), kOp) : Tensor();
          };
          const Tensor d_x = fresh(0, xd), d_h0 = fresh(1, h0d), d_c0 = fresh(2, c0d);
          std::vector<Direction> dw;
          for (std::size_t d = 0; d < wd.size(); ++d) {
            const std::size_t k = 3 + 5 * d;
            dw.push_back({fresh(k, wd[d].w_ih), fresh(k + 1, wd[d].w_hh), fresh(k + 2, wd[d].b_ih),
                          fresh(k + 3, wd[d].b_hh), fresh(k + 4, wd[d].w_hr)});
          }
          LstmSequenceBackwardArgs ba{arg(xd), optional(h0d, xd), optional(c0d, xd), weight_args(wd, xd),
                                      arg(out), arg(h_n), arg(c_n), arg(workspace),
                                      arg(d_out), arg(d_h_n), arg(d_c_n),
                                      optional(d_x, xd), optional(d_h0, xd), optional(d_c0, xd), weight_args(dw, xd)};
          detail::kernel<LstmSequenceBackwardKernel>(kOp, xd)(g, ba);
          grads[0] = d_x.defined() && g.batch_first ? d_x.transpose(0, 1) : d_x;
          grads[1] = d_h0;
          grads[2] = d_c0;
          for (std::size_t d = 0; d < dw.size(); ++d) {
            const std::size_t k = 3 + 5 * d;
            grads[k] = dw[d].w_ih;
            grads[k + 1] = dw[d].w_hh;
            grads[k + 2] = dw[d].b_ih;
            grads[k + 3] = dw[d].b_hh;
            grads[k + 4] = dw[d].w_hr;
          }
          return grads;
        },
        {}, autograd::Backward::differentiable);
  }
  // The caller's views, taken after recording so that they carry the node's graph.
  const auto [o, hn, cn] = parts(all);
  return LayerResult{g.batch_first ? o.transpose(0, 1) : o, hn, cn};
}

void check_param(const char* what, std::int64_t layer, std::int64_t dir, const Tensor& p, const Shape& shape,
                 const Tensor& input) {
  const std::string name = fmt::format("{}_l{}{}", what, layer, dir == 1 ? "_reverse" : "");
  if (!p.defined()) throw ValueError(fmt::format("{}: expected {} to be defined", kOp, name));
  detail::check_same_device(kOp, input, p);
  if (p.dtype() != input.dtype())
    throw DTypeError(fmt::format("{}: expected {} in {} (the input's dtype), got {}", kOp, name,
                                 dtype_name(input.dtype()), dtype_name(p.dtype())));
  if (p.shape() != shape)
    throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", kOp, name, shape_str(shape),
                                 shape_str(p.shape())));
}

void check_state(const char* what, const Tensor& s, const Shape& shape, const Tensor& input) {
  if (!s.defined()) return;
  detail::check_same_device(kOp, input, s);
  if (s.dtype() != input.dtype())
    throw DTypeError(fmt::format("{}: expected {} in {} (the input's dtype), got {}", kOp, what,
                                 dtype_name(input.dtype()), dtype_name(s.dtype())));
  if (s.shape() != shape)
    throw ShapeError(fmt::format("{}: expected {} of shape {}, got {}", kOp, what, shape_str(shape),
                                 shape_str(s.shape())));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases, std::int64_t num_layers,
                                        double dropout_p, bool train, bool bidirectional, bool batch_first,
                                        Generator* generator) {
  detail::check_floating(kOp, input);
  if (input.dim() != 3)
    throw ShapeError(fmt::format("{}: expected input of 3 dims ({}), got {}", kOp,
                                 batch_first ? "N, L, H_in" : "L, N, H_in", shape_str(input.shape())));
  if (num_layers <= 0) throw ValueError(fmt::format("{}: expected num_layers > 0, got {}", kOp, num_layers));
  if (!(dropout_p >= 0 && dropout_p <= 1))
    throw ValueError(fmt::format("{}: expected dropout in [0, 1], got {}", kOp, dropout_p));
  if (!hx.empty() && hx.size() != 2)
    throw ValueError(fmt::format("{}: expected hx = {{h0, c0}} (or none), got {} tensors", kOp, hx.size()));
  const std::int64_t dirs = bidirectional ? 2 : 1, units = num_layers * dirs;
  const std::int64_t per = has_biases ? 4 : 2;
  const bool projection = std::int64_t(params.size()) == units * (per + 1);
  if (!projection && std::int64_t(params.size()) != units * per)
    throw ValueError(fmt::format("{}: expected {} params ({} layers, {} directions, {} each, one more with a "
                                 "projection), got {}",
                                 kOp, units * per, num_layers, dirs, per, params.size()));
  const std::int64_t stride = per + (projection ? 1 : 0);
  if (!params[0].defined() || params[0].dim() != 2 || params[0].size(0) % 4 != 0)
    throw ShapeError(fmt::format("{}: expected weight_ih_l0 of shape [4 * hidden, input], got {}", kOp,
                                 params[0].defined() ? shape_str(params[0].shape()) : "an undefined tensor"));
  const std::int64_t hidden = params[0].size(0) / 4;
  if (projection && (!params[std::size_t(per)].defined() || params[std::size_t(per)].dim() != 2))
    throw ShapeError(fmt::format("{}: expected weight_hr_l0 of shape [proj_size, hidden], got {}", kOp,
                                 params[std::size_t(per)].defined() ? shape_str(params[std::size_t(per)].shape())
                                                                    : "an undefined tensor"));
  const std::int64_t proj = projection ? params[std::size_t(per)].size(0) : hidden;
  const Tensor x0 = batch_first ? input.transpose(0, 1) : input;  // (L, N, H_in)
  const std::int64_t batch = x0.size(1);
  const Tensor h0 = hx.empty() ? Tensor() : hx[0], c0 = hx.empty() ? Tensor() : hx[1];
  check_state("h0", h0, {units, batch, proj}, input);
  check_state("c0", c0, {units, batch, hidden}, input);

  // Autocast casts each op of the composition as its policy says; the kernels compute in f32.
  const bool may_fuse = !autocast_enabled();
  Tensor x = x0;
  std::vector<Tensor> h_n, c_n;
  for (std::int64_t layer = 0; layer < num_layers; ++layer) {
    const std::int64_t in = layer == 0 ? x0.size(2) : dirs * proj;
    std::vector<Direction> w;
    for (std::int64_t d = 0; d < dirs; ++d) {
      const std::size_t k = std::size_t((layer * dirs + d) * stride);
      Direction wd;
      wd.w_ih = params[k];
      wd.w_hh = params[k + 1];
      if (has_biases) {
        wd.b_ih = params[k + 2];
        wd.b_hh = params[k + 3];
      }
      if (projection) wd.w_hr = params[k + std::size_t(per)];
      check_param("weight_ih", layer, d, wd.w_ih, {4 * hidden, in}, input);
      check_param("weight_hh", layer, d, wd.w_hh, {4 * hidden, proj}, input);
      if (has_biases) {
        check_param("bias_ih", layer, d, wd.b_ih, {4 * hidden}, input);
        check_param("bias_hh", layer, d, wd.b_hh, {4 * hidden}, input);
      }
      if (projection) check_param("weight_hr", layer, d, wd.w_hr, {proj, hidden}, input);
      w.push_back(std::move(wd));
    }
    const Tensor h0l = h0.defined() ? h0.slice(0, layer * dirs, (layer + 1) * dirs) : Tensor();
    const Tensor c0l = c0.defined() ? c0.slice(0, layer * dirs, (layer + 1) * dirs) : Tensor();
    std::optional<LayerResult> r;
    if (may_fuse) r = fused_layer(x, h0l, c0l, w, hidden, proj);
    if (!r) r = composed_layer(x, h0l, c0l, w, hidden, proj);
    x = r->out;
    h_n.push_back(r->h_n);
    c_n.push_back(r->c_n);
    if (dropout_p > 0 && train && layer + 1 < num_layers) x = dropout(x, dropout_p, true, generator);
  }
  return {batch_first ? x.transpose(0, 1) : x, h_n.size() == 1 ? h_n[0] : cat(h_n, 0),
          c_n.size() == 1 ? c_n[0] : cat(c_n, 0)};
}

}  // namespace rumus
