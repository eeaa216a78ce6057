#pragma once
// The kernel table every device implements, private to the library. Kernels
// know buffers, sizes and strides only: shape rules, broadcasting, index
// checks and error messages live in ops/. Ops reach a kernel through
// detail::kernels() (src/ops/op_util.hpp), which asks supports() first.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kernel_codes.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/core/dtype.hpp"
#include "rumus/core/layout.hpp"
#include "rumus/core/storage.hpp"

namespace rumus {

// A non-owning view of a tensor's buffer for kernels.
struct TensorArg {
  Storage* storage;
  DType dtype;
  const Layout* layout;
};

#define RUMUS_ENUM_ENTRY(name) name,
enum class UnaryOp : std::uint8_t { RUMUS_UNARY_OPS(RUMUS_ENUM_ENTRY) };
enum class BinaryOp : std::uint8_t { RUMUS_BINARY_OPS(RUMUS_ENUM_ENTRY) };
enum class ReduceOp : std::uint8_t { RUMUS_REDUCE_OPS(RUMUS_ENUM_ENTRY) };
enum class RandomKind : std::uint8_t { RUMUS_RANDOM_KINDS(RUMUS_ENUM_ENTRY) };
enum class PoolKind : std::uint8_t { RUMUS_POOL_KINDS(RUMUS_ENUM_ENTRY) };
enum class PointwiseKind : std::uint8_t { RUMUS_POINTWISE_KINDS(RUMUS_ENUM_ENTRY) };
enum class OptimizerKind : std::uint8_t { RUMUS_OPTIMIZER_KINDS(RUMUS_ENUM_ENTRY) };

// The entries of the kernel table, for supports().
#define RUMUS_KERNELS(X)                                                                                  \
  X(fill) X(copy) X(unary) X(binary) X(where) X(reduce) X(gemm) X(random) X(sgd_step) X(adam_step)         \
  X(im2col) X(col2im) X(pool2d_forward) X(pool2d_backward) X(softmax_forward) X(softmax_backward)           \
  X(index_select) X(index_add) X(conv2d_forward) X(conv2d_backward_data) X(conv2d_backward_weight)  \
  X(attention_forward) X(attention_backward) X(layer_norm_forward) X(layer_norm_backward) \
  X(dropout_forward) X(amp_unscale)
enum class Kernel : std::uint8_t { RUMUS_KERNELS(RUMUS_ENUM_ENTRY) };
#undef RUMUS_ENUM_ENTRY

// Names as written in the lists (for messages and test listings).
std::string_view name_of(UnaryOp op);
std::string_view name_of(BinaryOp op);
std::string_view name_of(ReduceOp op);
std::string_view name_of(Kernel kernel);

// Entry counts, for loops over every code.
#define RUMUS_COUNT_ENTRY(name) +1
constexpr int kUnaryOpCount = 0 RUMUS_UNARY_OPS(RUMUS_COUNT_ENTRY);
constexpr int kBinaryOpCount = 0 RUMUS_BINARY_OPS(RUMUS_COUNT_ENTRY);
constexpr int kReduceOpCount = 0 RUMUS_REDUCE_OPS(RUMUS_COUNT_ENTRY);
constexpr int kKernelCount = 0 RUMUS_KERNELS(RUMUS_COUNT_ENTRY);
#undef RUMUS_COUNT_ENTRY

struct GemmArgs {
  TensorArg a, b, c;            // offsets come from the layouts
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // batch strides; 0 = shared
  double alpha = 1.0, beta = 0.0;
  // Optional [n] vector (C's dtype) added to every row of C after the product:
  // linear's bias, in the GEMM's epilogue where the backend has one.
  TensorArg bias{nullptr, DType::f32, nullptr};
};

// Fused optimizer updates, elementwise over one parameter (all operands share
// its shape and are dense). `step` counts from 1. `scalars`, when its storage
// is not null, is a dense f32[4] on the device holding the per-step values
// (SGD: lr, first; Adam: lr, 1 - beta1^step, 1 - beta2^step, first) that a
// device may read at run time instead of the fields, so a captured step
// replays with the values of each replay. The fields hold the same values.
struct SgdKernelArgs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // momentum buffer not yet initialised: it becomes the gradient
  TensorArg scalars{nullptr, DType::f32, nullptr};
};
struct AdamKernelArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: decay the parameter, not the gradient
  std::int64_t step = 1;
  TensorArg scalars{nullptr, DType::f32, nullptr};
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

struct Pool2dParams {
  PoolKind kind = PoolKind::max;
  std::int64_t planes = 0, height = 0, width = 0, out_h = 0, out_w = 0;  // planes = N * C
  std::int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;  // max only
  bool count_include_pad = true;               // avg only
};

// Fused scaled dot-product attention over [batch, heads, L, W] operands:
// q [B, H, lq, d], k [B, H, lk, d], v [B, H, lk, dv], out [B, H, lq, dv] and
// their gradients, each laid out as head_slots() describes (q, k and v alike;
// out and grad_out alike; the three gradients alike), and a contiguous
// lse [B * H, lq] (the row logsumexp of the scaled, masked scores; -inf for
// a row with every key masked). `mask`, when its storage is
// not null, is a 4-D view [batch, heads, lq, lk] (stride 0 on broadcast dims):
// u8 = keep where nonzero, floating = added to the scores. causal keeps
// key j <= query i. With dropout_p > 0, weight e = (bh * lq + i) * lk + j is
// kept when the top 24 bits of word e % 4 of philox(seed, offset + e / 4) are
// >= dropout_threshold(dropout_p) (four weights per draw, as bernoulli), and
// scaled by 1 / (1 - dropout_p); backward regenerates the same mask. An
// integer test, so devices agree exactly.
struct AttentionParams {
  std::int64_t batch = 1, heads = 1, lq = 0, lk = 0, d = 0, dv = 0;
  double scale = 1.0;
  bool causal = false;
  double dropout_p = 0.0;
  std::uint64_t seed = 0, offset = 0;
};

// How an attention operand [B, H, L, W] lies in memory: its heads one after
// another, each [L, W] row-major (0); or its heads side by side along rows
// that lie `slots` head widths apart, as in a [B, L, H, W] tensor (slots = H)
// or in one packed q/k/v projection (slots = 3H), returning slots; -1 for
// any other layout.
std::int64_t head_slots(const Layout& l);

inline std::uint32_t dropout_threshold(double p) {
  const double t = std::ceil(p * 16777216.0);
  return t <= 0 ? 0u : t >= 16777216.0 ? 16777216u : std::uint32_t(t);
}

class Backend : public DeviceBackend {
 public:
  // Whether this device runs `kernel` on operands of `dtype` (the dtype the
  // kernel computes in: the input's for unary/binary/reduce, the data's for
  // gathers, the output's for fill/copy/random).
  virtual bool supports(Kernel kernel, DType dtype) const = 0;

  // Elementwise. Every operand has out's shape (broadcast inputs arrive expanded).
  virtual void fill(TensorArg out, double value) = 0;
  virtual void copy(TensorArg out, TensorArg in) = 0;  // converts dtype
  virtual void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) = 0;
  virtual void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) = 0;
  virtual void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) = 0;
  // out keeps in's rank with 1 in every reduced dim; arg* write i64.
  virtual void reduce(ReduceOp op, TensorArg out, TensorArg in) = 0;
  virtual void gemm(const GemmArgs& args) = 0;
  // `state`, when its storage is not null: a dense 4-element i32 tensor at
  // offset 0 holding (seed lo, seed hi, offset lo, offset hi), which a device
  // may read at run time instead of seed/offset (which hold the same values),
  // so a captured draw takes the numbers each replay writes there.
  virtual void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
                      TensorArg state) = 0;

  // param -= lr * update, with momentum_buf (ignored when momentum == 0) updated in place.
  virtual void sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg momentum_buf) = 0;
  // Adam/AdamW with bias correction; m and v updated in place.
  virtual void adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v) = 0;
  // Optional (supports()): out = grad * inv_scale over dense tensors of one
  // dtype; found_inf (one f32) becomes 1 if any product is inf or NaN, and is
  // otherwise left as it is. Mixed precision's gradient check in one pass.
  virtual void amp_unscale(TensorArg out, TensorArg grad, TensorArg found_inf, double inv_scale) = 0;

  // Convolution lowering. `in` is [N, C, H, W] (any strides); `cols` is
  // [N, C*KH*KW, OH*OW] (any strides; row index c*KH*KW + kh*KW + kw).
  // im2col writes every element of cols (zeros where the window hits padding);
  // col2im overwrites `out` [N, C, H, W] (contiguous) with the sum of the
  // column entries that map onto each pixel.
  virtual void im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in) = 0;
  virtual void col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols) = 0;

  // Direct convolution on dense NCHW operands, for devices with a convolution
  // library of their own; where supports() says no, ops lower the convolution
  // to im2col + GEMM instead. Weights are [OC, C/groups, KH, KW]; a bias or
  // grad_bias whose storage is null is absent. Every output is overwritten.
  // `relu`: the forward writes max(0, convolution + bias) (conv2d_relu).
  virtual void conv2d_forward(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                              TensorArg out, TensorArg in, TensorArg weight, TensorArg bias, bool relu) = 0;
  virtual void conv2d_backward_data(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                                    TensorArg grad_in, TensorArg grad_out, TensorArg weight) = 0;
  virtual void conv2d_backward_weight(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                                      TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                                      TensorArg in) = 0;

  // Pooling over planes of a contiguous [planes, H, W] input into a contiguous
  // [planes, OH, OW] output; `indices` (i64, same shape as out) only for max.
  virtual void pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in) = 0;
  // Overwrites grad_in [planes, H, W] (contiguous) from grad_out [planes, OH, OW] (contiguous).
  virtual void pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices) = 0;

  // Softmax (or log-softmax) along the last dim of contiguous [rows, cols] views.
  virtual void softmax_forward(TensorArg out, TensorArg in, bool log) = 0;
  // grad_in from grad_out and the forward output y (all contiguous [rows, cols]):
  // softmax: y * (g - sum(g * y)); log-softmax: g - exp(y) * sum(g).
  virtual void softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log) = 0;

  // Row gathers and scatters along the middle dim of contiguous 3-D views.
  // src/out: [outer, n, inner] and [outer, m, inner]; index: i64 [1 or outer, m]
  // (one shared index row, or one row per outer slice).
  // index_select: out[o, j, k] = src[o, index[o', j], k].
  // index_add:    out[o, index[o', j], k] += src[o, j, k]  (out is [outer, n, inner]).
  // CPU kernels take indices in range (ops check them first); GPU kernels skip
  // an index outside [0, n) (zeros for index_select), record it, and raise the
  // error at the device's next wait (docs/ARCHITECTURE.md).
  virtual void index_select(TensorArg out, TensorArg src, TensorArg index) = 0;
  virtual void index_add(TensorArg out, TensorArg index, TensorArg src) = 0;

  // Attention (AttentionParams). Forward writes out and lse; backward
  // overwrites grad_q, grad_k, grad_v from grad_out and the forward's
  // operands, recomputing the scores tile by tile (no [lq, lk] buffer).
  virtual void attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k,
                                 TensorArg v, TensorArg mask) = 0;
  virtual void attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                                  TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out,
                                  TensorArg lse, TensorArg mask) = 0;

  // Layer normalisation over the last dim of contiguous [rows, d] views, in
  // one pass per row. Optional: where supports() says no (the default), ops
  // compose it from the elementwise kernels and reductions. A weight, bias,
  // grad_weight or grad_bias ([d]) whose storage is null is absent.
  // Forward: out = (x - mean) * invstd * weight + bias, writing mean and
  // invstd ([rows]) for backward. Backward overwrites grad_x, grad_weight
  // (sum over rows of grad_out * xhat) and grad_bias (sum of grad_out).
  virtual void layer_norm_forward(TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                                  TensorArg bias, double eps);
  virtual void layer_norm_backward(TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                                   TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight);
  // Dropout's forward in one pass over contiguous operands: mask as
  // random(bernoulli, keep, scale, seed, offset) draws it, and out = in * mask.
  // Optional, as layer norm's.
  virtual void dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed, std::uint64_t offset,
                               double keep, double scale);
};

// The kernel table of `device`'s backend (every built-in provider makes a Backend).
inline Backend& backend(Device device) { return static_cast<Backend&>(device_backend(device)); }

// C = alpha * op(A) op(B) + beta * C + bias for a backend without a bias
// epilogue: the bias is copied into C and the product added with beta = 1
// (beta = 0), or added after the product (otherwise).
void gemm_bias_by_copy(Backend& be, const GemmArgs& g);

}  // namespace rumus

