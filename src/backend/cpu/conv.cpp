// CPU convolutions on oneDNN (f32): forward with the bias (and for conv2d_relu
// the ReLU, as a post-op) fused, backward-data, and backward-weights with the
// bias gradient fused.
//
// rumus tensors are plain NCHW. oneDNN picks the memory format its fastest
// kernel wants for the CPU it runs on (blocked, e.g. nChw16c on AVX-512), and
// each call reorders into and out of it. An input reordered for one pass is
// kept and reused by the next pass that reads the same bytes in the same format
// (the forward's input by backward-weights, the output gradient of
// backward-data by backward-weights), which saves two of the CNN's nine
// activation-sized reorders per step. A forward's output stays available in
// its blocked format too, so a convolution that reads it next (conv2d_relu
// feeding a convolution) takes it without a reorder. A plan per shape keeps the primitives,
// the reorders and the scratch buffers, so a training step that repeats its
// shapes builds nothing after the first one. Plans are per thread: a plan owns
// buffers, and oneDNN primitives may run concurrently only with their own.
#include "../conv.hpp"
#include "../pointwise.hpp"
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
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

// Everything that fixes the primitives of one convolution.
using ConvKey = std::array<std::int64_t, 16>;

ConvKey key_of(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, bool bias) {
  return {g.batch, g.channels, g.height, g.width, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w,
          g.pad_h, g.pad_w, g.dilation_h, g.dilation_w, oc, groups, bias ? 1 : 0, 0};
}

// Which bytes a tensor argument names: storage id and version name them
// exactly (an address can be reused by another tensor).
struct Source {
  std::uint64_t storage = 0, version = 0;
  const void* data = nullptr;
  bool operator==(const Source&) const = default;
};

Source source_of(TensorArg t) {
  return {t.storage->id(), t.storage->version(), data_of<float>(t) + t.layout->offset};
}

struct Operand;
// This thread's forward outputs whose blocked buffer may still hold a copy of
// the output tensor (the plans live as long as the thread).
std::vector<const Operand*>& forward_outputs() {
  thread_local std::vector<const Operand*> outputs;
  return outputs;
}

// A user buffer in its plain format, and the primitive's view of it: when the
// primitive wants another format, a reorder and a buffer of its own.
struct Operand {
  memory::desc plain, wanted;
  std::optional<memory> buffer;  // the wanted format, when it differs
  std::optional<dnnl::reorder> to_wanted, to_plain;
  std::optional<Source> held;  // which bytes `buffer` holds a converted copy of

  void prepare(const memory::desc& plain_md, const memory::desc& wanted_md, bool input, bool output) {
    plain = plain_md;
    wanted = wanted_md;
    if (plain == wanted) return;
    buffer.emplace(wanted, onednn::engine());
    const dnnl::engine& e = onednn::engine();
    if (input) to_wanted.emplace(dnnl::reorder::primitive_desc(e, plain, e, wanted));
    if (output) to_plain.emplace(dnnl::reorder::primitive_desc(e, wanted, e, plain));
  }
  // The memory the primitive reads, converted from `t` unless this buffer, or
  // the buffer of a forward output other than `writing` (the operand this
  // call writes), already holds its converted bytes.
  memory in(TensorArg t, dnnl::stream& s, const Operand* writing) {
    void* data = data_of<float>(t) + t.layout->offset;
    memory user(plain, onednn::engine(), data);
    if (!buffer) return user;
    const Source source = source_of(t);
    if (held == source) return *buffer;
    for (const Operand* o : forward_outputs())
      if (o != writing && o->held == source && o->wanted == wanted) return *o->buffer;
    held.reset();  // in case the reorder fails
    to_wanted->execute(s, user, *buffer);
    held = source;
    return *buffer;
  }
  // The memory the primitive writes; finish() moves it into `t`.
  memory out(void* data) {
    held.reset();
    return buffer ? *buffer : memory(plain, onednn::engine(), data);
  }
  void finish(TensorArg t, dnnl::stream& s) {
    if (!buffer) return;
    memory user(plain, onednn::engine(), data_of<float>(t) + t.layout->offset);
    to_plain->execute(s, *buffer, user);
  }
  // After finish(): the buffer is a copy of `t` that later convolutions may read.
  void keep_as_copy_of(TensorArg t) {
    if (!buffer) return;
    if (std::find(forward_outputs().begin(), forward_outputs().end(), this) == forward_outputs().end())
      forward_outputs().push_back(this);
    held = source_of(t);
  }
};

struct ConvPlan {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_forward forward;
  // The forward with a ReLU post-op, in the same formats (so the backward
  // passes and reorders are shared); built on first use, absent if oneDNN
  // has no such kernel, and then the ReLU is a loop of our own.
  std::optional<dnnl::convolution_forward> forward_relu;
  bool forward_relu_tried = false;
  Operand f_src, f_weights, f_dst;
  // Built on the first backward pass.
  std::optional<dnnl::convolution_backward_data> backward_data;
  Operand d_diff_src, d_weights, d_diff_dst;
  std::optional<dnnl::convolution_backward_weights> backward_weights;
  Operand w_src, w_diff_weights, w_diff_dst;
  bool has_bias = false;
};

memory::desc plain_md(memory::dims dims, Tag tag) { return memory::desc(dims, memory::data_type::f32, tag); }
memory::desc any_md(memory::dims dims) { return memory::desc(dims, memory::data_type::f32, Tag::any); }

std::unique_ptr<ConvPlan> make_plan(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, bool bias) {
  auto p = std::make_unique<ConvPlan>();
  p->has_bias = bias;
  const memory::dims src_dims{g.batch, g.channels, g.height, g.width}, dst_dims{g.batch, oc, g.out_h, g.out_w};
  const memory::dims w_dims = groups == 1
      ? memory::dims{oc, g.channels, g.kernel_h, g.kernel_w}
      : memory::dims{groups, oc / groups, g.channels / groups, g.kernel_h, g.kernel_w};
  p->src = plain_md(src_dims, Tag::nchw);
  p->dst = plain_md(dst_dims, Tag::nchw);
  p->weights = plain_md(w_dims, groups == 1 ? Tag::oihw : Tag::goihw);
  p->bias = plain_md({oc}, Tag::x);
  p->strides = {g.stride_h, g.stride_w};
  p->dilates = {g.dilation_h - 1, g.dilation_w - 1};  // oneDNN counts the gaps
  p->pad_l = {g.pad_h, g.pad_w};
  // Symmetric padding: oneDNN, like PyTorch, rounds the output size down as rumus does.
  p->pad_r = p->pad_l;
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, any_md(src_dims),
                                                        any_md(w_dims), p->bias, any_md(dst_dims), p->strides,
                                                        p->dilates, p->pad_l, p->pad_r)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, any_md(src_dims),
                                                        any_md(w_dims), any_md(dst_dims), p->strides, p->dilates,
                                                        p->pad_l, p->pad_r);
  p->forward_pd = dnnl::convolution_forward::primitive_desc(d, onednn::engine());
  p->forward = dnnl::convolution_forward(p->forward_pd);
  p->f_src.prepare(p->src, p->forward_pd.src_desc(), true, false);
  p->f_weights.prepare(p->weights, p->forward_pd.weights_desc(), true, false);
  p->f_dst.prepare(p->dst, p->forward_pd.dst_desc(), false, true);
  return p;
}

std::map<ConvKey, std::unique_ptr<ConvPlan>>& plans() {
  thread_local std::map<ConvKey, std::unique_ptr<ConvPlan>> p;
  return p;
}

void build_forward_relu(ConvPlan& p) {
  p.forward_relu_tried = true;
  const auto& f = p.forward_pd;
  const auto d = p.has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                              dnnl::algorithm::convolution_direct, f.src_desc(),
                                                              f.weights_desc(), p.bias, f.dst_desc(), p.strides,
                                                              p.dilates, p.pad_l, p.pad_r)
                            : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                              dnnl::algorithm::convolution_direct, f.src_desc(),
                                                              f.weights_desc(), f.dst_desc(), p.strides, p.dilates,
                                                              p.pad_l, p.pad_r);
  dnnl::post_ops ops;
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  try {
    p.forward_relu.emplace(dnnl::convolution_forward::primitive_desc(d, attr, onednn::engine()));
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
  }
}

ConvPlan& plan_for(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, bool bias) {
  auto& slot = plans()[key_of(g, oc, groups, bias)];
  if (!slot) {
    std::lock_guard lock(onednn::creation_mutex());
    slot = onednn::checked("conv2d", [&] { return make_plan(g, oc, groups, bias); });
  }
  return *slot;
}

void* ptr(TensorArg t) { return data_of<float>(t) + t.layout->offset; }

}  // namespace

void conv2d_forward(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, TensorArg out,
                                TensorArg in, TensorArg weight, TensorArg bias, bool relu) {
  const bool has_bias = bias.storage != nullptr;
  ConvPlan& p = plan_for(g, oc, groups, has_bias);
  const char* op = relu ? "conv2d_relu" : "conv2d";
  onednn::checked(op, [&] {
    if (relu && !p.forward_relu_tried) {
      std::lock_guard lock(onednn::creation_mutex());
      build_forward_relu(p);
    }
    const bool fused = relu && p.forward_relu;
    dnnl::stream& s = onednn::stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, p.f_src.in(in, s, &p.f_dst)},
                                         {DNNL_ARG_WEIGHTS, p.f_weights.in(weight, s, &p.f_dst)},
                                         {DNNL_ARG_DST, p.f_dst.out(ptr(out))}};
    if (has_bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias, onednn::engine(), ptr(bias)));
    (fused ? *p.forward_relu : p.forward).execute(s, args);
    p.f_dst.finish(out, s);
    s.wait();
    // Unless our own loop still changes `out` below.
    if (fused || !relu) p.f_dst.keep_as_copy_of(out);
  });
  if (relu && !p.forward_relu) run_kernel<UnaryKernel>(be, UnaryOp::relu, out, out, 0.0, 0.0);
}

void conv2d_backward_data(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups,
                                      TensorArg grad_in, TensorArg grad_out, TensorArg weight) {
  // The plan of the forward pass that made grad_out (its bias does not matter
  // here): the one with a bias if there is one, whose backward-weights pass
  // can then reuse the gradient reordered here.
  const auto with_bias = plans().find(key_of(g, oc, groups, true));
  ConvPlan& p = with_bias != plans().end() ? *with_bias->second : plan_for(g, oc, groups, false);
  onednn::checked("conv2d backward", [&] {
    if (!p.backward_data) {
      std::lock_guard lock(onednn::creation_mutex());
      const dnnl::convolution_backward_data::desc d(
          dnnl::algorithm::convolution_direct, any_md(p.src.dims()), any_md(p.weights.dims()),
          any_md(p.dst.dims()), p.strides, p.dilates, p.pad_l, p.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(d, onednn::engine(), p.forward_pd);
      p.backward_data.emplace(pd);
      p.d_diff_src.prepare(p.src, pd.diff_src_desc(), false, true);
      p.d_weights.prepare(p.weights, pd.weights_desc(), true, false);
      p.d_diff_dst.prepare(p.dst, pd.diff_dst_desc(), true, false);
    }
    dnnl::stream& s = onednn::stream();
    p.backward_data->execute(s, {{DNNL_ARG_DIFF_DST, p.d_diff_dst.in(grad_out, s, &p.d_diff_src)},
                                 {DNNL_ARG_WEIGHTS, p.d_weights.in(weight, s, &p.d_diff_src)},
                                 {DNNL_ARG_DIFF_SRC, p.d_diff_src.out(ptr(grad_in))}});
    p.d_diff_src.finish(grad_in, s);
    s.wait();
  });
}

void conv2d_backward_weight(Backend& be, const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups,
                                        TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                                        TensorArg in) {
  const bool has_bias = grad_bias.storage != nullptr;
  ConvPlan& p = plan_for(g, oc, groups, has_bias);
  onednn::checked("conv2d backward", [&] {
    if (!p.backward_weights) {
      std::lock_guard lock(onednn::creation_mutex());
      const auto algo = dnnl::algorithm::convolution_direct;
      const auto d = has_bias
          ? dnnl::convolution_backward_weights::desc(algo, any_md(p.src.dims()), any_md(p.weights.dims()), p.bias,
                                                     any_md(p.dst.dims()), p.strides, p.dilates, p.pad_l, p.pad_r)
          : dnnl::convolution_backward_weights::desc(algo, any_md(p.src.dims()), any_md(p.weights.dims()),
                                                     any_md(p.dst.dims()), p.strides, p.dilates, p.pad_l, p.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(d, onednn::engine(), p.forward_pd);
      p.backward_weights.emplace(pd);
      p.w_src.prepare(p.src, pd.src_desc(), true, false);
      p.w_diff_dst.prepare(p.dst, pd.diff_dst_desc(), true, false);
      p.w_diff_weights.prepare(p.weights, pd.diff_weights_desc(), false, true);
    }
    dnnl::stream& s = onednn::stream();
    // The forward's reordered input and backward-data's reordered gradient,
    // when this pass wants the same formats and they still hold these bytes.
    Operand& src = p.w_src.wanted == p.f_src.wanted ? p.f_src : p.w_src;
    Operand& diff_dst = p.backward_data && p.w_diff_dst.wanted == p.d_diff_dst.wanted ? p.d_diff_dst : p.w_diff_dst;
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src.in(in, s, &p.w_diff_weights)},
                                         {DNNL_ARG_DIFF_DST, diff_dst.in(grad_out, s, &p.w_diff_weights)},
                                         {DNNL_ARG_DIFF_WEIGHTS, p.w_diff_weights.out(ptr(grad_weight))}};
    if (has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, memory(p.bias, onednn::engine(), ptr(grad_bias)));
    p.backward_weights->execute(s, args);
    p.w_diff_weights.finish(grad_weight, s);
    s.wait();
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, conv) {
  register_kernel<Conv2dForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::conv2d_forward);
  register_kernel<Conv2dBackwardDataKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::conv2d_backward_data);
  register_kernel<Conv2dBackwardWeightKernel>(Device::Kind::cpu, DTypeSet{DType::f32}, &cpu::conv2d_backward_weight);
}

}  // namespace rumus
