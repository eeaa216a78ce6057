// CPU kernels of the LSTM sequence family (../lstm.hpp): a whole layer, both
// directions at once, on oneDNN's LSTM primitive (f32), forward and backward.
//
// oneDNN's vanilla LSTM computes the gates in PyTorch's order (i, f, c~, o)
// from one bias per gate, so PyTorch's two biases are added here and the bias
// gradient goes to both. Its weights are [layers, directions, in, gates, out]:
// PyTorch's w_ih [4 hidden, input] of one direction is that tensor's "ldgoi"
// layout, w_hh likewise, and w_hr [proj, hidden] is the projection's "ldoi".
// The forward wants them reordered ("ldigo"), the backward reads the gates
// row-major as PyTorch keeps them, and the gradients come in the forward's
// format and are reordered back. Both directions run in one primitive
// (bidirectional_concat writes the forward direction's h first, as PyTorch).
//
// A plan per geometry and thread keeps the primitives and buffers (oneDNN
// primitives run concurrently only with their own buffers). The weights a
// primitive reads are kept reordered while the tensors' bytes are unchanged
// (storage id and version), so a backward after its forward, or a loop of
// inference calls, gathers and reorders nothing again.
#include "../lstm.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "onednn.hpp"

namespace rumus::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

constexpr std::int64_t kGates = 4;

// Which bytes a tensor argument names (an address alone can be reused).
struct Source {
  std::uint64_t storage = 0, version = 0;
  const void* data = nullptr;
  bool operator==(const Source&) const = default;
};

Source source_of(TensorArg t) {
  if (!t.storage) return {};
  return {t.storage->id(), t.storage->version(), base_of<float>(t)};
}

memory::desc md(memory::dims dims, Tag tag) { return memory::desc(dims, memory::data_type::f32, tag); }

memory user(const memory::desc& d, TensorArg t) { return memory(d, onednn::engine(), base_of<float>(t)); }

// A weight the primitive reads: one PyTorch tensor per direction, gathered
// into one plain buffer when there are two, reordered when the primitive
// wants another format; both kept while their sources are unchanged.
struct Weight {
  memory::desc plain, wanted;
  std::int64_t directions = 1;
  std::optional<memory> gathered, converted;
  std::optional<dnnl::reorder> reorder;
  std::array<Source, 2> held{};
  bool valid = false;

  void prepare(const memory::desc& plain_md, const memory::desc& wanted_md, std::int64_t dirs) {
    plain = plain_md;
    wanted = wanted_md;
    directions = dirs;
    const dnnl::engine& e = onednn::engine();
    if (dirs > 1) gathered.emplace(plain, e);
    if (plain != wanted) {
      converted.emplace(wanted, e);
      reorder.emplace(dnnl::reorder::primitive_desc(e, plain, e, wanted));
    }
  }

  memory get(const std::array<TensorArg, 2>& t, dnnl::stream& s) {
    const std::array<Source, 2> now{source_of(t[0]), directions > 1 ? source_of(t[1]) : Source{}};
    if (!gathered && !converted) return user(plain, t[0]);  // PyTorch's layout is the primitive's
    if (valid && held == now) return converted ? *converted : *gathered;
    valid = false;  // in case a step below fails
    memory from = user(plain, t[0]);
    if (gathered) {
      const std::size_t bytes = plain.get_size() / std::size_t(directions);
      auto* dst = static_cast<char*>(gathered->get_data_handle());
      for (std::int64_t d = 0; d < directions; ++d)
        std::memcpy(dst + std::size_t(d) * bytes, base_of<float>(t[std::size_t(d)]), bytes);
      from = *gathered;
    }
    if (converted) reorder->execute(s, from, *converted);
    held = now;
    valid = true;
    return converted ? *converted : *gathered;
  }
};

// A weight gradient: the primitive accumulates into its own buffer, which is
// zeroed first and reordered into PyTorch's layout, one tensor per direction.
struct DiffWeight {
  memory::desc plain, wanted;
  std::int64_t directions = 1;
  std::optional<memory> buffer, plain_buffer;
  std::optional<dnnl::reorder> reorder;

  void prepare(const memory::desc& plain_md, const memory::desc& wanted_md, std::int64_t dirs) {
    plain = plain_md;
    wanted = wanted_md;
    directions = dirs;
    const dnnl::engine& e = onednn::engine();
    buffer.emplace(wanted, e);
    if (plain != wanted) {
      plain_buffer.emplace(plain, e);
      reorder.emplace(dnnl::reorder::primitive_desc(e, wanted, e, plain));
    }
  }
  memory zeroed() {
    std::memset(buffer->get_data_handle(), 0, wanted.get_size());
    return *buffer;
  }
  // `second`: another set of tensors that takes the same gradient (the biases).
  void finish(const std::array<TensorArg, 2>& out, const std::array<TensorArg, 2>& second, dnnl::stream& s) {
    const bool wanted_any = out[0].storage || out[1].storage || second[0].storage || second[1].storage;
    if (!wanted_any) return;
    if (reorder) reorder->execute(s, *buffer, *plain_buffer);
    s.wait();
    const auto* src = static_cast<const char*>((plain_buffer ? *plain_buffer : *buffer).get_data_handle());
    const std::size_t bytes = plain.get_size() / std::size_t(directions);
    for (std::int64_t d = 0; d < directions; ++d)
      for (const auto* set : {&out, &second})
        if (TensorArg t = (*set)[std::size_t(d)]; t.storage)
          std::memcpy(base_of<float>(t), src + std::size_t(d) * bytes, bytes);
  }
};

struct LstmPlan {
  bool ok = false;  // oneDNN implements this geometry
  std::int64_t directions = 1;
  bool projection = false;
  memory::desc src_layer, src_iter, src_iter_c, bias, dst_layer, dst_iter, dst_iter_c;
  memory::desc w_layer, w_iter, w_proj;  // PyTorch's layouts
  dnnl::lstm_forward::primitive_desc forward_pd;
  std::optional<dnnl::lstm_forward> forward;
  Weight f_layer, f_iter, f_proj;
  std::optional<dnnl::lstm_backward::primitive_desc> backward_pd;
  std::optional<dnnl::lstm_backward> backward;
  Weight b_layer, b_iter, b_proj;
  DiffWeight d_layer, d_iter, d_proj, d_bias;
  // The summed biases (zeros without), and zero states for absent h0, c0.
  std::optional<memory> bias_buffer, zero_h, zero_c;
  std::array<Source, 4> bias_held{};
  bool bias_valid = false;
  // Where gradients nobody wants go.
  std::optional<memory> scratch_x, scratch_h, scratch_c;
};

using LstmKey = std::array<std::int64_t, 9>;

LstmKey key_of(const LstmSequenceGeometry& g) {
  return {g.steps, g.batch, g.input, g.hidden, g.projection ? g.proj : 0, g.directions, g.batch_first ? 1 : 0,
          g.training ? 1 : 0, 0};
}

std::map<LstmKey, std::unique_ptr<LstmPlan>>& plans() {
  thread_local std::map<LstmKey, std::unique_ptr<LstmPlan>> p;
  return p;
}

memory zeros(const memory::desc& d) {
  memory m(d, onednn::engine());
  std::memset(m.get_data_handle(), 0, d.get_size());
  return m;
}

void build(LstmPlan& p, const LstmSequenceGeometry& g) {
  const std::int64_t T = g.steps, N = g.batch, I = g.input, H = g.hidden, D = g.directions;
  const std::int64_t P = g.projection ? g.proj : H;
  p.directions = D;
  p.projection = g.projection;
  const Tag data_tag = g.batch_first ? Tag::ntc : Tag::tnc;
  p.src_layer = md({T, N, I}, data_tag);
  p.dst_layer = md({T, N, D * P}, data_tag);
  p.src_iter = p.dst_iter = md({1, D, N, P}, Tag::ldnc);
  p.src_iter_c = p.dst_iter_c = md({1, D, N, H}, Tag::ldnc);
  p.bias = md({1, D, kGates, H}, Tag::ldgo);
  p.w_layer = md({1, D, I, kGates, H}, Tag::ldgoi);
  p.w_iter = md({1, D, P, kGates, H}, Tag::ldgoi);
  if (g.projection) p.w_proj = md({1, D, H, P}, Tag::ldoi);
  const memory::desc any_layer = md({1, D, I, kGates, H}, Tag::any), any_iter = md({1, D, P, kGates, H}, Tag::any);
  const memory::desc any_proj = g.projection ? md({1, D, H, P}, Tag::any) : memory::desc();
  const auto direction = D == 2 ? dnnl::rnn_direction::bidirectional_concat
                                : dnnl::rnn_direction::unidirectional_left2right;
  const auto prop = g.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const dnnl::engine& e = onednn::engine();
  try {
    const dnnl::lstm_forward::desc fd(prop, direction, p.src_layer, p.src_iter, p.src_iter_c, any_layer, any_iter,
                                      memory::desc(), any_proj, p.bias, p.dst_layer, p.dst_iter, p.dst_iter_c);
    p.forward_pd = dnnl::lstm_forward::primitive_desc(fd, e);
    if (g.training) {
      const dnnl::lstm_backward::desc bd(dnnl::prop_kind::backward, direction, p.src_layer, p.src_iter, p.src_iter_c,
                                         any_layer, any_iter, memory::desc(), any_proj, p.bias, p.dst_layer,
                                         p.dst_iter, p.dst_iter_c, p.src_layer, p.src_iter, p.src_iter_c, any_layer,
                                         any_iter, memory::desc(), any_proj, p.bias, p.dst_layer, p.dst_iter,
                                         p.dst_iter_c);
      p.backward_pd.emplace(bd, e, p.forward_pd);
    }
  } catch (const dnnl::error& err) {
    if (err.status == dnnl_unimplemented) return;  // the op composes the layer
    throw;
  }
  p.forward.emplace(p.forward_pd);
  p.f_layer.prepare(p.w_layer, p.forward_pd.weights_layer_desc(), D);
  p.f_iter.prepare(p.w_iter, p.forward_pd.weights_iter_desc(), D);
  if (g.projection) p.f_proj.prepare(p.w_proj, p.forward_pd.weights_projection_desc(), D);
  p.bias_buffer = zeros(p.bias);
  p.zero_h = zeros(p.src_iter);
  p.zero_c = zeros(p.src_iter_c);
  if (g.training) {
    const auto& b = *p.backward_pd;
    p.backward.emplace(b);
    p.b_layer.prepare(p.w_layer, b.weights_layer_desc(), D);
    p.b_iter.prepare(p.w_iter, b.weights_iter_desc(), D);
    if (g.projection) p.b_proj.prepare(p.w_proj, b.weights_projection_desc(), D);
    p.d_layer.prepare(p.w_layer, b.diff_weights_layer_desc(), D);
    p.d_iter.prepare(p.w_iter, b.diff_weights_iter_desc(), D);
    if (g.projection) p.d_proj.prepare(p.w_proj, b.diff_weights_projection_desc(), D);
    p.d_bias.prepare(p.bias, b.diff_bias_desc(), D);
  }
  p.ok = true;
}

// Each plan holds its weights reordered, a few MB for a large layer: a loop
// over many sequence lengths drops them all now and then rather than keep
// one per length. A backward after the drop builds its plan again (the same
// descriptors give the same workspace layout).
constexpr std::size_t kMaxPlans = 16;

LstmPlan& plan_for(const LstmSequenceGeometry& g, const char* op) {
  const LstmKey key = key_of(g);
  if (auto it = plans().find(key); it != plans().end()) return *it->second;
  std::lock_guard lock(onednn::creation_mutex());  // dropping primitives too goes through oneDNN's cache
  if (plans().size() >= kMaxPlans) plans().clear();
  auto p = std::make_unique<LstmPlan>();
  onednn::checked(op, [&] { build(*p, g); });
  return *(plans()[key] = std::move(p));
}

// PyTorch's two biases summed per direction, kept while they are unchanged.
memory bias_of(LstmPlan& p, const LstmSequenceWeights& w, std::int64_t hidden) {
  const std::array<Source, 4> now{source_of(w.b_ih[0]), source_of(w.b_hh[0]), source_of(w.b_ih[1]),
                                  source_of(w.b_hh[1])};
  if (p.bias_valid && p.bias_held == now) return *p.bias_buffer;
  auto* b = static_cast<float*>(p.bias_buffer->get_data_handle());
  const std::int64_t n = kGates * hidden;
  for (std::int64_t d = 0; d < p.directions; ++d) {
    const float* ih = base_of<float>(w.b_ih[std::size_t(d)]);
    const float* hh = base_of<float>(w.b_hh[std::size_t(d)]);
    for (std::int64_t j = 0; j < n; ++j) b[d * n + j] = (ih ? ih[j] : 0.f) + (hh ? hh[j] : 0.f);
  }
  p.bias_held = now;
  p.bias_valid = true;
  return *p.bias_buffer;
}

memory state(const memory::desc& d, TensorArg t, const std::optional<memory>& zero) {
  return t.storage ? user(d, t) : *zero;
}

memory scratch(std::optional<memory>& slot, const memory::desc& d, TensorArg t) {
  if (t.storage) return user(d, t);
  if (!slot) slot.emplace(d, onednn::engine());
  return *slot;
}

void check(const char* op, std::initializer_list<TensorArg> operands) {
  for (TensorArg t : operands)
    if (t.storage) require_contiguous(op, t);
}

void check_weights(const char* op, const LstmSequenceWeights& w) {
  for (const auto* set : {&w.w_ih, &w.w_hh, &w.w_hr, &w.b_ih, &w.b_hh}) check(op, {(*set)[0], (*set)[1]});
}

void lstm_sequence_workspace(Backend&, const LstmSequenceGeometry& g, std::int64_t& bytes) {
  LstmPlan& p = plan_for(g, "lstm");
  bytes = !p.ok ? -1 : g.training ? std::int64_t(p.forward_pd.workspace_desc().get_size()) : 0;
}

void lstm_sequence_forward(Backend&, const LstmSequenceGeometry& g, const LstmSequenceForwardArgs& a) {
  const char* op = "lstm_sequence_forward";
  check(op, {a.x, a.h0, a.c0, a.out, a.h_n, a.c_n, a.workspace});
  check_weights(op, a.weights);
  LstmPlan& p = plan_for(g, "lstm");
  if (!p.ok) throw DeviceError("lstm: oneDNN has no LSTM primitive for this geometry");
  onednn::checked("lstm", [&] {
    dnnl::stream& s = onednn::stream();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC_LAYER, user(p.src_layer, a.x)},
        {DNNL_ARG_SRC_ITER, state(p.src_iter, a.h0, p.zero_h)},
        {DNNL_ARG_SRC_ITER_C, state(p.src_iter_c, a.c0, p.zero_c)},
        {DNNL_ARG_WEIGHTS_LAYER, p.f_layer.get(a.weights.w_ih, s)},
        {DNNL_ARG_WEIGHTS_ITER, p.f_iter.get(a.weights.w_hh, s)},
        {DNNL_ARG_BIAS, bias_of(p, a.weights, g.hidden)},
        {DNNL_ARG_DST_LAYER, user(p.dst_layer, a.out)},
        {DNNL_ARG_DST_ITER, user(p.dst_iter, a.h_n)},
        {DNNL_ARG_DST_ITER_C, user(p.dst_iter_c, a.c_n)}};
    if (p.projection) args.emplace(DNNL_ARG_WEIGHTS_PROJECTION, p.f_proj.get(a.weights.w_hr, s));
    if (g.training) args.emplace(DNNL_ARG_WORKSPACE, memory(p.forward_pd.workspace_desc(), onednn::engine(),
                                                            data_of<std::uint8_t>(a.workspace) + a.workspace.layout->offset));
    p.forward->execute(s, args);
    s.wait();
  });
}

void lstm_sequence_backward(Backend&, const LstmSequenceGeometry& g, const LstmSequenceBackwardArgs& a) {
  const char* op = "lstm_sequence_backward";
  check(op, {a.x, a.h0, a.c0, a.out, a.h_n, a.c_n, a.workspace, a.d_out, a.d_h_n, a.d_c_n, a.d_x, a.d_h0, a.d_c0});
  check_weights(op, a.weights);
  check_weights(op, a.d_weights);
  LstmPlan& p = plan_for(g, "lstm");
  if (!p.ok || !p.backward) throw DeviceError("lstm: oneDNN has no LSTM backward primitive for this geometry");
  onednn::checked("lstm backward", [&] {
    dnnl::stream& s = onednn::stream();
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC_LAYER, user(p.src_layer, a.x)},
        {DNNL_ARG_SRC_ITER, state(p.src_iter, a.h0, p.zero_h)},
        {DNNL_ARG_SRC_ITER_C, state(p.src_iter_c, a.c0, p.zero_c)},
        {DNNL_ARG_WEIGHTS_LAYER, p.b_layer.get(a.weights.w_ih, s)},
        {DNNL_ARG_WEIGHTS_ITER, p.b_iter.get(a.weights.w_hh, s)},
        {DNNL_ARG_BIAS, bias_of(p, a.weights, g.hidden)},
        {DNNL_ARG_DST_LAYER, user(p.dst_layer, a.out)},
        {DNNL_ARG_DST_ITER, user(p.dst_iter, a.h_n)},
        {DNNL_ARG_DST_ITER_C, user(p.dst_iter_c, a.c_n)},
        {DNNL_ARG_WORKSPACE, memory(p.backward_pd->workspace_desc(), onednn::engine(),
                                    data_of<std::uint8_t>(a.workspace) + a.workspace.layout->offset)},
        {DNNL_ARG_DIFF_DST_LAYER, user(p.dst_layer, a.d_out)},
        {DNNL_ARG_DIFF_DST_ITER, user(p.dst_iter, a.d_h_n)},
        {DNNL_ARG_DIFF_DST_ITER_C, user(p.dst_iter_c, a.d_c_n)},
        {DNNL_ARG_DIFF_SRC_LAYER, scratch(p.scratch_x, p.src_layer, a.d_x)},
        {DNNL_ARG_DIFF_SRC_ITER, scratch(p.scratch_h, p.src_iter, a.d_h0)},
        {DNNL_ARG_DIFF_SRC_ITER_C, scratch(p.scratch_c, p.src_iter_c, a.d_c0)},
        // oneDNN adds the weights' gradients to what these hold.
        {DNNL_ARG_DIFF_WEIGHTS_LAYER, p.d_layer.zeroed()},
        {DNNL_ARG_DIFF_WEIGHTS_ITER, p.d_iter.zeroed()},
        {DNNL_ARG_DIFF_BIAS, p.d_bias.zeroed()}};
    if (p.projection) {
      args.emplace(DNNL_ARG_WEIGHTS_PROJECTION, p.b_proj.get(a.weights.w_hr, s));
      args.emplace(DNNL_ARG_DIFF_WEIGHTS_PROJECTION, p.d_proj.zeroed());
    }
    p.backward->execute(s, args);
    p.d_layer.finish(a.d_weights.w_ih, {}, s);
    p.d_iter.finish(a.d_weights.w_hh, {}, s);
    if (p.projection) p.d_proj.finish(a.d_weights.w_hr, {}, s);
    p.d_bias.finish(a.d_weights.b_ih, a.d_weights.b_hh, s);
    s.wait();
  });
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, lstm_sequence) {
  register_kernel<LstmSequenceWorkspaceKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::lstm_sequence_workspace);
  register_kernel<LstmSequenceForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::lstm_sequence_forward);
  register_kernel<LstmSequenceBackwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::lstm_sequence_backward);
}

}  // namespace rumus
