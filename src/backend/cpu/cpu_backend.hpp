#pragma once
#include <atomic>
#include <map>
#include <mutex>

#include "../../core/device_registry.hpp"
#include "../backend.hpp"

namespace rumus::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  Device device() const override { return Device::cpu(); }
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* data, std::size_t nbytes) override;
  void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) override;
  void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) override;
  bool supports(Kernel kernel, DType dtype) const override;
  DeviceStats stats() const override;

  void fill(TensorArg out, double value) override;
  void copy(TensorArg out, TensorArg in) override;
  void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) override;
  void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) override;
  void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) override;
  void reduce(ReduceOp op, TensorArg out, TensorArg in) override;
  void sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg momentum_buf) override;
  void adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) override;
  void amp_unscale(TensorArg out, TensorArg grad, TensorArg found_inf, double inv_scale) override;
  void gemm(const GemmArgs& args) override;
  void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
              TensorArg state) override;

  void im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) override;
  void col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) override;
  // oneDNN's convolutions (f32): cpu_conv.cpp.
  void conv2d_forward(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups, TensorArg out,
                      TensorArg in, TensorArg weight, TensorArg bias, bool relu) override;
  void conv2d_backward_data(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                            TensorArg grad_in, TensorArg grad_out, TensorArg weight) override;
  void conv2d_backward_weight(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                              TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in) override;
  void pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) override;
  void pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) override;
  void softmax_forward(TensorArg out, TensorArg in, bool log) override;
  void softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) override;
  void index_select(TensorArg out, TensorArg src, TensorArg index) override;
  void index_add(TensorArg out, TensorArg index, TensorArg src) override;
  void attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k, TensorArg v,
                         TensorArg mask) override;
  void attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                          TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse,
                          TensorArg mask) override;
  void layer_norm_forward(TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                          TensorArg bias, double eps) override;
  void layer_norm_backward(TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                           TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight) override;
  void dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed, std::uint64_t offset,
                       double keep, double scale) override;

 private:
  mutable std::mutex cache_mu_;
  std::multimap<std::size_t, void*> cache_;  // idle blocks by size
  std::size_t cached_bytes_ = 0;
  std::atomic<std::size_t> in_use_{0}, peak_{0};  // bytes held by live storages (rounded)
};

// The CPU provider: one device, "cpu".
detail::DeviceProvider provider();

}  // namespace rumus::cpu
