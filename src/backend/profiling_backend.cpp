// Forwards every kernel to the wrapped table and records its time under the
// op that asked for it (the ops layer's detail::kernels() hands this out while
// a Profiler records on the thread).
#include "profiling_backend.hpp"

#include <chrono>
#include <memory>
#include <unordered_map>

#include "rumus/core/profiler.hpp"

namespace rumus {

namespace {

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}
  void set_op(std::string_view op) { op_ = op; }

  Device device() const override { return inner_.device(); }
  void* allocate(std::size_t nbytes) override { return inner_.allocate(nbytes); }
  void deallocate(void* data, std::size_t nbytes) override { inner_.deallocate(data, nbytes); }
  void write(Storage& dst, std::size_t off, const void* src, std::size_t n) override {
    timed("write", {}, [&] { inner_.write(dst, off, src, n); });
  }
  void read(const Storage& src, std::size_t off, void* dst, std::size_t n) override {
    timed("read", {}, [&] { inner_.read(src, off, dst, n); });
  }
  void synchronize() override {
    timed("synchronize", {}, [&] { inner_.synchronize(); });
  }
  DeviceStats stats() const override { return inner_.stats(); }
  bool supports(Kernel kernel, DType dtype) const override { return inner_.supports(kernel, dtype); }

  void fill(TensorArg out, double value) override {
    timed("fill", {}, [&] { inner_.fill(out, value); });
  }
  void copy(TensorArg out, TensorArg in) override {
    timed("copy", {}, [&] { inner_.copy(out, in); });
  }
  void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) override {
    timed("unary", name_of(op), [&] { inner_.unary(op, out, in, p0, p1); });
  }
  void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) override {
    timed("binary", name_of(op), [&] { inner_.binary(op, out, a, b, p0, p1); });
  }
  void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) override {
    timed("where", {}, [&] { inner_.where(out, cond, a, b); });
  }
  void reduce(ReduceOp op, TensorArg out, TensorArg in) override {
    timed("reduce", name_of(op), [&] { inner_.reduce(op, out, in); });
  }
  void gemm(const GemmArgs& args) override {
    timed("gemm", {}, [&] { inner_.gemm(args); });
  }
  void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
              TensorArg state) override {
    timed("random", {}, [&] { inner_.random(kind, out, seed, offset, a, b, state); });
  }
  void sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg buf) override {
    timed("sgd_step", {}, [&] { inner_.sgd_step(s, param, grad, buf); });
  }
  void adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) override {
    timed("adam_step", {}, [&] { inner_.adam_step(s, param, grad, m, v); });
  }
  void amp_unscale(TensorArg out, TensorArg grad, TensorArg found_inf, double inv_scale) override {
    timed("amp_unscale", {}, [&] { inner_.amp_unscale(out, grad, found_inf, inv_scale); });
  }
  void im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) override {
    timed("im2col", {}, [&] { inner_.im2col(g, cols, in); });
  }
  void col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) override {
    timed("col2im", {}, [&] { inner_.col2im(g, out, cols); });
  }
  void conv2d_forward(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, TensorArg out, TensorArg in,
                      TensorArg weight, TensorArg bias, bool relu) override {
    timed(relu ? "conv2d_relu_forward" : "conv2d_forward", {},
          [&] { inner_.conv2d_forward(g, oc, groups, out, in, weight, bias, relu); });
  }
  void conv2d_backward_data(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, TensorArg grad_in,
                            TensorArg grad_out, TensorArg weight) override {
    timed("conv2d_backward_data", {}, [&] { inner_.conv2d_backward_data(g, oc, groups, grad_in, grad_out, weight); });
  }
  void conv2d_backward_weight(const Conv2dGeometry& g, std::int64_t oc, std::int64_t groups, TensorArg grad_weight,
                              TensorArg grad_bias, TensorArg grad_out, TensorArg in) override {
    timed("conv2d_backward_weight", {},
          [&] { inner_.conv2d_backward_weight(g, oc, groups, grad_weight, grad_bias, grad_out, in); });
  }
  void pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) override {
    timed("pool2d_forward", {}, [&] { inner_.pool2d_forward(p, out, indices, in); });
  }
  void pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) override {
    timed("pool2d_backward", {}, [&] { inner_.pool2d_backward(p, grad_in, grad_out, indices); });
  }
  void softmax_forward(TensorArg out, TensorArg in, bool log) override {
    timed("softmax_forward", {}, [&] { inner_.softmax_forward(out, in, log); });
  }
  void softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) override {
    timed("softmax_backward", {}, [&] { inner_.softmax_backward(grad_in, grad_out, out, log); });
  }
  void index_select(TensorArg out, TensorArg src, TensorArg index) override {
    timed("index_select", {}, [&] { inner_.index_select(out, src, index); });
  }
  void index_add(TensorArg out, TensorArg index, TensorArg src) override {
    timed("index_add", {}, [&] { inner_.index_add(out, index, src); });
  }
  void attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k, TensorArg v,
                         TensorArg mask) override {
    timed("attention_forward", {}, [&] { inner_.attention_forward(p, out, lse, q, k, v, mask); });
  }
  void attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                          TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse,
                          TensorArg mask) override {
    timed("attention_backward", {},
          [&] { inner_.attention_backward(p, grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, mask); });
  }
  void layer_norm_forward(TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                          TensorArg bias, double eps) override {
    timed("layer_norm_forward", {}, [&] { inner_.layer_norm_forward(out, mean, invstd, x, weight, bias, eps); });
  }
  void layer_norm_backward(TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                           TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight) override {
    timed("layer_norm_backward", {},
          [&] { inner_.layer_norm_backward(grad_x, grad_weight, grad_bias, grad_out, x, mean, invstd, weight); });
  }
  void dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed, std::uint64_t offset,
                       double keep, double scale) override {
    timed("dropout_forward", {}, [&] { inner_.dropout_forward(out, mask, in, seed, offset, keep, scale); });
  }

 private:
  template <class F>
  void timed(std::string_view kernel, std::string_view variant, F&& run) {
    const std::string_view op = op_;  // a kernel may ask for kernels of its own and relabel this table
    const auto start = std::chrono::steady_clock::now();
    run();
    detail::profile_record(op, kernel, variant, std::chrono::steady_clock::now() - start);
  }

  Backend& inner_;
  std::string_view op_;
};

}  // namespace

Backend& profiling_backend(Backend& inner, std::string_view op) {
  thread_local std::unordered_map<Backend*, std::unique_ptr<ProfilingBackend>> wrappers;
  auto& w = wrappers[&inner];
  if (!w) w = std::make_unique<ProfilingBackend>(inner);
  w->set_op(op);
  return *w;
}

}  // namespace rumus
