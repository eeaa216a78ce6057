#pragma once
// The kernel interface every device implements. Kernels know buffers, sizes
// and strides only: shape rules, broadcasting and errors live in ops/.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rumus/core/device.hpp"
#include "rumus/core/dtype.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/layout.hpp"
#include "rumus/core/storage.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// A non-owning view of a tensor's buffer for kernels.
struct TensorArg {
  Storage* storage;
  DType dtype;
  const Layout* layout;
};

enum class UnaryOp : std::uint8_t {
  neg, exp, log, sqrt, abs, relu, sigmoid, tanh, gelu, gelu_tanh, silu,
  leaky_relu,  // p0 = negative slope
  pow_scalar,  // p0 = exponent
  clamp,       // p0 = min, p1 = max (NaN = unbounded)
  sign, square, reciprocal, rsqrt,
  add_scalar,  // p0
  mul_scalar,  // p0
};

enum class BinaryOp : std::uint8_t {
  add, sub, mul, div, pow, maximum, minimum,
  eq, ne, lt, le, gt, ge,  // result 1 or 0 in the output dtype
  // Gradients: a = upstream gradient, b = saved input (x) or output (y).
  relu_backward,        // b = x
  sigmoid_backward,     // b = y
  tanh_backward,        // b = y
  gelu_backward,        // b = x
  gelu_tanh_backward,   // b = x
  silu_backward,        // b = x
  leaky_relu_backward,  // b = x, p0 = slope
  clamp_backward,       // b = x, p0 = min, p1 = max: gradient where min <= x <= max
  abs_backward,         // b = x: a * sign(x)
};

enum class ReduceOp : std::uint8_t { sum, mean, max, min, argmax, argmin };

enum class RandomKind : std::uint8_t {
  uniform,    // [a, b)
  normal,     // mean a, std b
  bernoulli,  // 1 with probability a
  randint,    // integers in [a, b)
};

struct GemmArgs {
  TensorArg a, b, c;            // offsets come from the layouts
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // batch strides; 0 = shared
  double alpha = 1.0, beta = 0.0;
};

// Memory and traffic figures of one device, for tests and tuning.
struct DeviceStats {
  std::size_t bytes_in_use = 0;       // held by live tensors (rounded to size classes)
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_reserved = 0;     // device memory blocks held by the allocator
  std::size_t blocks = 0;
  std::uint64_t host_to_device = 0;   // transfers (write calls)
  std::uint64_t device_to_host = 0;   // transfers (read calls)
  std::uint64_t submits = 0;          // command-buffer submissions
};

// Fused optimizer updates, elementwise over one parameter (all operands share
// its shape). Backends may override them with one kernel; the defaults are
// written with the kernels above. `step` counts from 1.
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // momentum buffer not yet initialised: it becomes the gradient
};
struct AdamStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  std::int64_t step = 1;
};

// Geometry of a 2-D convolution window sweep (NCHW), shared by im2col and col2im.
struct Conv2dGeometry {
  std::int64_t batch = 0, channels = 0, height = 0, width = 0;  // input
  std::int64_t kernel_h = 1, kernel_w = 1;
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t out_h = 0, out_w = 0;
};

enum class PoolKind : std::uint8_t {
  max,           // indices receive the argmax as h * W + w within its plane (i64)
  avg,           // fixed windows; divisor per count_include_pad
  adaptive_avg,  // window of output (oh, ow): [floor(oh*H/OH), ceil((oh+1)*H/OH)), likewise for w
};

struct Pool2dParams {
  PoolKind kind = PoolKind::max;
  std::int64_t planes = 0, height = 0, width = 0, out_h = 0, out_w = 0;  // planes = N * C
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;  // max only
  bool count_include_pad = true;               // avg only
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Memory.
  virtual void* allocate(std::size_t nbytes) = 0;
  virtual void deallocate(void* data, std::size_t nbytes) = 0;
  virtual void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) = 0;
  virtual void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) = 0;
  virtual void synchronize() {}

  // Elementwise. Every operand has out's shape (broadcast inputs arrive expanded).
  virtual void fill(TensorArg out, double value) = 0;
  virtual void copy(TensorArg out, TensorArg in) = 0;  // converts dtype
  virtual void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) = 0;
  virtual void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) = 0;
  virtual void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) = 0;
  // out keeps in's rank with 1 in every reduced dim; arg* write i64.
  virtual void reduce(ReduceOp op, TensorArg out, TensorArg in) = 0;
  virtual void gemm(const GemmArgs& args) = 0;
  virtual void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
                      double b) = 0;

  // param -= lr * update, with momentum_buf (ignored when momentum == 0) updated in place.
  virtual void sgd_step(const SgdStep& s, TensorArg param, TensorArg grad, TensorArg momentum_buf);
  // Adam/AdamW with bias correction; m and v updated in place.
  virtual void adam_step(const AdamStep& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v);

  virtual DeviceStats stats() const { return {}; }

  // Convolution lowering. `in` is [N, C, H, W] (any strides); `cols` is
  // [N, C*KH*KW, OH*OW] (any strides; row index c*KH*KW + kh*KW + kw).
  // im2col writes every element of cols (zeros where the window hits padding);
  // col2im overwrites `out` [N, C, H, W] (contiguous) with the sum of the
  // column entries that map onto each pixel.
  virtual void im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) { unsupported("im2col"); }
  virtual void col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) { unsupported("col2im"); }

  // Pooling over planes of a contiguous [planes, H, W] input into a contiguous
  // [planes, OH, OW] output; `indices` (i64, same shape as out) only for max.
  virtual void pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) {
    unsupported("pool2d_forward");
  }
  // Overwrites grad_in [planes, H, W] (contiguous) from grad_out [planes, OH, OW] (contiguous).
  virtual void pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) {
    unsupported("pool2d_backward");
  }

  // Softmax (or log-softmax) along the last dim of contiguous [rows, cols] views.
  virtual void softmax_forward(TensorArg out, TensorArg in, bool log) { unsupported("softmax_forward"); }
  // grad_in from grad_out and the forward output y (all contiguous [rows, cols]):
  // softmax: y * (g - sum(g * y)); log-softmax: g - exp(y) * sum(g).
  virtual void softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) {
    unsupported("softmax_backward");
  }

  // Row gathers and scatters along the middle dim of contiguous 3-D views.
  // src/out: [outer, n, inner] and [outer, m, inner]; index: i64 [1 or outer, m]
  // (one shared index row, or one row per outer slice).
  // index_select: out[o, j, k] = src[o, index[o', j], k].
  // index_add:    out[o, index[o', j], k] += src[o, j, k]  (out is [outer, n, inner]).
  // An index outside [0, n) throws ShapeError naming it; out is then unspecified.
  virtual void index_select(TensorArg out, TensorArg src, TensorArg index) { unsupported("index_select"); }
  virtual void index_add(TensorArg out, TensorArg index, TensorArg src) { unsupported("index_add"); }

 protected:
  [[noreturn]] void unsupported(const char* op) const {
    throw DeviceError(std::string(op) + ": not supported on device " + device().str());
  }
};

// The backend owning `device`; created on first use, alive for the process.
Backend& backend(Device device);

// Waits until every kernel queued on `device` has finished.
void synchronize(Device device);
// Memory and transfer figures of `device` (zeros where a backend keeps none).
DeviceStats device_stats(Device device);

// Registration hook for optional backends (Vulkan).
using BackendFactory = std::unique_ptr<Backend> (*)(int index);
void register_backend(Device::Kind kind, BackendFactory factory);

}  // namespace rumus

RUMUS_API_END
