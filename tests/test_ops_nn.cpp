// The CNN/transformer ops: error cases, semantics, and values at the CNN's real
// shapes (batch 64, 28x28) against naive reference loops.
#include <gtest/gtest.h>

#include "devices.hpp"
#include "expect_error.hpp"

#include <cmath>
#include <limits>
#include <random>

#include <rumus/rumus.hpp>


using namespace rumus;
using rumus::testing::expect_error;

namespace {


Tensor i64(std::vector<std::int64_t> v, Shape s = {}) {
  if (s.empty()) s = {std::int64_t(v.size())};
  return tensor(v, s);
}

// ---- errors ----

TEST(NnErrors, Conv2d) {
  expect_error<ShapeError>([] { conv2d(zeros({3, 28, 28}), zeros({32, 3, 3, 3})); },
                           "conv2d: expected input of 4 dims [N, C, H, W], got [3, 28, 28]");
  expect_error<ShapeError>([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3})); },
                           "conv2d: expected weight of 4 dims [OC, C/groups, KH, KW], got [4, 3, 3]");
  expect_error<ShapeError>([] { conv2d(zeros({1, 1, 8, 8}), zeros({32, 2, 3, 3})); },
                           "conv2d: weight [32, 2, 3, 3] expects 2 input channels");
  expect_error<ShapeError>([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 1, 3, 3}), {}, {.groups = 3}); },
                           "must both be divisible by groups 3");
  expect_error<ShapeError>([] { conv2d(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), zeros({5})); },
                           "conv2d: expected bias of shape [4], got [5]");
  expect_error<ShapeError>([] { conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})); },
                           "conv2d: input 2x2 (padded 2x2) is smaller than the kernel 3x3");
  expect_error<ShapeError>([] { conv2d(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}), {}, {.stride = {0, 1}}); },
                           "conv2d: expected stride >= 1, got [0, 1]");
  expect_error<ShapeError>([] { conv2d(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}), {}, {.padding = {-1, 0}}); },
                           "conv2d: expected padding >= 0");
  expect_error<DTypeError>([] { conv2d(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}, {.dtype = DType::f64})); },
                           "conv2d: weight dtype f64 differs from input dtype f32");
  expect_error<DTypeError>([] { conv2d(zeros({1, 1, 5, 5}, {.dtype = DType::i64}), zeros({1, 1, 3, 3})); },
                           "conv2d: expected a floating-point tensor, got i64");
  expect_error<ShapeError>([] { im2col(zeros({2, 3}), {2, 2}); }, "im2col: expected input of 4 dims");
  expect_error<ShapeError>([] { col2im(zeros({1, 4, 5}), {3, 3}, {2, 2}); }, "col2im: expected 4 blocks (2x2)");
  expect_error<ShapeError>([] { col2im(zeros({1, 5, 4}), {3, 3}, {2, 2}); }, "not a multiple of the kernel size");
}

TEST(NnErrors, LinearAndBias) {
  expect_error<ShapeError>([] { linear(zeros({4, 9216}), zeros({128, 9000})); },
                           "linear: input [4, 9216] does not end in the weight's in_features 9000");
  expect_error<ShapeError>([] { linear(zeros({4, 3}), zeros({2, 3}), zeros({3})); },
                           "linear: expected bias of shape [2], got [3]");
  expect_error<ShapeError>([] { linear(zeros({4, 3}), zeros({3})); }, "linear: expected weight of 2 dims");
  expect_error<ShapeError>([] { add_channel_bias(zeros({2, 3, 4}), zeros({4})); },
                           "add_channel_bias: expected bias of shape [3]");
}

TEST(NnErrors, Pooling) {
  expect_error<ShapeError>([] { max_pool2d(zeros({28, 28}), 2); },
                           "max_pool2d: expected input of 4 dims [N, C, H, W] or 3 dims [C, H, W], got [28, 28]");
  expect_error<ShapeError>([] { max_pool2d(zeros({1, 1, 4, 4}), {.kernel = {2, 2}, .padding = {2, 0}}); },
                           "max_pool2d: padding [2, 0] must be between 0 and half the kernel size");
  expect_error<ShapeError>([] { avg_pool2d(zeros({1, 1, 1, 1}), 2); }, "avg_pool2d: input 1x1");
  expect_error<ShapeError>([] { max_pool2d(zeros({1, 1, 4, 4}), 0); }, "max_pool2d: expected a kernel of at least 1x1");
  expect_error<ShapeError>([] { adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}); },
                           "adaptive_avg_pool2d: expected an output size of at least 1x1, got 0x2");
}

TEST(NnErrors, Normalization) {
  expect_error<ShapeError>([] { batch_norm2d(zeros({4, 3}), {}, {}, {}, {}, true); },
                           "batch_norm2d: expected input of 4 dims [N, C, H, W], got [4, 3]");
  expect_error<ShapeError>([] { batch_norm2d(zeros({2, 3, 4, 4}), {}, {}, ones({4}), {}, true); },
                           "batch_norm2d: expected weight of shape [3], got [4]");
  expect_error<Error>([] { batch_norm2d(zeros({2, 3, 4, 4}), {}, {}, {}, {}, false); },
                      "batch_norm2d: evaluation mode needs running_mean and running_var");
  expect_error<ShapeError>([] { batch_norm2d(zeros({1, 3, 1, 1}), {}, {}, {}, {}, true); },
                           "expected more than 1 value per channel in training");
  expect_error<ShapeError>([] { layer_norm(zeros({2, 3, 4}), {3}); },
                           "layer_norm: input [2, 3, 4] does not end in normalized_shape [3]");
  expect_error<ShapeError>([] { layer_norm(zeros({2, 4}), {4}, ones({5})); },
                           "layer_norm: expected weight of shape [4], got [5]");
}

TEST(NnErrors, SoftmaxAndLosses) {
  expect_error<ShapeError>([] { softmax(zeros({2, 3}), 2); }, "softmax: dim 2 out of range");
  expect_error<DTypeError>([] { log_softmax(zeros({2}, {.dtype = DType::i32}), 0); }, "log_softmax: expected a floating");
  expect_error<DTypeError>([] { cross_entropy(zeros({2, 3}), zeros({2})); },
                           "cross_entropy: expected integer class indices as target (i64), got f32");
  expect_error<ShapeError>([] { cross_entropy(zeros({4, 10}), i64({1, 2, 3})); },
                           "cross_entropy: expected target of shape [4] for input [4, 10], got [3]");
  expect_error<ShapeError>([] { cross_entropy(zeros({2, 10}), i64({1, 10})); },
                           "cross_entropy: target index 10 is out of range for a dim of size 10");
  expect_error<ShapeError>([] { nll_loss(zeros({2, 3}), i64({-1, 0})); }, "nll_loss: target index -1 is out of range");
  expect_error<Error>([] { cross_entropy(zeros({2, 3}), i64({0, 1}), {.label_smoothing = 1.5}); },
                      "cross_entropy: expected label_smoothing in [0, 1], got 1.5");
  expect_error<ShapeError>([] { binary_cross_entropy_with_logits(zeros({2, 3}), zeros({3, 2})); },
                           "binary_cross_entropy_with_logits: input shape [2, 3] differs from target shape [3, 2]");
}

TEST(NnErrors, EmbeddingDropoutJoin) {
  expect_error<ShapeError>([] { embedding(i64({0, 7}), zeros({5, 3})); },
                           "embedding: index 7 is out of range for a dim of size 5");
  expect_error<DTypeError>([] { embedding(zeros({2}), zeros({5, 3})); },
                           "embedding: expected integer indices (i64 or i32), got f32");
  expect_error<ShapeError>([] { embedding(i64({0}), zeros({5})); }, "embedding: expected weight of 2 dims");
  expect_error<ShapeError>([] { embedding(i64({0}), zeros({5, 3}), 5); },
                           "embedding: padding_idx 5 is out of range for 5 embeddings");
  expect_error<Error>([] { dropout(zeros({2}), 1.5, true); }, "dropout: expected 0 <= p <= 1, got 1.5");
  expect_error<ShapeError>([] { cat({zeros({2, 3}), zeros({2, 4})}, 0); },
                           "cat: expected tensor 1 to match [2, 3] in every dim but 0, got [2, 4]");
  expect_error<Error>([] { cat({}, 0); }, "cat: expected a non-empty list");
  expect_error<ShapeError>([] { cat({zeros({2, 3})}, 2); }, "cat: dim 2 out of range");
  expect_error<ShapeError>([] { stack({zeros({2, 3}), zeros({3, 2})}); },
                           "stack: expected every tensor to have shape [2, 3], got [3, 2] at index 1");
}

TEST(NnErrors, GatherScatterAdd) {
  expect_error<DTypeError>([] { gather(zeros({2, 3}), 1, zeros({2, 1}, {.dtype = DType::i32})); },
                           "gather: expected an i64 index, got i32");
  expect_error<ShapeError>([] { gather(zeros({2, 3}), 1, i64({0, 1})); },
                           "gather: expected an index of 2 dims as input [2, 3], got [2]");
  expect_error<ShapeError>([] { gather(zeros({2, 3}), 1, i64({0, 0, 0}, {3, 1})); },
                           "gather: index [3, 1] is larger than input [2, 3] in dim 0");
  expect_error<ShapeError>([] { gather(zeros({2, 3}), 2, i64({0, 0}, {2, 1})); }, "gather: dim 2 out of range");
  expect_error<ShapeError>([] { gather(zeros({2, 3}), 1, i64({0, 3}, {2, 1})); },
                           "gather: index 3 is out of range for a dim of size 3");
  expect_error<DTypeError>([] { scatter_add(zeros({2, 3}), 1, i64({0, 0}, {2, 1}), zeros({2, 1}, {.dtype = DType::f64})); },
                           "scatter_add: expected src of self's dtype f32, got f64");
  expect_error<ShapeError>([] { scatter_add(zeros({2, 3}), 1, i64({0, 0, 0, 0}, {2, 2}), zeros({2, 1})); },
                           "scatter_add: index [2, 2] is larger than src [2, 1] in dim 1");
  expect_error<ShapeError>([] { scatter_add(zeros({2, 3}), 0, i64({0, 0, 0, 0}, {1, 4}), zeros({2, 4})); },
                           "scatter_add: index [1, 4] is larger than self [2, 3] in dim 1");
  expect_error<ShapeError>([] { scatter_add(zeros({2, 3}), 0, i64({-1, 0}, {1, 2}), zeros({1, 2})); },
                           "scatter_add: index -1 is out of range for a dim of size 2");
}

// PyTorch's own examples: torch.gather's doc table, scatter_add on integers, 0-d operands.
TEST(Indexing, GatherAndScatterAddValues) {
  Tensor t = tensor({{1.0, 2.0}, {3.0, 4.0}});
  EXPECT_EQ(gather(t, 1, i64({0, 0, 1, 0}, {2, 2})).to_vector<float>(), (std::vector<float>{1, 1, 4, 3}));
  Tensor counts = scatter_add(zeros({4}, {.dtype = DType::i64}), 0, i64({1, 3, 1, 1}), ones({4}, {.dtype = DType::i64}));
  EXPECT_EQ(counts.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 3, 0, 1}));
  Tensor s = scatter_add(full({}, 2.0), 0, i64({0}, {}), full({}, 5.0));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 7.0f);
  EXPECT_EQ(gather(full({}, 3.0), -1, i64({0}, {})).item<float>(), 3.0f);
  EXPECT_EQ(gather(zeros({2, 0}), 1, zeros({2, 0}, {.dtype = DType::i64})).shape(), (Shape{2, 0}));
}

// What the CPU lacks is named by the op, not by a kernel deep inside.
TEST(NnErrors, MissingKernelsNameTheOp) {
  const TensorOptions half{.dtype = DType::f16};
  expect_error<DeviceError>(
      [&] { scaled_dot_product_attention(ones({1, 2, 4}, half), ones({1, 2, 4}, half), ones({1, 2, 4}, half)); },
      "scaled_dot_product_attention: device cpu has no attention_forward kernel for f16 tensors");
}

// ---- semantics ----

TEST(NnSemantics, DropoutTrainEvalAndFreshMasks) {
  Tensor x = ones({1000});
  EXPECT_EQ(dropout(x, 0.5, false).storage_ptr(), x.storage_ptr());  // eval: identity
  EXPECT_EQ(dropout(x, 0.0, true).storage_ptr(), x.storage_ptr());   // p = 0: identity
  EXPECT_EQ(sum(dropout(x, 1.0, true)).item(), 0.0);
  Generator gen(3);
  std::vector<float> a = dropout(x, 0.25, true, &gen).to_vector<float>();
  std::vector<float> b = dropout(x, 0.25, true, &gen).to_vector<float>();
  EXPECT_NE(a, b);  // a fresh mask every call
  int kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6f) << v;
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 1000.0, 0.75, 0.05);
  Generator again(3);
  EXPECT_EQ(dropout(x, 0.25, true, &again).to_vector<float>(), a);  // seedable
  // The gradient uses the same mask as the forward.
  Tensor w = ones({1000}).requires_grad_();
  Tensor y = dropout(w, 0.25, true, &gen);
  GradientStore g = backward(sum(y));
  EXPECT_EQ(g.at(w).to_vector<float>(), y.to_vector<float>());
}

TEST(NnSemantics, BernoulliFastPathDrawsTheSameMask) {
  // f32 masks take a vectorised path; it must match the generic one draw for draw.
  for (double p : {0.0, 0.3, 0.75, 1.0}) {
    Generator g32(11), g64(11);
    std::vector<float> a = bernoulli({70000}, p, {}, &g32).to_vector<float>();
    std::vector<float> b = bernoulli({70000}, p, {.dtype = DType::f64}, &g64).to_vector<float>();
    EXPECT_EQ(a, b) << p;
  }
}

TEST(NnSemantics, DropoutMaskIsTheBernoulliStreamScaled) {
  // One pass draws the scaled mask: kept elements are exactly x / (1 - p),
  // and the draws are bernoulli's (four elements per Philox draw, odd tail included).
  const std::int64_t n = 16384 + 7;
  for (double p : {0.25, 0.5, 1.0}) {
    Generator gd(5), gb(5);
    Tensor x = add(arange(double(n)), 1.0);
    std::vector<float> out = dropout(x, p, true, &gd).to_vector<float>();
    std::vector<float> keep = bernoulli({n}, 1.0 - p, {}, &gb).to_vector<float>();
    std::vector<float> xs = x.to_vector<float>();
    const float scale = p == 1.0 ? 0.0f : float(1.0 / (1.0 - p));
    std::int64_t kept = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], keep[i] == 1.0f ? xs[i] * scale : 0.0f) << "p " << p << " element " << i;
      kept += keep[i] == 1.0f;
    }
    EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.02) << p;
  }
}

TEST(NnSemantics, BatchNormRunningStatistics) {
  Tensor x = tensor({1.0, 2.0, 3.0, 6.0, -1.0, 0.0, 1.0, 4.0}).reshape({2, 2, 2, 1});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor y = batch_norm2d(x, rm, rv, {}, {}, true, 0.1);
  // Channel 0 holds {1, 2, -1, 0}: mean 0.5, biased var 1.25, unbiased 5/3.
  auto m = rm.to_vector<float>(), v = rv.to_vector<float>();
  EXPECT_NEAR(m[0], 0.05, 1e-6);
  EXPECT_NEAR(v[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(y.to_vector<float>()[0], (1.0 - 0.5) / std::sqrt(1.25 + 1e-5), 1e-5);
  // Eval uses the running statistics.
  Tensor e = batch_norm2d(x, rm, rv, tensor({2.0, 1.0}), tensor({0.5, 0.0}), false);
  EXPECT_NEAR(e.to_vector<float>()[0], (1.0 - m[0]) / std::sqrt(v[0] + 1e-5) * 2.0 + 0.5, 1e-5);
  EXPECT_EQ(rm.to_vector<float>(), m);  // eval leaves them alone
}

TEST(NnSemantics, CrossEntropyIgnoreAndSmoothing) {
  Tensor logits = tensor({{1.0, 2.0, 3.0}, {1.0, 1.0, 1.0}});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(cross_entropy(logits, i64({2, -100})).item(), lse0 - 3.0, 1e-6);  // mean over the kept row
  EXPECT_NEAR(cross_entropy(logits, i64({2, 0}), {.reduction = Reduction::sum}).item(),
              lse0 - 3.0 + std::log(3.0), 1e-5);
  EXPECT_TRUE(std::isnan(cross_entropy(logits, i64({-100, -100})).item()));  // as PyTorch: 0 / 0
  const double eps = 0.3;
  double smooth = (1 - eps) * (lse0 - 3.0) + eps / 3.0 * (3 * lse0 - 6.0);
  EXPECT_NEAR(cross_entropy(logits.slice(0, 0, 1), i64({2}), {.label_smoothing = eps}).item(), smooth, 1e-5);
  // An unbatched [C] input takes a 0-d target, as in PyTorch.
  Tensor one = cross_entropy(logits.select(0, 0), tensor(std::vector<std::int64_t>{2}, Shape{}));
  EXPECT_EQ(one.shape(), Shape{});
  EXPECT_NEAR(one.item(), lse0 - 3.0, 1e-6);
  Tensor none = cross_entropy(logits, i64({2, 1}), {.reduction = Reduction::none, .ignore_index = 1});
  EXPECT_EQ(none.shape(), (Shape{2}));
  EXPECT_EQ(none.to_vector<float>()[1], 0.0f);
}

TEST(NnSemantics, EmbeddingPaddingRowGetsNoGradient) {
  Tensor w = arange(12).reshape({4, 3}).requires_grad_();
  Tensor idx = i64({3, 1, 3, 0}, {2, 2});
  Tensor y = embedding(idx, w, 1);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.to_vector<float>()[3], 3.0f);  // the padding row still reads its values
  std::vector<float> g = backward(sum(y)).at(w).to_vector<float>();
  EXPECT_EQ(g, (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2}));
}

TEST(NnSemantics, CatStackAndCasts) {
  Tensor a = tensor({{1.0, 2.0}, {3.0, 4.0}}), b = tensor({{5.0, 6.0}});
  EXPECT_EQ(cat({a, b}).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(stack({a, a}, 2).shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(stack({a, a}, 2).to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(cat({a, b.to(DType::f64)}).dtype(), DType::f64);
  // Casts between float types are differentiable both ways.
  for (DType dt : {DType::f16, DType::bf16, DType::f64}) {
    Tensor x = tensor({0.5, -2.0, 3.0}).requires_grad_();
    Tensor y = mul(x.to(dt), 2.0).to(DType::f32);
    EXPECT_EQ(backward(sum(y)).at(x).to_vector<float>(), (std::vector<float>{2, 2, 2})) << dtype_name(dt);
  }
}

// A linear layer with no input features gives its bias in every row (as
// PyTorch's), and its gradients flow back to the bias alone.
TEST(NnSemantics, LinearWithoutInputFeaturesGivesTheBias) {
  Tensor x = zeros({2, 3, 0}).requires_grad_(), w = zeros({4, 0}).requires_grad_();
  Tensor b = tensor({1.0f, -2.0f, 3.0f, 0.5f}).requires_grad_();
  Tensor y = linear(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.reshape({6, 4}).select(0, 5).to_vector<float>(), b.to_vector<float>());
  GradientStore g = backward(y.sum());
  EXPECT_EQ(g.get(b).to_vector<float>(), std::vector<float>(4, 6.0f));
  EXPECT_EQ(g.get(x).shape(), x.shape());
  EXPECT_EQ(g.get(w).shape(), w.shape());
}

TEST(NnSemantics, SoftmaxIsStable) {
  Tensor x = tensor({1000.0, 1001.0, -1000.0});
  std::vector<float> s = softmax(x, 0).to_vector<float>();
  EXPECT_NEAR(s[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(s[2], 0.0f);
  std::vector<float> l = log_softmax(x, 0).to_vector<float>();
  EXPECT_NEAR(l[2], -2001.0 - std::log1p(std::exp(-1.0)), 1e-2);
  EXPECT_TRUE(std::isfinite(l[2]));
}

// ---- the CNN's real shapes ----

std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  std::mt19937 rng{std::uint32_t(seed)};
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Tensor random_tensor(const Shape& s, std::uint64_t seed) {
  return tensor(random_vector(std::size_t(numel_of(s)), seed), s);
}

// Naive conv at a sample of positions; `x` [N, C, H, W], `w` [OC, C, 3, 3], stride 1, no padding.
void check_conv_real_shape(std::int64_t n, std::int64_t c, std::int64_t hw, std::int64_t oc) {
  Tensor x = random_tensor({n, c, hw, hw}, 1).requires_grad_();
  Tensor w = mul(random_tensor({oc, c, 3, 3}, 2), 0.3).requires_grad_();
  Tensor b = random_tensor({oc}, 3).requires_grad_();
  Tensor y = conv2d(x, w, b);
  const std::int64_t o = hw - 2;
  ASSERT_EQ(y.shape(), (Shape{n, oc, o, o}));
  Tensor gy = random_tensor(y.shape(), 4);
  GradientStore grads = backward(sum(mul(y, gy)));
  auto X = x.to_vector<float>(), W = w.to_vector<float>(), B = b.to_vector<float>(), Y = y.to_vector<float>(),
       G = gy.to_vector<float>(), GX = grads.at(x).to_vector<float>(), GW = grads.at(w).to_vector<float>(),
       GB = grads.at(b).to_vector<float>();
  auto xi = [&](auto i, auto ch, auto h, auto v) { return X[((i * c + ch) * hw + h) * hw + v]; };
  auto wi = [&](auto f, auto ch, auto kh, auto kw) { return W[((f * c + ch) * 3 + kh) * 3 + kw]; };
  auto gi = [&](auto i, auto f, auto h, auto v) { return G[((i * oc + f) * o + h) * o + v]; };
  std::mt19937 rng(5);
  for (int t = 0; t < 300; ++t) {  // forward
    std::int64_t i = rng() % n, f = rng() % oc, h = rng() % o, v = rng() % o;
    double ref = B[f];
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) ref += double(xi(i, ch, h + kh, v + kw)) * wi(f, ch, kh, kw);
    ASSERT_NEAR(Y[((i * oc + f) * o + h) * o + v], ref, 1e-4 * (1 + std::abs(ref)));
  }
  for (int t = 0; t < 40; ++t) {  // weight gradient
    std::int64_t f = rng() % oc, ch = rng() % c, kh = rng() % 3, kw = rng() % 3;
    double ref = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t h = 0; h < o; ++h)
        for (std::int64_t v = 0; v < o; ++v) ref += double(gi(i, f, h, v)) * xi(i, ch, h + kh, v + kw);
    ASSERT_NEAR(GW[((f * c + ch) * 3 + kh) * 3 + kw], ref, 1e-3 * (1 + std::abs(ref)));
  }
  for (int t = 0; t < 200; ++t) {  // input gradient, borders included
    std::int64_t i = rng() % n, ch = rng() % c, h = rng() % hw, v = t < 4 ? (t % 2) * (hw - 1) : rng() % hw;
    double ref = 0;
    for (std::int64_t f = 0; f < oc; ++f)
      for (int kh = 0; kh < 3; ++kh)
        for (int kw = 0; kw < 3; ++kw) {
          std::int64_t oh = h - kh, ow = v - kw;
          if (oh >= 0 && oh < o && ow >= 0 && ow < o) ref += double(gi(i, f, oh, ow)) * wi(f, ch, kh, kw);
        }
    ASSERT_NEAR(GX[((i * c + ch) * hw + h) * hw + v], ref, 1e-4 * (1 + std::abs(ref)));
  }
  double gb0 = 0;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t h = 0; h < o * o; ++h) gb0 += G[(i * oc) * o * o + h];
  EXPECT_NEAR(GB[0], gb0, 1e-3 * (1 + std::abs(gb0)));
}

TEST(NnRealShapes, Conv2dFirstLayer) { check_conv_real_shape(64, 1, 28, 32); }
TEST(NnRealShapes, Conv2dSecondLayer) { check_conv_real_shape(64, 32, 26, 64); }

// f32 convolutions run on the CPU's convolution library; f64 ones are lowered to
// im2col + GEMM. Both must agree, forward and backward, over strides, padding,
// dilation, groups, sizes the stride does not divide, and strided inputs.
struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
  bool bias, transposed_input;
};

TEST(NnConv2d, LibraryKernelsAgreeWithLowering) {
  const std::vector<ConvCase> cases{
      {{2, 3, 5, 6}, {4, 3, 3, 2}, {}, true, false},
      {{2, 2, 7, 6}, {3, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}}, false, false},
      {{2, 4, 5, 5}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, true, false},
      {{1, 3, 4, 4}, {3, 1, 2, 2}, {.stride = {2, 2}, .groups = 3}, false, false},
      {{3, 5, 9, 8}, {7, 5, 3, 3}, {.stride = {2, 3}, .padding = {1, 0}}, true, true},
      {{4, 32, 12, 12}, {16, 32, 3, 3}, {.padding = {1, 1}}, true, true}};
  std::uint64_t seed = 20;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Tensor x64 = random_tensor(c.x, ++seed).to(DType::f64), w64 = random_tensor(c.w, ++seed).to(DType::f64);
    Tensor b64 = c.bias ? random_tensor({c.w[0]}, ++seed).to(DType::f64) : Tensor();
    if (c.transposed_input) x64 = x64.transpose(2, 3).contiguous().transpose(2, 3);  // same values, strided
    auto run = [&](DType dt) {
      Tensor x = x64.to(dt).requires_grad_(), w = w64.to(dt).requires_grad_();
      Tensor b = c.bias ? b64.to(dt).requires_grad_() : Tensor();
      if (c.transposed_input) {
        x = x64.transpose(2, 3).contiguous().to(dt).transpose(2, 3).detach().requires_grad_();
        EXPECT_FALSE(x.is_contiguous());
      }
      Tensor y = conv2d(x, w, b, c.o);
      Tensor gy = random_tensor(y.shape(), 99).to(dt);
      GradientStore g = backward(sum(mul(y, gy)));
      std::vector<Tensor> r{y, g.at(x), g.at(w)};
      if (c.bias) r.push_back(g.at(b));
      for (Tensor& t : r) t = t.to(DType::f64);
      return r;
    };
    const std::vector<Tensor> lib = run(DType::f32), lowered = run(DType::f64);
    ASSERT_EQ(lib.size(), lowered.size());
    for (std::size_t i = 0; i < lib.size(); ++i) {
      ASSERT_EQ(lib[i].shape(), lowered[i].shape()) << "output " << i;
      const double err = max(abs(sub(lib[i], lowered[i]))).item();
      const double scale = 1 + max(abs(lowered[i])).item();
      EXPECT_LT(err, 1e-4 * scale) << "output " << i;
    }
  }
}

// The CPU keeps inputs it has reordered for its convolution kernels and reuses
// them for the next pass over the same bytes; every pass must still see the
// tensor it is given: after another forward, after an in-place update, and
// for a new tensor that takes a freed tensor's memory.
TEST(NnConv2d, ReusedReordersFollowTheirTensors) {
  const Shape xs{4, 32, 12, 12}, ws{16, 32, 3, 3};
  auto reference = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return conv2d(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64), {.padding = {1, 1}});
  };
  auto expect_close = [](const Tensor& got, const Tensor& want, const char* what) {
    const double err = max(abs(sub(got.to(DType::f64), want))).item();
    EXPECT_LT(err, 1e-4 * (1 + max(abs(want)).item())) << what;
  };
  Tensor x1 = random_tensor(xs, 31).requires_grad_(), x2 = random_tensor(xs, 32).requires_grad_();
  Tensor w = random_tensor(ws, 33).requires_grad_(), b = random_tensor({16}, 34).requires_grad_();
  Tensor y1 = conv2d(x1, w, b, {.padding = {1, 1}});
  Tensor y2 = conv2d(x2, w, b, {.padding = {1, 1}});  // a second forward before the first backward
  Tensor gy = random_tensor(y1.shape(), 35);
  GradientStore g1 = backward(sum(mul(y1, gy)));
  Tensor x1r = x1.detach().to(DType::f64).requires_grad_(), wr = w.detach().to(DType::f64).requires_grad_();
  GradientStore r1 = backward(sum(mul(conv2d(x1r, wr, b.detach().to(DType::f64), {.padding = {1, 1}}),
                                      gy.to(DType::f64))));
  expect_close(g1.at(w), r1.at(wr), "weight gradient of the first forward");
  expect_close(g1.at(x1), r1.at(x1r), "input gradient of the first forward");
  expect_close(y2, reference(x2, w, b), "second forward");

  NoGradGuard no_grad;
  w.mul_(-0.5);  // in place: the next forward must not use the weights reordered before
  expect_close(conv2d(x1, w, b, {.padding = {1, 1}}), reference(x1, w, b), "forward after an in-place update");
  x1.add_(1.0);
  expect_close(conv2d(x1, w, b, {.padding = {1, 1}}), reference(x1, w, b), "forward after an in-place input update");
  for (std::uint64_t seed = 40; seed < 43; ++seed) {
    // Each input is freed before the next is made, which can then take its memory.
    Tensor x = random_tensor(xs, seed);
    expect_close(conv2d(x, w, b, {.padding = {1, 1}}), reference(x, w, b), "forward of a new tensor");
  }
}

// A convolution reading another's output takes the blocked copy the first one
// kept where it is still that tensor: not when the output is its own (same
// shapes, same kernel plan), nor after an in-place update.
TEST(NnConv2d, ChainedConvolutionsReadTheirInputs) {
  auto f64 = [](const Tensor& t) { return t.detach().to(DType::f64).requires_grad_(); };
  auto expect_close = [](const Tensor& got, const Tensor& want, const char* what) {
    const double err = max(abs(sub(got.to(DType::f64), want))).item();
    EXPECT_LT(err, 1e-4 * (1 + max(abs(want)).item())) << what;
  };
  const Conv2dOptions pad{.padding = {1, 1}};
  Tensor x = random_tensor({4, 16, 10, 10}, 90).requires_grad_();
  Tensor w1 = random_tensor({16, 16, 3, 3}, 91).requires_grad_(), b1 = random_tensor({16}, 92).requires_grad_();
  Tensor w2 = random_tensor({16, 16, 3, 3}, 93).requires_grad_(), b2 = random_tensor({16}, 94).requires_grad_();
  Tensor w3 = random_tensor({32, 16, 3, 3}, 95).requires_grad_();
  Tensor y1 = conv2d_relu(x, w1, b1, pad);
  Tensor y2 = conv2d_relu(y1, w2, b2, pad);  // same shapes as the first: reads what that one writes
  Tensor y3 = conv2d(y2, w3);                // reads the second's output
  Tensor gy = random_tensor(y3.shape(), 96);
  GradientStore g = backward(sum(mul(y3, gy)));
  Tensor xr = f64(x), w1r = f64(w1), b1r = f64(b1), w2r = f64(w2), b2r = f64(b2), w3r = f64(w3);
  Tensor y1r = conv2d_relu(xr, w1r, b1r, pad), y2r = conv2d_relu(y1r, w2r, b2r, pad), y3r = conv2d(y2r, w3r);
  GradientStore gr = backward(sum(mul(y3r, gy.to(DType::f64))));
  expect_close(y2, y2r, "second output");
  expect_close(y3, y3r, "third output");
  expect_close(g.at(x), gr.at(xr), "input gradient");
  expect_close(g.at(w1), gr.at(w1r), "first weight gradient");
  expect_close(g.at(w2), gr.at(w2r), "second weight gradient");
  expect_close(g.at(w3), gr.at(w3r), "third weight gradient");
  NoGradGuard no_grad;
  y2.mul_(-1.0);  // in place: the copy of y2 the second convolution kept is stale
  expect_close(conv2d(y2, w3), conv2d(y2.to(DType::f64), w3r.detach()), "after an in-place update");
}

// conv2d_relu and linear_relu against relu() of the unfused op, in f32 (the
// CPU fuses the convolution's ReLU into oneDNN's kernel), forward and every
// gradient, on dense and strided inputs and at the CNN's second layer.
TEST(NnFusedRelu, AgreesWithTheComposition) {
  struct Case {
    Shape x, w;
    Conv2dOptions o;
    bool bias, strided;
  };
  const std::vector<Case> cases{{{2, 3, 5, 6}, {4, 3, 3, 2}, {}, true, false},
                                {{2, 4, 7, 6}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}, false, true},
                                {{8, 32, 26, 26}, {64, 32, 3, 3}, {}, true, false}};
  std::uint64_t seed = 60;
  auto compare = [](const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      const double err = max(abs(sub(got[i], want[i]))).item();
      EXPECT_LT(err, 1e-5 * (1 + max(abs(want[i])).item())) << "output " << i;
    }
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Tensor x = random_tensor(c.x, ++seed), w = random_tensor(c.w, ++seed);
    if (c.strided) x = x.transpose(2, 3).contiguous().transpose(2, 3);
    Tensor b = c.bias ? random_tensor({c.w[0]}, ++seed) : Tensor();
    auto run = [&](bool fused) {
      Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_();
      Tensor br = c.bias ? b.detach().requires_grad_() : Tensor();
      Tensor y = fused ? conv2d_relu(xr, wr, br, c.o) : relu(conv2d(xr, wr, br, c.o));
      GradientStore g = backward(sum(mul(y, random_tensor(y.shape(), 99))));
      std::vector<Tensor> r{y, g.at(xr), g.at(wr)};
      if (c.bias) r.push_back(g.at(br));
      return r;
    };
    compare(run(true), run(false));
  }
  Tensor x = random_tensor({6, 4, 20}, 70).transpose(1, 2), w = random_tensor({16, 4}, 71), b = random_tensor({16}, 72);
  auto run = [&](bool fused) {
    Tensor xr = x.detach().requires_grad_(), wr = w.detach().requires_grad_(), br = b.detach().requires_grad_();
    Tensor y = fused ? linear_relu(xr, wr, br) : relu(linear(xr, wr, br));
    GradientStore g = backward(sum(mul(y, random_tensor(y.shape(), 73))));
    return std::vector<Tensor>{y, g.at(xr), g.at(wr), g.at(br)};
  };
  compare(run(true), run(false));
}

TEST(NnFusedRelu, ErrorsNameTheFusedOp) {
  expect_error<ShapeError>([] { conv2d_relu(zeros({3, 28, 28}), zeros({32, 3, 3, 3})); },
                           "conv2d_relu: expected input of 4 dims [N, C, H, W], got [3, 28, 28]");
  expect_error<ShapeError>([] { conv2d_relu(zeros({1, 3, 8, 8}), zeros({4, 3, 3, 3}), zeros({5})); },
                           "conv2d_relu: expected bias of shape [4], got [5]");
  expect_error<ShapeError>([] { conv2d_relu(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}), {}, {.stride = {0, 1}}); },
                           "conv2d_relu: expected stride >= 1, got [0, 1]");
  expect_error<DTypeError>([] { conv2d_relu(zeros({1, 1, 5, 5}), zeros({1, 1, 3, 3}, {.dtype = DType::f64})); },
                           "conv2d_relu: weight dtype f64 differs from input dtype f32");
  expect_error<ShapeError>([] { linear_relu(zeros({4, 5}), zeros({3, 6})); },
                           "linear_relu: input [4, 5] does not end in the weight's in_features 6 (weight [3, 6])");
  expect_error<ShapeError>([] { linear_relu(zeros({4, 5}), zeros({3, 5}), zeros({4})); },
                           "linear_relu: expected bias of shape [3], got [4]");
}

// layer_norm runs as one CPU kernel each way; its values and gradients
// against the formula written with plain ops, over enough rows that the
// weight and bias gradients are summed in several blocks.
TEST(NnLayerNorm, CpuKernelMatchesTheFormulaOnManyRows) {
  manual_seed(4);
  const std::int64_t rows = 1000, d = 37;
  Tensor x0 = randn({10, rows / 10, d}, {.dtype = DType::f64}) * 3.0 + 1.5;
  Tensor w0 = randn({d}, {.dtype = DType::f64}), b0 = randn({d}, {.dtype = DType::f64});
  Tensor seed = randn({10, rows / 10, d}, {.dtype = DType::f64});
  for (int affine = 0; affine < 3; ++affine) {  // weight and bias, weight only, neither
    auto grads = [&](bool fused) {
      Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      Tensor wt = affine < 2 ? w : Tensor(), bt = affine < 1 ? b : Tensor();
      Tensor y;
      if (fused) {
        y = layer_norm(x, {d}, wt, bt, 1e-5);
      } else {
        Tensor centred = x - mean(x, {2}, true);
        y = centred / sqrt(mean(centred * centred, {2}, true) + 1e-5);
        if (wt.defined()) y = y * wt;
        if (bt.defined()) y = y + bt;
      }
      GradientStore g = backward(y, seed);
      return std::vector<Tensor>{y.detach(), g.get(x), affine < 2 ? g.get(w) : zeros({1}),
                                 affine < 1 ? g.get(b) : zeros({1})};
    };
    auto fused = grads(true), formula = grads(false);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      auto a = fused[i].contiguous().to_vector<double>(), r = formula[i].contiguous().to_vector<double>();
      ASSERT_EQ(a.size(), r.size());
      for (std::size_t j = 0; j < a.size(); ++j)
        ASSERT_NEAR(a[j], r[j], 1e-10 * std::max(1.0, std::abs(r[j]))) << "affine " << affine << " tensor " << i;
    }
  }
}

// 2x2, stride-2 max pooling against a naive loop, values and gradient, in f32
// (the CPU's specialised loop) and f64: odd sizes (a last row and column in no
// window), ceil_mode (a last window partly off the plane), ties (the first
// wins), NaN (the first NaN wins) and +inf beside -inf.
TEST(NnPooling, MaxPool2x2AgreesWithANaiveLoop) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const bool ceil : {false, true})
    for (const DType dt : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(ceil ? "ceil_mode " : "") + std::string(dtype_name(dt)));
      const std::int64_t planes = 6, H = 7, W = 9;
      std::vector<float> X = random_tensor({planes, H, W}, 80).to_vector<float>();
      X[0] = X[1] = X[W] = X[W + 1] = 0.5f;  // a tie: the first element wins
      X[2] = 1.0f, X[3] = nan, X[W + 2] = nan, X[W + 3] = 2.0f;  // the first NaN wins
      X[4] = inf, X[5] = -inf;  // their sum is NaN, but the maximum is +inf
      X[2 * W + 6] = -inf, X[2 * W + 7] = -inf, X[3 * W + 6] = -inf, X[3 * W + 7] = -inf;
      X[H * W + 4 * W + 8] = nan;  // in the ceil_mode window off the plane's edge
      Tensor x = tensor(X, {2, 3, H, W}).to(dt).requires_grad_();
      Tensor y = max_pool2d(x, {.kernel = {2, 2}, .ceil_mode = ceil});
      const std::int64_t OH = ceil ? (H + 1) / 2 : H / 2, OW = ceil ? (W + 1) / 2 : W / 2;
      ASSERT_EQ(y.shape(), (Shape{2, 3, OH, OW}));
      Tensor gy = random_tensor(y.shape(), 81).to(dt);
      const std::vector<double> GX = backward(sum(mul(y, gy))).at(x).to(DType::f64).to_vector<double>();
      const std::vector<double> Y = y.to(DType::f64).to_vector<double>(), G = gy.to(DType::f64).to_vector<double>();
      std::vector<double> ref_gx(X.size(), 0.0);
      for (std::int64_t p = 0; p < planes; ++p)
        for (std::int64_t oh = 0; oh < OH; ++oh)
          for (std::int64_t ow = 0; ow < OW; ++ow) {
            std::int64_t best = -1;
            for (std::int64_t h = 2 * oh; h < std::min(2 * oh + 2, H); ++h)
              for (std::int64_t w = 2 * ow; w < std::min(2 * ow + 2, W); ++w) {
                const std::int64_t at = (p * H + h) * W + w;
                if (best < 0 || (!std::isnan(X[best]) && (X[at] > X[best] || std::isnan(X[at])))) best = at;
              }
            const std::int64_t o = (p * OH + oh) * OW + ow;
            if (std::isnan(X[best])) {
              ASSERT_TRUE(std::isnan(Y[o])) << "output " << o;
            } else {
              ASSERT_EQ(Y[o], double(X[best])) << "output " << o;
            }
            ref_gx[best] += G[o];
          }
      EXPECT_EQ(GX, ref_gx);
    }
}

TEST(NnRealShapes, MaxPool2d) {
  Tensor x = random_tensor({64, 64, 24, 24}, 9).requires_grad_();
  Tensor y = max_pool2d(x, 2);
  ASSERT_EQ(y.shape(), (Shape{64, 64, 12, 12}));
  Tensor gy = random_tensor(y.shape(), 10);
  auto GX = backward(sum(mul(y, gy))).at(x).to_vector<float>();
  auto X = x.to_vector<float>(), Y = y.to_vector<float>(), G = gy.to_vector<float>();
  std::vector<float> ref_gx(X.size(), 0.0f);
  for (std::int64_t p = 0; p < 64 * 64; ++p)
    for (int oh = 0; oh < 12; ++oh)
      for (int ow = 0; ow < 12; ++ow) {
        std::int64_t best = -1;
        for (int kh = 0; kh < 2; ++kh)
          for (int kw = 0; kw < 2; ++kw) {
            std::int64_t at = p * 576 + (2 * oh + kh) * 24 + 2 * ow + kw;
            if (best < 0 || X[at] > X[best]) best = at;
          }
        const std::int64_t o = p * 144 + oh * 12 + ow;
        ASSERT_EQ(Y[o], X[best]);
        ref_gx[best] += G[o];
      }
  EXPECT_EQ(GX, ref_gx);
}

TEST(NnRealShapes, BatchNorm2dMatchesComposedOps) {
  // The fused node against the same formula written with taped elementary ops.
  Tensor x = add(mul(random_tensor({64, 8, 28, 28}, 11), 2.0), 0.5).requires_grad_();
  Tensor w = random_tensor({8}, 12).requires_grad_(), b = random_tensor({8}, 13).requires_grad_();
  Tensor gy = random_tensor({64, 8, 28, 28}, 14);
  Tensor rm = zeros({8}), rv = ones({8});
  Tensor y = batch_norm2d(x, rm, rv, w, b, true);
  GradientStore g1 = backward(sum(mul(y, gy)));
  const std::vector<std::int64_t> dims{0, 2, 3};
  Tensor mu = mean(x, dims, true);
  Tensor var = mean(square(sub(x, mu)), dims, true);
  Tensor ref = add(mul(div(sub(x, mu), sqrt(add(var, 1e-5))), w.reshape({1, 8, 1, 1})), b.reshape({1, 8, 1, 1}));
  GradientStore g2 = backward(sum(mul(ref, gy)));
  auto close = [](const Tensor& a, const Tensor& r, double tol) {
    auto va = a.to_vector<float>(), vr = r.to_vector<float>();
    ASSERT_EQ(va.size(), vr.size());
    for (std::size_t i = 0; i < va.size(); ++i) ASSERT_NEAR(va[i], vr[i], tol * (1 + std::abs(vr[i]))) << i;
  };
  close(y, ref, 1e-4);
  close(g1.at(x), g2.at(x), 1e-3);
  close(g1.at(w), g2.at(w), 1e-3);
  close(g1.at(b), g2.at(b), 1e-3);
  // Running statistics: momentum 0.1 towards the batch mean and unbiased variance.
  const double n = 64.0 * 28 * 28;
  auto m = mu.reshape({8}).to_vector<float>(), v = var.reshape({8}).to_vector<float>();
  auto rmv = rm.to_vector<float>(), rvv = rv.to_vector<float>();
  for (int c = 0; c < 8; ++c) {
    EXPECT_NEAR(rmv[c], 0.1 * m[c], 1e-5);
    EXPECT_NEAR(rvv[c], 0.9 + 0.1 * v[c] * n / (n - 1), 1e-4);
  }
}

TEST(NnRealShapes, CnnForwardBackwardRuns) {
  // The baseline CNN end to end: shapes and finite gradients for every parameter.
  manual_seed(0);
  autograd::clear_tape();
  Tensor x = rand({64, 1, 28, 28});
  Tensor labels = randint(0, 10, {64});
  Tensor w1 = mul(randn({32, 1, 3, 3}), 0.3).requires_grad_(), b1 = zeros({32}).requires_grad_();
  Tensor w2 = mul(randn({64, 32, 3, 3}), 0.05).requires_grad_(), b2 = zeros({64}).requires_grad_();
  Tensor w3 = mul(randn({128, 9216}), 0.01).requires_grad_(), b3 = zeros({128}).requires_grad_();
  Tensor w4 = mul(randn({10, 128}), 0.1).requires_grad_(), b4 = zeros({10}).requires_grad_();
  Tensor h = max_pool2d(relu(conv2d(relu(conv2d(x, w1, b1)), w2, b2)), 2);
  h = dropout(h, 0.25, true).flatten(1);
  Tensor logits = linear(dropout(relu(linear(h, w3, b3)), 0.5, true), w4, b4);
  ASSERT_EQ(logits.shape(), (Shape{64, 10}));
  Tensor loss = cross_entropy(logits, labels);
  EXPECT_NEAR(loss.item(), std::log(10.0), 1.0);
  GradientStore g = backward(loss);
  for (Tensor* p : {&w1, &b1, &w2, &b2, &w3, &b3, &w4, &b4}) {
    Tensor gp = g.at(*p);
    EXPECT_EQ(gp.shape(), p->shape());
    EXPECT_TRUE(std::isfinite(sum(abs(gp)).item()));
    EXPECT_GT(sum(abs(gp)).item(), 0.0);
  }
  EXPECT_EQ(autograd::tape_size(), 0u);
}

}  // namespace

// One number in a 2-d option means both dims, as libtorch's ExpandingArray<2>.
TEST(NnSemantics, OneNumberInA2dOptionMeansBothDims) {
  Tensor x = rand({1, 2, 7, 9}), w = rand({3, 2, 3, 3}), b = rand({3});
  Tensor padded = conv2d(x, w, b, {.padding = 1});
  EXPECT_EQ(padded.shape(), (Shape{1, 3, 7, 9}));
  EXPECT_EQ(padded.to_vector<float>(), conv2d(x, w, b, {.padding = {1, 1}}).to_vector<float>());
  EXPECT_EQ(conv2d(x, w, b, {.stride = 2}).shape(), (Shape{1, 3, 3, 4}));
  EXPECT_EQ(conv2d(x, w, b, {.dilation = 2}).shape(), (Shape{1, 3, 3, 5}));
  EXPECT_EQ(conv2d(x, w, b, {.stride = {2, 1}, .padding = {0, 1}}).shape(), (Shape{1, 3, 3, 9}));
  nn::Conv2d conv(2, 3, 3, {.stride = 2, .padding = 1});
  EXPECT_EQ(conv(x).shape(), (Shape{1, 3, 4, 5}));
  EXPECT_EQ(nn::Conv2d(2, 3, {1, 3})(x).shape(), (Shape{1, 3, 7, 7}));

  EXPECT_EQ(max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}).shape(), (Shape{1, 2, 4, 5}));
  EXPECT_EQ(max_pool2d(x, {.kernel = 3, .stride = 2, .padding = 1}).to_vector<float>(),
            max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}).to_vector<float>());
  EXPECT_EQ(max_pool2d(x, {.kernel = 2, .dilation = 2}).shape(), (Shape{1, 2, 3, 4}));  // window 3, stride 2
  EXPECT_EQ(avg_pool2d(x, {.kernel = 3, .stride = 1, .padding = 1}).shape(), (Shape{1, 2, 7, 9}));
  EXPECT_EQ(nn::MaxPool2d({.kernel = 2, .stride = 1})(x).shape(), (Shape{1, 2, 6, 8}));
  EXPECT_EQ(nn::AvgPool2d(3)(x).shape(), (Shape{1, 2, 2, 3}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d(2)(x).shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(im2col(x, 3, {.padding = 1}).shape(), (Shape{1, 18, 63}));
  expect_error<ShapeError>([&] { conv2d(x, w, b, {.stride = 0}); }, "conv2d: expected stride >= 1, got [0, 0]");
  expect_error<ShapeError>([&] { conv2d(x, w, b, {.padding = -1}); }, "conv2d: expected padding >= 0, got [-1, -1]");
}

// Every target ignored (a fully padded batch): PyTorch gives a NaN mean loss
// (0 / 0) and zero gradients.
TEST(NnSemantics, AllTargetsIgnoredGiveNanLossAndZeroGradients) {
  Tensor logits = rand({3, 4}).requires_grad_();
  Tensor target = i64({-100, -100, -100});
  Tensor ce = cross_entropy(logits, target);
  EXPECT_TRUE(std::isnan(ce.item()));
  GradientStore g = backward(ce);
  for (float v : g.get(logits).to_vector<float>()) EXPECT_EQ(v, 0.0f);

  Tensor smoothed = cross_entropy(logits, target, {.ignore_index = -100, .label_smoothing = 0.1});
  EXPECT_TRUE(std::isnan(smoothed.item()));
  g = backward(smoothed);
  for (float v : g.get(logits).to_vector<float>()) EXPECT_EQ(v, 0.0f);

  Tensor log_probs = log_softmax(logits, 1);
  Tensor nll = nll_loss(log_probs, i64({2, 2, 2}), Reduction::mean, 2);
  EXPECT_TRUE(std::isnan(nll.item()));
  g = backward(nll);
  for (float v : g.get(logits).to_vector<float>()) EXPECT_EQ(v, 0.0f);

  // Sum and none stay 0; one counted target still gives its own mean.
  EXPECT_EQ(cross_entropy(logits, target, {.reduction = Reduction::sum}).item(), 0.0);
  autograd::clear_tape();
  Tensor one = cross_entropy(logits, i64({-100, 1, -100}));
  EXPECT_NEAR(one.item(), -log_softmax(logits.detach(), 1).select(0, 1).select(0, 1).item(), 1e-6);
  autograd::clear_tape();
}

TEST(NnErrors, ConvTranspose) {
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 2, 3}), zeros({2, 1, 2, 2}).flatten(2)); },
                           "conv_transpose2d: expected weight of 4 dims [C, OC/groups, KH, KW], got [2, 1, 4]");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({2, 3}), zeros({2, 1, 2, 2})); },
                           "conv_transpose2d: expected input of 4 dims [N, C, H, W] or 3 (unbatched) [C, H, W], got [2, 3]");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 3, 4, 4}), zeros({2, 1, 2, 2})); },
                           "conv_transpose2d: weight [2, 1, 2, 2] expects 2 input channels (divisible by groups 1), "
                           "input [1, 3, 4, 4] has 3");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 3, 4, 4}), zeros({3, 1, 2, 2}), {}, {.groups = 2}); },
                           "divisible by groups 2");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 1, 2, 2}), zeros({2})); },
                           "conv_transpose2d: expected bias of shape [1], got [2]");
  expect_error<ShapeError>(
      [] { conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 1, 2, 2}), {}, {.stride = 2, .output_padding = {0, 2}}); },
      "conv_transpose2d: output_padding [0, 2] must be smaller than either stride [2, 2] or dilation [1, 1]");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 2, 1, 1}), zeros({2, 1, 2, 2}), {}, {.padding = 1}); },
                           "conv_transpose2d: input [1, 2, 1, 1] with kernel 2x2, stride [1, 1], padding [1, 1] and "
                           "dilation [1, 1] gives an empty output 0x0");
  expect_error<ShapeError>([] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 1, 2, 2}), {}, {.stride = {1, 0}}); },
                           "conv_transpose2d: expected stride >= 1, got [1, 0]");
  expect_error<DTypeError>(
      [] { conv_transpose2d(zeros({1, 2, 3, 3}), zeros({2, 1, 2, 2}, {.dtype = DType::f64})); },
      "conv_transpose2d: weight dtype f64 differs from input dtype f32");
  expect_error<ShapeError>([] { conv_transpose1d(zeros({1, 2, 3, 3}), zeros({2, 1, 2})); },
                           "conv_transpose1d: expected input of 3 dims [N, C, L] or 2 (unbatched) [C, L], got [1, 2, 3, 3]");
  expect_error<ShapeError>([] { conv_transpose1d(zeros({1, 2, 3}), zeros({2, 1, 2, 2})); },
                           "conv_transpose1d: expected weight of 3 dims [C, OC/groups, K], got [2, 1, 2, 2]");
}

TEST(NnErrors, Pad) {
  expect_error<ValueError>([] { pad(zeros({2, 3}), {1, 1}, "mirror"); },
                           "pad: expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"mirror\"");
  expect_error<ShapeError>([] { pad(zeros({2, 3}), {1, 1, 1}); }, "pad: expected an even number of sizes");
  expect_error<ShapeError>([] { pad(zeros({3}), {1, 1, 1, 1}); }, "pad: 4 sizes pad 2 dims, but input [3] has 1");
  expect_error<ShapeError>([] { pad(zeros({2, 3}), {-2, -2}); },
                           "pad: padding (-2, -2) of dim 1 (size 3) leaves a negative size -1");
  expect_error<ValueError>([] { pad(zeros({2, 3}), {1, 1}, "reflect", 0.0); }, "pad: mode \"reflect\" takes no value");
  expect_error<ShapeError>([] { pad(zeros({3}), {1, 1}, "replicate"); },
                           "pad: mode \"replicate\" pads the last 1 to 3 dims of an input with one or two more dims, "
                           "got 2 sizes for input [3]");
  expect_error<ShapeError>([] { pad(zeros({1, 2, 3}), {3, 0}, "reflect"); },
                           "pad: mode \"reflect\" expects sizes less than dim 2's size 3, got (3, 0)");
  expect_error<ShapeError>([] { pad(zeros({1, 3}), {0, 4}, "circular"); },
                           "pad: mode \"circular\" expects sizes at most dim 1's size 3, got (0, 4)");
  expect_error<ShapeError>([] { pad(zeros({1, 3}), {-1, 0}, "circular"); },
                           "pad: mode \"circular\" expects non-negative sizes, got (-1, 0) for dim 1");
  expect_error<ShapeError>([] { pad(zeros({1, 0}), {1, 0}, "replicate"); },
                           "pad: mode \"replicate\" expects a non-empty dim 1, input [1, 0]");
}

// ---- composed activations and the losses ----

TEST(NnErrors, ActivationArguments) {
  expect_error<ValueError>([] { celu(zeros({2}), 0.0); }, "celu: expected a nonzero alpha, got 0");
  expect_error<ValueError>([] { hardtanh(zeros({2}), 1.0, -1.0); },
                           "hardtanh: expected min_val <= max_val, got min_val 1 and max_val -1");
  expect_error<ValueError>([] { softshrink(zeros({2}), -0.5); }, "softshrink: expected lambd >= 0, got -0.5");
  expect_error<ShapeError>([] { glu(zeros({2, 3})); },
                           "glu: expected an even size along dim -1 to halve, got 3 (shape [2, 3])");
  expect_error<ShapeError>([] { glu(zeros({2, 4}), 2); }, "glu: dim 2 is out of range for an input of shape [2, 4]");
  expect_error<ShapeError>([] { prelu(zeros({2, 3, 4}), full({4}, 0.25)); },
                           "prelu: expected weight of 1 or 3 elements (the input's channels, dim 1 of [2, 3, 4]), got 4");
  expect_error<ShapeError>([] { prelu(zeros({2, 3}), zeros({3, 1})); },
                           "prelu: expected weight of one dim ([num_parameters]), got [3, 1]");
  expect_error<DTypeError>([] { elu(zeros({2}, {.dtype = DType::i32})); }, "elu: expected a floating");
  expect_error<DTypeError>([] { softmin(zeros({2}, {.dtype = DType::i64}), 0); }, "softmin: expected a floating");
}

TEST(NnErrors, LossReductionsAndArguments) {
  expect_error<ValueError>([] { l1_loss(zeros({2}), zeros({2}), "avg"); },
                           "l1_loss: expected reduction 'none', 'mean' or 'sum', got 'avg'");
  expect_error<ValueError>([] { mse_loss(zeros({2}), zeros({2}), Reduction::batchmean); },
                           "mse_loss: expected reduction 'none', 'mean' or 'sum', got 'batchmean'");
  expect_error<ValueError>([] { kl_div(zeros({2}), zeros({2}), "Mean"); },
                           "kl_div: expected reduction 'none', 'mean', 'batchmean' or 'sum', got 'Mean'");
  expect_error<ValueError>([] { cross_entropy(zeros({2, 3}), i64({0, 1}), {.reduction = "max"}); },
                           "cross_entropy: expected reduction 'none', 'mean' or 'sum', got 'max'");
  expect_error<ValueError>([] { nll_loss(zeros({2, 3}), i64({0, 1}), "batchmean"); },
                           "nll_loss: expected reduction 'none', 'mean' or 'sum', got 'batchmean'");
  expect_error<ValueError>([] { binary_cross_entropy_with_logits(zeros({2}), zeros({2}), ""); },
                           "binary_cross_entropy_with_logits: expected reduction 'none', 'mean' or 'sum', got ''");
  expect_error<ValueError>([] { triplet_margin_loss(zeros({3}), zeros({3}), zeros({3}), {.reduction = "all"}); },
                           "triplet_margin_loss: expected reduction 'none', 'mean' or 'sum', got 'all'");
  expect_error<ShapeError>([] { l1_loss(zeros({2, 3}), zeros({3, 2})); },
                           "l1_loss: input shape [2, 3] differs from target shape [3, 2]");
  expect_error<ShapeError>([] { huber_loss(zeros({2}), zeros({3})); },
                           "huber_loss: input shape [2] differs from target shape [3]");
  expect_error<ShapeError>([] { poisson_nll_loss(zeros({2}), zeros({2, 1})); },
                           "poisson_nll_loss: input shape [2] differs from target shape [2, 1]");
  expect_error<ShapeError>([] { soft_margin_loss(zeros({2}), zeros({1})); },
                           "soft_margin_loss: input shape [2] differs from target shape [1]");
  expect_error<ShapeError>([] { hinge_embedding_loss(zeros({4}), zeros({2, 2})); },
                           "hinge_embedding_loss: input shape [4] differs from target shape [2, 2]");
  expect_error<ValueError>([] { smooth_l1_loss(zeros({2}), zeros({2}), "mean", -1.0); },
                           "smooth_l1_loss: expected beta >= 0, got -1");
  expect_error<ValueError>([] { huber_loss(zeros({2}), zeros({2}), "mean", 0.0); },
                           "huber_loss: expected delta > 0, got 0");
  expect_error<ShapeError>([] { binary_cross_entropy(full({2, 3}, 0.5), zeros({2, 3}), ones({2})); },
                           "binary_cross_entropy: weight of shape [2] does not broadcast to the input's shape [2, 3]");
  expect_error<DTypeError>([] { binary_cross_entropy(zeros({2}), zeros({2}, {.dtype = DType::f64})); },
                           "binary_cross_entropy: target dtype f64 differs from input dtype f32");
  expect_error<ShapeError>(
      [] { binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), {.pos_weight = ones({4})}); },
      "binary_cross_entropy_with_logits: pos_weight of shape [4] does not broadcast to the input's shape [2, 3]");
  expect_error<ShapeError>([] { cross_entropy(zeros({2, 3}), i64({0, 1}), {.weight = ones({4})}); },
                           "cross_entropy: expected weight of shape [3] (one per class), got [4]");
  expect_error<ShapeError>([] { nll_loss(zeros({2, 3}), i64({0, 1}), {.weight = ones({2, 3})}); },
                           "nll_loss: expected weight of shape [3] (one per class), got [2, 3]");
  expect_error<ShapeError>([] { margin_ranking_loss(zeros({3}), zeros({4}), zeros({3})); },
                           "margin_ranking_loss: input shape [3] differs from input2 shape [4]");
  expect_error<ShapeError>([] { margin_ranking_loss(zeros({3}), zeros({3}), zeros({1})); },
                           "margin_ranking_loss: input shape [3] differs from target shape [1]");
  expect_error<ShapeError>([] { cosine_embedding_loss(zeros({2, 3}), zeros({2, 3}), ones({3})); },
                           "cosine_embedding_loss: expected target of shape [2] for inputs [2, 3], got [3]");
  expect_error<ShapeError>([] { cosine_embedding_loss(zeros({2, 2, 2}), zeros({2, 2, 2}), ones({2})); },
                           "cosine_embedding_loss: expected inputs of shape [N, D] or [D], got [2, 2, 2]");
  expect_error<ValueError>([] { triplet_margin_loss(zeros({3}), zeros({3}), zeros({3}), {.p = 0.0}); },
                           "triplet_margin_loss: expected a norm degree p > 0, got 0");
  expect_error<ShapeError>([] { triplet_margin_loss(zeros({2, 3}), zeros({2, 3}), zeros({2, 4})); },
                           "triplet_margin_loss: input shape [2, 3] differs from negative shape [2, 4]");
  expect_error<ValueError>([] { multi_margin_loss(zeros({2, 3}), i64({0, 1}), {.p = 3}); },
                           "multi_margin_loss: expected p of 1 or 2, got 3");
  expect_error<DTypeError>([] { multi_margin_loss(zeros({2, 3}), zeros({2})); },
                           "multi_margin_loss: expected integer class indices as target (i64), got f32");
  expect_error<ShapeError>([] { multi_margin_loss(zeros({2, 3}), i64({0, 1, 2})); },
                           "multi_margin_loss: expected target of shape [2] for input [2, 3], got [3]");
  expect_error<ShapeError>([] { multi_margin_loss(zeros({2, 3}), i64({0, 3})); },
                           "multi_margin_loss: target index 3 is out of range for a dim of size 3");
  expect_error<ShapeError>([] { multi_margin_loss(zeros({2, 3}), i64({0, 1}), {.weight = ones({2})}); },
                           "multi_margin_loss: expected weight of shape [3] (one per class), got [2]");
}

TEST(Losses, ReductionStringsMatchTheEnum) {
  Tensor a = tensor({0.5, -1.0, 2.0, 0.25}), b = tensor({1.0, 1.0, -1.0, 0.0});
  EXPECT_EQ(l1_loss(a, b, "sum").item(), l1_loss(a, b, Reduction::sum).item());
  EXPECT_EQ(l1_loss(a, b, "mean").item(), l1_loss(a, b).item());
  EXPECT_EQ(huber_loss(a, b, "none").to_vector<float>(), huber_loss(a, b, Reduction::none).to_vector<float>());
  // sum over mean is the element count.
  EXPECT_FLOAT_EQ(smooth_l1_loss(a, b, "sum").item() / smooth_l1_loss(a, b).item(), 4.0);
}

TEST(Losses, WeightedMeanDividesByTheTargetsWeights) {
  Tensor logits = tensor({{0.3, -1.0, 2.0}, {1.5, 0.2, -0.4}, {0.0, 0.7, 0.1}, {-2.0, 1.0, 0.5}});
  Tensor target = i64({2, 0, -100, 1});
  Tensor w = tensor({0.5, 3.0, 2.0});
  // The unweighted per-row losses (0 where ignored), weighted by hand.
  Tensor per = cross_entropy(logits, target, {.reduction = Reduction::none});
  const auto p = per.to_vector<float>();
  const double by_hand = (2.0 * p[0] + 0.5 * p[1] + 3.0 * p[3]) / (2.0 + 0.5 + 3.0);
  EXPECT_NEAR(cross_entropy(logits, target, {.weight = w}).item(), by_hand, 1e-6);
  EXPECT_NEAR(nll_loss(log_softmax(logits, 1), target, {.weight = w, .reduction = "sum"}).item(),
              2.0 * p[0] + 0.5 * p[1] + 3.0 * p[3], 1e-5);
  // Every target ignored: NaN, and zero gradients, as unweighted.
  Tensor x = logits.clone().requires_grad_();
  Tensor loss = cross_entropy(x, i64({-100, -100, -100, -100}), {.weight = w});
  EXPECT_TRUE(std::isnan(loss.item()));
  for (float g : backward(loss).at(x).to_vector<float>()) EXPECT_EQ(g, 0.0f);
}

TEST(Losses, ClampsAndSafeLogsKeepEdgesFinite) {
  // binary_cross_entropy: log clamped at -100, as PyTorch, and a finite gradient at 0 and 1.
  Tensor p = tensor({0.0, 1.0, 0.5}).requires_grad_();
  Tensor bce = binary_cross_entropy(p, tensor({1.0, 0.0, 1.0}), {}, "none");
  const auto v = bce.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 100.0f);
  EXPECT_FLOAT_EQ(v[1], 100.0f);
  EXPECT_NEAR(v[2], std::log(2.0), 1e-6);
  for (float g : backward(sum(bce)).at(p).to_vector<float>()) EXPECT_TRUE(std::isfinite(g));
  // kl_div: a zero target contributes 0 (0 log 0), with finite gradients.
  Tensor in = tensor({-1.0, -0.5}).requires_grad_(), t = tensor({0.0, 0.5}).requires_grad_();
  Tensor kl = kl_div(in, t, "none");
  EXPECT_EQ(kl.to_vector<float>()[0], 0.0f);
  GradientStore g = backward(sum(kl));
  for (float x : g.at(in).to_vector<float>()) EXPECT_TRUE(std::isfinite(x));
  for (float x : g.at(t).to_vector<float>()) EXPECT_TRUE(std::isfinite(x));
}

TEST(Activations, LargeInputsStayFiniteAndBoundariesPassNoGradient) {
  Tensor x = tensor({100.0, -100.0, 0.0}).requires_grad_();
  EXPECT_EQ(softplus(x).to_vector<float>()[0], 100.0f);
  EXPECT_EQ(logsigmoid(x).to_vector<float>()[1], -100.0f);
  EXPECT_EQ(mish(x).to_vector<float>()[0], 100.0f);
  for (Tensor y : {elu(x), selu(x), celu(x, 0.5), softplus(x), logsigmoid(x), mish(x), softsign(x)})
    for (float g : backward(sum(y)).at(x).to_vector<float>()) EXPECT_TRUE(std::isfinite(g));
  // hardtanh passes the gradient strictly inside (min_val, max_val), as PyTorch's.
  Tensor edges = tensor({-1.0, 0.0, 1.0}).requires_grad_();
  EXPECT_EQ(backward(sum(hardtanh(edges))).at(edges).to_vector<float>(), (std::vector<float>{0, 1, 0}));
  EXPECT_EQ(relu6(tensor({-1.0, 7.0, 3.0})).to_vector<float>(), (std::vector<float>{0, 6, 3}));
  EXPECT_EQ(threshold(tensor({0.5, 2.0}), 1.0, -3.0).to_vector<float>(), (std::vector<float>{-3, 2}));
}

TEST(Losses, RunInF32UnderAutocast) {
  AutocastGuard on(DType::bf16);
  Tensor a = tensor({0.5, -1.0, 2.0, 0.25}).to(DType::bf16), b = tensor({1.0, 1.0, -1.0, 0.0}).to(DType::bf16);
  EXPECT_EQ(l1_loss(a, b).dtype(), DType::f32);
  EXPECT_EQ(huber_loss(a, b).dtype(), DType::f32);
  EXPECT_EQ(soft_margin_loss(a, b).dtype(), DType::f32);
  EXPECT_EQ(kl_div(a, b, "batchmean", true).dtype(), DType::f32);
  EXPECT_EQ(triplet_margin_loss(a, b, a).dtype(), DType::f32);
  EXPECT_EQ(multi_margin_loss(a.reshape({2, 2}), i64({0, 1})).dtype(), DType::f32);
  // Activations are not listed: they keep their dtype, expm1 and log1p inside them included.
  for (const Tensor& y : {elu(a), selu(a), celu(a), softplus(a), logsigmoid(a), mish(a)})
    EXPECT_EQ(y.dtype(), DType::bf16);
}

TEST(NnErrors, ConvPadding) {
  expect_error<ValueError>([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), {}, {.padding_mode = "mirror"}); },
                           "conv2d: expected padding_mode \"zeros\", \"reflect\", \"replicate\" or \"circular\", got "
                           "\"mirror\"");
  expect_error<ValueError>([] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), {}, {.padding_str = "full"}); },
                           "conv2d: expected padding \"same\" or \"valid\", got \"full\"");
  expect_error<ValueError>(
      [] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), {}, {.stride = {1, 2}, .padding_str = "same"}); },
      "conv2d: padding \"same\" needs stride 1, got [1, 2]");
  expect_error<ValueError>(
      [] { conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), {}, {.padding = 1, .padding_str = "valid"}); },
      "conv2d: padding \"valid\" and padding [1, 1] given together; give one");
  expect_error<ValueError>([] { conv1d(zeros({1, 1, 4}), zeros({1, 1, 3}), {}, {.stride = 2, .padding_str = "same"}); },
                           "conv1d: padding \"same\" needs stride 1, got [1, 2]");
  expect_error<ShapeError>(
      [] { conv1d(zeros({1, 1, 4}), zeros({1, 1, 3}), {}, {.padding = 4, .padding_mode = "reflect"}); },
      "pad: mode \"reflect\" expects sizes less than dim 3's size 4, got (4, 4)");
}

TEST(NnErrors, Resampling) {
  expect_error<ValueError>([] { interpolate(zeros({1, 1, 2, 2}), {.scale_factor = {2.0}, .mode = "bicubic"}); },
                           "interpolate: expected mode \"nearest\", \"linear\" or \"bilinear\", got \"bicubic\"");
  expect_error<ShapeError>([] { interpolate(zeros({1, 1, 2}), {.scale_factor = {2.0}, .mode = "bilinear"}); },
                           "interpolate: mode \"bilinear\" expects input of 4 dims, got [1, 1, 2]");
  expect_error<ShapeError>([] { interpolate(zeros({1, 2}), {.size = {3}}); },
                           "interpolate: expected input of 3 dims [N, C, L] or 4 [N, C, H, W], got [1, 2]");
  expect_error<ValueError>([] { interpolate(zeros({1, 1, 2, 2}), {.scale_factor = {2.0}, .align_corners = true}); },
                           "interpolate: align_corners applies to the linear modes only, not \"nearest\"");
  expect_error<ValueError>([] { interpolate(zeros({1, 1, 2, 2}), {}); },
                           "interpolate: expected either size or scale_factor, got neither");
  expect_error<ValueError>([] { interpolate(zeros({1, 1, 2, 2}), {.size = {3}, .scale_factor = {2.0}}); },
                           "interpolate: expected either size or scale_factor, got both");
  expect_error<ShapeError>([] { interpolate(zeros({1, 1, 2, 2}), {.size = {3, 3, 3}}); },
                           "interpolate: expected size given for 1 or 2 spatial dims, got 3 values");
  expect_error<ValueError>([] { interpolate(zeros({1, 1, 2}), {.scale_factor = {-1.0}}); },
                           "interpolate: expected scale_factor > 0, got -1");
  expect_error<ShapeError>([] { interpolate(zeros({1, 1, 2}), {.scale_factor = {0.4}}); },
                           "interpolate: input [1, 1, 2] would give an output of size 0 in dim 2");
  expect_error<ShapeError>([] { pixel_shuffle(zeros({1, 6, 2, 2}), 2); },
                           "pixel_shuffle: expected channels divisible by upscale_factor^2 = 4, got input [1, 6, 2, 2]");
  expect_error<ValueError>([] { pixel_shuffle(zeros({1, 4, 2, 2}), 0); }, "pixel_shuffle: expected upscale_factor >= 1, got 0");
  expect_error<ShapeError>([] { pixel_unshuffle(zeros({4, 2}), 2); },
                           "pixel_unshuffle: expected input of at least 3 dims [*, C, H, W], got [4, 2]");
  expect_error<ShapeError>([] { pixel_unshuffle(zeros({1, 1, 4, 3}), 2); },
                           "pixel_unshuffle: expected height and width divisible by downscale_factor 2, got input [1, 1, 4, 3]");
}

TEST(NnErrors, ChannelDropout) {
  expect_error<ValueError>([] { dropout2d(zeros({1, 2, 3, 3}), -0.1); }, "dropout2d: expected 0 <= p <= 1, got -0.1");
  expect_error<ShapeError>([] { dropout2d(zeros({2, 3}), 0.5); },
                           "dropout2d: expected input of 4 dims (batched) or 3 (unbatched), got [2, 3]");
  expect_error<ShapeError>([] { dropout1d(zeros({1, 2, 3, 3}), 0.5); },
                           "dropout1d: expected input of 3 dims (batched) or 2 (unbatched), got [1, 2, 3, 3]");
  expect_error<DTypeError>([] { dropout1d(zeros({2, 3}, {.dtype = DType::i64}), 0.5); },
                           "dropout1d: expected a floating-point tensor, got i64");
}

TEST(NnErrors, LstmCell) {
  expect_error<ShapeError>([] { lstm_cell_gates(zeros({2, 8}), zeros({2, 8}), zeros({2, 3})); },
                           "lstm_cell_gates: expected input_gates and hidden_gates of shape [2, 12] (cx [2, 3] has 4 "
                           "gates of hidden 3), got [2, 8] and [2, 8]");
  expect_error<ShapeError>([] { lstm_cell_gates(zeros({2, 8}), zeros({2, 8}), zeros({2, 2, 2})); },
                           "lstm_cell_gates: expected cx of 2 dims [batch, hidden], got [2, 2, 2]");
  expect_error<DTypeError>(
      [] { lstm_cell_gates(zeros({2, 8}), zeros({2, 8}, {.dtype = DType::f64}), zeros({2, 2})); },
      "lstm_cell_gates: expected every operand in f32 (input_gates' dtype), got f64");
  expect_error<DTypeError>(
      [] { lstm_cell_gates(zeros({2, 8}, {.dtype = DType::i64}), zeros({2, 8}), zeros({2, 2})); },
      "lstm_cell_gates: expected a floating-point tensor, got i64");
  expect_error<ValueError>([] { lstm_cell(zeros({2, 3}), {zeros({2, 2})}, zeros({8, 3}), zeros({8, 2})); },
                           "lstm_cell: expected hx = {h, c}, two tensors, got 1");
}

// The fused kernels against the same step composed of ops, on every dtype a
// kernel takes and on bf16, which composes.
TEST(LstmCell, FusedStepMatchesTheComposedOne) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    Tensor xp = (randn({5, 12}) * 2.0).to(dt).requires_grad_(), hp = randn({5, 12}).to(dt).requires_grad_();
    Tensor c = randn({5, 3}).to(dt).requires_grad_();
    auto [h2, c2] = lstm_cell_gates(xp, hp, c);
    const std::vector<Tensor> g = chunk(xp.detach().to(DType::f64) + hp.detach().to(DType::f64), 4, 1);
    const Tensor want_c = sigmoid(g[1]) * c.detach().to(DType::f64) + sigmoid(g[0]) * tanh(g[2]);
    const Tensor want_h = sigmoid(g[3]) * tanh(want_c);
    const double tol = dt == DType::bf16 ? 3e-2 : dt == DType::f32 ? 4e-6 : 1e-12;
    EXPECT_LT(max(abs(h2.to(DType::f64) - want_h)).item(), tol);
    EXPECT_LT(max(abs(c2.to(DType::f64) - want_c)).item(), tol);
    // Only h' used: c' gets no gradient from outside.
    GradientStore grads = backward(sum(h2 * h2));
    EXPECT_TRUE(grads.get(xp).defined() && grads.get(hp).defined() && grads.get(c).defined());
    EXPECT_EQ(max(abs(grads.get(xp) - grads.get(hp))).item(), 0.0) << "both projections take the gates' gradient";
  }
}

// ---- nn::LSTM on oneDNN's LSTM primitive (torch::lstm's fused layers) ----

struct LstmCase {
  const char* name;
  nn::RNNOptions o;
  std::int64_t steps, batch;
  int input_layout;  // 0 dense, 1 the other batch order transposed (read as it lies), 2 strided last dim
  bool state;        // h0 and c0 given
};

// A run of the module: the output, h_n, c_n, then the gradients of x, h0, c0
// and of every parameter, from a weighted sum of all three results.
std::vector<Tensor> lstm_run(nn::LSTM& m, const LstmCase& k, bool packed, bool create_graph = false) {
  Generator gen(7);
  const std::int64_t dirs = m.options().bidirectional ? 2 : 1, layers = m.options().num_layers;
  const std::int64_t h_size = m.options().proj_size > 0 ? m.options().proj_size : m.options().hidden_size;
  const bool bf = m.options().batch_first;
  const std::int64_t a = bf ? k.batch : k.steps, b = bf ? k.steps : k.batch, in = m.options().input_size;
  Tensor x = k.input_layout == 1   ? randn({b, a, in}, {}, &gen).transpose(0, 1)
             : k.input_layout == 2 ? randn({a, b, 2 * in}, {}, &gen).slice(2, 0, 2 * in, 2)
                                   : randn({a, b, in}, {}, &gen);
  x.requires_grad_();
  Tensor h0 = (randn({layers * dirs, k.batch, h_size}, {}, &gen) * 0.5).requires_grad_();
  Tensor c0 = randn({layers * dirs, k.batch, m.options().hidden_size}, {}, &gen).requires_grad_();
  manual_seed(11);  // the same dropout masks on both paths
  Tensor out, hn, cn;
  if (packed) {  // every sequence full length: the composed time loop, masks selecting every step
    const Tensor lengths = full({k.batch}, double(k.steps), {.dtype = DType::i64});
    auto [po, hc] = m.forward_with_packed_input(nn::utils::rnn::pack_padded_sequence(x, lengths, bf, false),
                                                k.state ? std::tuple<Tensor, Tensor>{h0, c0} : std::tuple<Tensor, Tensor>{});
    out = std::get<0>(nn::utils::rnn::pad_packed_sequence(po, bf));
    std::tie(hn, cn) = hc;
  } else {
    auto [o, hc] = m.forward(x, k.state ? std::tuple<Tensor, Tensor>{h0, c0} : std::tuple<Tensor, Tensor>{});
    out = o;
    std::tie(hn, cn) = hc;
  }
  const Tensor loss = sum(out * randn(out.shape(), {}, &gen)) + sum(hn * randn(hn.shape(), {}, &gen)) +
                      sum(cn * randn(cn.shape(), {}, &gen));
  std::vector<Tensor> wrt{x};
  if (k.state) wrt.insert(wrt.end(), {h0, c0});
  for (auto& [name, p] : m.named_parameters()) wrt.push_back(p);
  std::vector<Tensor> got{out.detach(), hn.detach(), cn.detach()};
  std::vector<Tensor> g = autograd::grad({loss}, wrt, {.create_graph = create_graph});
  if (create_graph) {  // and once more: the gradient of the squared gradients' sum
    Tensor gg = zeros({});
    for (const Tensor& t : g) gg = gg + sum(t * t);
    g = autograd::grad({gg}, wrt);
  }
  for (const Tensor& t : g) got.push_back(t.detach());
  return got;
}

bool ran(const Profiler& prof, const std::string& kernel) {
  for (const ProfileRow& r : prof.rows())
    if (r.name.find(kernel) != std::string::npos) return true;
  return false;
}

// The fused layers (one oneDNN call each way per layer) against the composed
// time loop in f32, which a packed batch of full lengths takes: every result
// and every gradient, over layers, directions, batch order, biases,
// projections, odd sizes, strided inputs, dropout, and given or absent states.
TEST(LstmSequence, OneDnnMatchesTheComposedTimeLoop) {
  const std::vector<LstmCase> cases = {
      {"one layer", {.input_size = 5, .hidden_size = 7}, 6, 3, 0, true},
      {"two layers bidirectional batch_first", {.input_size = 4, .hidden_size = 5, .num_layers = 2, .batch_first = true,
                                                .bidirectional = true}, 5, 2, 0, false},
      {"no bias, strided input", {.input_size = 3, .hidden_size = 6, .num_layers = 2, .bias = false}, 4, 3, 2, true},
      {"batch-first memory read time-major", {.input_size = 4, .hidden_size = 3, .bidirectional = true}, 5, 3, 1, true},
      {"projection bidirectional", {.input_size = 5, .hidden_size = 6, .bidirectional = true, .proj_size = 3}, 4, 2, 0, true},
      {"projection two layers batch_first, transposed input",
       {.input_size = 3, .hidden_size = 5, .num_layers = 2, .batch_first = true, .bidirectional = true, .proj_size = 2},
       3, 4, 1, true},
      {"dropout between layers", {.input_size = 4, .hidden_size = 4, .num_layers = 3, .dropout = 0.5}, 4, 2, 0, true},
      {"sizes of one", {.input_size = 1, .hidden_size = 1}, 1, 1, 0, true},
  };
  for (const LstmCase& k : cases) {
    SCOPED_TRACE(k.name);
    manual_seed(3);
    nn::LSTM m(k.o);
    std::vector<Tensor> fused, composed;
    {
      Profiler prof;
      fused = lstm_run(m, k, false);
      EXPECT_TRUE(ran(prof, "lstm_sequence_forward") && ran(prof, "lstm_sequence_backward")) << prof.table();
    }
    {
      Profiler prof;
      composed = lstm_run(m, k, true);
      EXPECT_FALSE(ran(prof, "lstm_sequence")) << "the reference must be the composed loop\n" << prof.table();
    }
    ASSERT_EQ(fused.size(), composed.size());
    for (std::size_t i = 0; i < fused.size(); ++i)
      rumus::testing::expect_matches(fused[i], composed[i], 2e-5, std::string(k.name) + " result " + std::to_string(i));
  }
}

// Without grad the layer runs oneDNN's inference primitive (no workspace);
// unbatched input too.
TEST(LstmSequence, InferenceAndUnbatched) {
  manual_seed(4);
  nn::LSTM m({.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
  const Tensor x = randn({5, 3});
  Tensor want = std::get<0>(m.forward_with_packed_input(nn::utils::rnn::pack_sequence({x}))).padded().squeeze(1);
  Profiler prof;
  Tensor got;
  {
    NoGradGuard no_grad;
    got = std::get<0>(m.forward(x, {}));
  }
  EXPECT_TRUE(ran(prof, "lstm_sequence_forward")) << prof.table();
  rumus::testing::expect_matches(got, want.detach(), 2e-5, "unbatched output");
}

// The CPU keeps a bounded number of per-geometry plans: a backward whose plan
// was dropped by forwards over many other lengths builds it again.
TEST(LstmSequence, BackwardAfterManyOtherLengths) {
  manual_seed(6);
  nn::LSTM m({.input_size = 2, .hidden_size = 3});
  const Tensor x = randn({4, 2, 2}).requires_grad_();
  auto [out, hc] = m.forward(x, {});
  for (std::int64_t len = 5; len < 25; ++len) (void)m.forward(randn({len, 2, 2}), {});
  const Tensor g = autograd::grad({sum(out * out)}, {x})[0];
  const Tensor lengths = full({2}, 4.0, {.dtype = DType::i64});
  auto [po, hc2] = m.forward_with_packed_input(nn::utils::rnn::pack_padded_sequence(x, lengths, false, false));
  const Tensor want = autograd::grad({sum(po.padded() * po.padded())}, {x})[0];
  rumus::testing::expect_matches(g, want, 2e-5, "grad_x");
}

// Under create_graph the fused node's backward recomputes the layer composed:
// second derivatives match the composed loop's.
TEST(LstmSequence, SecondDerivativesMatchTheComposedTimeLoop) {
  const std::vector<LstmCase> cases = {
      {"bidirectional projection", {.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true,
                                    .proj_size = 2}, 3, 2, 0, true},
      {"batch_first without bias or states", {.input_size = 2, .hidden_size = 3, .bias = false, .batch_first = true},
       3, 2, 1, false},
  };
  for (const LstmCase& k : cases) {
    SCOPED_TRACE(k.name);
    manual_seed(5);
    nn::LSTM m(k.o);
    std::vector<Tensor> fused;
    {
      Profiler prof;
      fused = lstm_run(m, k, false, true);
      EXPECT_TRUE(ran(prof, "lstm_sequence_forward")) << prof.table();
    }
    const std::vector<Tensor> composed = lstm_run(m, k, true, true);
    for (std::size_t i = 0; i < fused.size(); ++i)
      rumus::testing::expect_matches(fused[i], composed[i], 1e-4, std::string(k.name) + " result " + std::to_string(i));
  }
}

TEST(NnErrors, Lstm) {
  const std::vector<Tensor> p{zeros({8, 3}), zeros({8, 2}), zeros({8}), zeros({8})};
  expect_error<ShapeError>([&] { lstm(zeros({4, 3}), {}, p, true, 1, 0, false, false, false); },
                           "lstm: expected input of 3 dims (L, N, H_in), got [4, 3]");
  expect_error<ValueError>([&] { lstm(zeros({4, 1, 3}), {}, {p[0], p[1], p[2]}, true, 1, 0, false, false, false); },
                           "lstm: expected 4 params (1 layers, 1 directions, 4 each, one more with a projection), got 3");
  expect_error<ShapeError>([&] { lstm(zeros({4, 1, 3}), {}, {p[0], zeros({8, 3}), p[2], p[3]}, true, 1, 0, false, false, false); },
                           "lstm: expected weight_hh_l0 of shape [8, 2], got [8, 3]");
  expect_error<ShapeError>([&] { lstm(zeros({4, 1, 3}), {zeros({1, 2, 2}), zeros({1, 1, 2})}, p, true, 1, 0, false, false, false); },
                           "lstm: expected h0 of shape [1, 1, 2], got [1, 2, 2]");
  expect_error<DTypeError>([&] { lstm(zeros({4, 1, 3}, {.dtype = DType::f64}), {}, p, true, 1, 0, false, false, false); },
                           "lstm: expected weight_ih_l0 in f64 (the input's dtype), got f32");
  expect_error<ValueError>([&] { lstm(zeros({4, 1, 3}), {zeros({1, 1, 2})}, p, true, 1, 0, false, false, false); },
                           "lstm: expected hx = {h0, c0} (or none), got 1 tensors");
}

RUMUS_DEVICE_SUITE(NllKernelsOnEveryDevice);

// cross_entropy and nll_loss without class weights or smoothing, as a mean or
// a sum, run the nll kernels; class weights of ones take the composition.
// Both give the same values and gradients, in f32 and f64, with ignored
// targets and with every target ignored (a NaN mean, zero gradients).
TEST_P(NllKernelsOnEveryDevice, MatchTheComposition) {
  const Device dev = GetParam();
  Generator gen(5);
  const Tensor x0 = randn({7, 5}, {}, &gen) * 2.0;
  const std::vector<std::vector<std::int64_t>> targets = {{2, -100, 0, 4, 1, -100, 3}, std::vector<std::int64_t>(7, -100)};
  for (DType dt : {DType::f32, DType::f64})
    for (const auto& labels : targets)
      for (bool through_nll : {false, true})
        for (Reduction r : {Reduction::mean, Reduction::sum}) {
          auto run = [&](bool composition) {
            Tensor x = x0.to(dt).to(dev).detach().requires_grad_();
            Tensor t = i64(labels).to(dev);
            Tensor w = composition ? ones({5}, {.dtype = dt, .device = dev}) : Tensor();
            Tensor loss = through_nll ? nll_loss(log_softmax(x, 1), t, {.weight = w, .reduction = r})
                                      : cross_entropy(x, t, {.reduction = r, .weight = w});
            GradientStore g = backward(loss);
            return std::pair{loss.detach().cpu().to(DType::f64).item(), g.get(x).cpu().to(DType::f64)};
          };
          const std::string what = std::string(dtype_name(dt)) + (through_nll ? " nll_loss " : " cross_entropy ") +
                                   r.name() + (labels[0] == -100 ? ", every target ignored" : "");
          auto [loss, grad] = run(false);
          auto [want_loss, want_grad] = run(true);
          const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
          if (std::isnan(want_loss)) EXPECT_TRUE(std::isnan(loss)) << what;
          else EXPECT_NEAR(loss, want_loss, tol * (1 + std::abs(want_loss))) << what;
          rumus::testing::expect_matches(grad, want_grad, tol, what + " gradient");
        }
}

// On a GPU, cross_entropy's forward and backward by the nll kernels take
// four kernels (log_softmax, the loss, the seed of backward, the gradient);
// the composition takes more than a dozen.
TEST(NllKernels, CrossEntropyTakesFourKernelsOnTheGpu) {
  REQUIRE_VULKAN();
  const Device dev = Device::vulkan(0);
  Tensor x = randn({64, 10}).to(dev).detach().requires_grad_();
  Tensor t = randint(0, 10, {64}, {.dtype = DType::i64}).to(dev);
  Tensor w = ones({10}, {.device = dev});
  auto kernels = [&](const CrossEntropyOptions& o) {
    synchronize(dev);
    const std::uint64_t before = device_stats(dev).commands;
    GradientStore g = backward(cross_entropy(x, t, o));
    return device_stats(dev).commands - before;
  };
  kernels({});  // pipelines built
  kernels({.weight = w});
  const std::uint64_t fused = kernels({}), composition = kernels({.weight = w});
  std::printf("cross_entropy forward and backward on %s: %llu kernels, the composition %llu\n", dev.str().c_str(),
              static_cast<unsigned long long>(fused), static_cast<unsigned long long>(composition));
  EXPECT_EQ(fused, 4u);
  EXPECT_GE(composition, fused + 10);
}

RUMUS_DEVICE_SUITE(LinearReluOnEveryDevice);

// linear_relu's ReLU runs in the GEMM's epilogue where the device has one:
// the same values and gradients as relu(linear(...)), at shapes that fill
// whole GPU tiles (the vec4 epilogue) and ragged ones, with and without a
// bias; on a GPU the forward is one kernel.
TEST_P(LinearReluOnEveryDevice, EpilogueMatchesTheComposition) {
  const Device dev = GetParam();
  Generator gen(31);
  struct Case {
    std::int64_t m, n, k;
    bool bias;
  };
  for (const Case& c : {Case{64, 128, 64, true}, Case{64, 128, 64, false}, Case{5, 7, 3, true}, Case{5, 7, 3, false}}) {
    const std::string what = fmt::format("{}x{}x{}{}", c.m, c.n, c.k, c.bias ? " with bias" : "");
    const Tensor x0 = randn({c.m, c.k}, {}, &gen), w0 = randn({c.n, c.k}, {}, &gen), b0 = randn({c.n}, {}, &gen);
    const Tensor r0 = randn({c.m, c.n}, {}, &gen);
    auto run = [&](bool fused) {
      Tensor x = x0.to(dev).detach().requires_grad_(), w = w0.to(dev).detach().requires_grad_();
      Tensor b = c.bias ? b0.to(dev).detach().requires_grad_() : Tensor();
      Tensor y = fused ? linear_relu(x, w, b) : relu(linear(x, w, b));
      GradientStore g = backward(sum(mul(y, r0.to(dev))));
      std::vector<Tensor> out{y.cpu(), g.get(x).cpu(), g.get(w).cpu()};
      if (c.bias) out.push_back(g.get(b).cpu());
      return out;
    };
    const std::vector<Tensor> fused = run(true), composed = run(false);
    for (std::size_t i = 0; i < fused.size(); ++i)
      rumus::testing::expect_matches(fused[i], composed[i], 1e-5, what + " output " + std::to_string(i));
    if (dev.is_cpu()) continue;
    const Tensor x = x0.to(dev), w = w0.to(dev), b = c.bias ? b0.to(dev) : Tensor();
    synchronize(dev);
    const std::uint64_t before = device_stats(dev).commands;
    Tensor y = linear_relu(x, w, b);
    EXPECT_EQ(device_stats(dev).commands - before, 1u) << what;
  }
}

RUMUS_DEVICE_SUITE(LayerNormOnEveryDevice);

// layer_norm's kernels against f64 on the CPU: rows over several gradient
// blocks, widths under, at and over one GPU workgroup, each affine case, and
// only some inputs requiring grad (the weight and bias sums run without grad_x).
TEST_P(LayerNormOnEveryDevice, MatchesTheF64ValuesAndGradients) {
  const Device dev = GetParam();
  Generator gen(21);
  for (std::int64_t d : {37, 256, 700}) {
    const std::int64_t rows = d == 37 ? 5000 : 300;
    Tensor x0 = randn({rows / 10, 10, d}, {}, &gen) * 3.0 + 1.5;
    Tensor w0 = randn({d}, {}, &gen), b0 = randn({d}, {}, &gen), seed = randn({rows / 10, 10, d}, {}, &gen);
    for (int affine = 0; affine < 4; ++affine) {  // weight and bias, weight only, bias only, neither
      for (bool grad_x : {true, false}) {
        const std::string what = "d " + std::to_string(d) + " affine " + std::to_string(affine) +
                                 (grad_x ? "" : " without grad_x");
        if (!grad_x && affine == 3) continue;
        auto run = [&](Device where, DType dt) {
          Tensor x = x0.to(dt).to(where).detach().requires_grad_(grad_x), w = w0.to(dt).to(where).detach().requires_grad_(),
                 b = b0.to(dt).to(where).detach().requires_grad_();
          Tensor wt = affine == 0 || affine == 1 ? w : Tensor(), bt = affine == 0 || affine == 2 ? b : Tensor();
          Tensor y = layer_norm(x, {d}, wt, bt, 1e-5);
          GradientStore g = backward(y, seed.to(dt).to(where));
          auto host = [](const Tensor& t) { return t.cpu().to(DType::f64); };
          return std::vector<Tensor>{host(y.detach()), grad_x ? host(g.get(x)) : zeros({1}, {.dtype = DType::f64}),
                                     wt.defined() ? host(g.get(w)) : zeros({1}, {.dtype = DType::f64}),
                                     bt.defined() ? host(g.get(b)) : zeros({1}, {.dtype = DType::f64})};
        };
        auto got = run(dev, DType::f32), want = run(Device::cpu(), DType::f64);
        rumus::testing::expect_matches(got[0], want[0], 1e-4, what + " out");
        rumus::testing::expect_matches(got[1], want[1], 1e-4, what + " grad_x");
        // Sums over up to 5000 rows: a relative error against the largest sum.
        for (int i : {2, 3}) {
          const double scale = std::max(1.0, max(abs(want[std::size_t(i)])).item());
          rumus::testing::expect_matches(div(got[std::size_t(i)], scale), div(want[std::size_t(i)], scale), 1e-4,
                                         what + (i == 2 ? " grad_weight" : " grad_bias"));
        }
      }
    }
  }
}

RUMUS_DEVICE_SUITE(BatchNormOnEveryDevice);

// Training-mode batch_norm2d runs on the batch-norm kernels of every device;
// its output, gradients and running statistics against the composed formula
// in f64 on the CPU. The shapes split a channel's values into several chunks
// on a GPU (odd sizes that end a chunk inside a plane, many channels of few
// values, few channels of many), two inputs are strided views (one with
// strided running statistics) and one starts at an offset.
TEST_P(BatchNormOnEveryDevice, FusedKernelsMatchTheComposedF64Formula) {
  const Device dev = GetParam();
  Generator gen(31);
  const std::vector<std::int64_t> dims{0, 2, 3};
  const double momentum = 0.2, eps = 1e-5;
  struct Case {
    Shape shape;
    int layout;  // 0 contiguous, 1 a transposed view (H and W swapped), 2 channels sliced out of a wider tensor,
                 // 3 images sliced out of a larger batch (contiguous at an offset)
    int affine;  // 0 weight and bias, 1 neither, 2 weight only
  };
  for (const Case& k : std::vector<Case>{{{64, 3, 33, 31}, 0, 0},
                                         {{2, 130, 7, 5}, 0, 1},
                                         {{512, 8, 16, 16}, 0, 0},
                                         {{8, 5, 9, 12}, 1, 2},
                                         {{16, 4, 10, 10}, 2, 0},
                                         {{6, 7, 5, 3}, 3, 0},
                                         {{5, 3, 1, 1}, 0, 0}}) {
    const std::int64_t n = k.shape[0], c = k.shape[1], h = k.shape[2], w = k.shape[3];
    const std::string what = shape_str(k.shape) + " layout " + std::to_string(k.layout) + " affine " +
                             std::to_string(k.affine);
    // Channel means far from zero: the statistics must not lose them to cancellation.
    Tensor stored = k.layout == 1   ? randn({n, c, w, h}, {}, &gen) * 2.0 + 5.0
                    : k.layout == 2 ? randn({n, c + 2, h, w}, {}, &gen) * 2.0 + 5.0
                    : k.layout == 3 ? randn({n + 1, c, h, w}, {}, &gen) * 2.0 + 5.0
                                    : randn({n, c, h, w}, {}, &gen) * 2.0 + 5.0;
    Tensor w0 = randn({c}, {}, &gen), b0 = randn({c}, {}, &gen), seed = randn({n, c, h, w}, {}, &gen);
    Tensor rm0 = randn({c}, {}, &gen), rv0 = rand({c}, {}, &gen) + 0.5;
    auto view = [&](const Tensor& s) {
      return k.layout == 1 ? s.transpose(2, 3) : k.layout == 2 ? s.narrow(1, 1, c) : k.layout == 3 ? s.narrow(0, 1, n) : s;
    };
    const bool has_w = k.affine != 1, has_b = k.affine == 0;

    // The reference: the formula in f64 ops on the CPU, differentiated by the tape.
    Tensor rx = view(stored.to(DType::f64)).detach().requires_grad_();
    Tensor rw = w0.to(DType::f64).requires_grad_(), rb = b0.to(DType::f64).requires_grad_();
    Tensor mu = mean(rx, dims, true), var = mean(square(sub(rx, mu)), dims, true);
    Tensor ry = div(sub(rx, mu), sqrt(add(var, eps)));
    if (has_w) ry = mul(ry, rw.reshape({1, c, 1, 1}));
    if (has_b) ry = add(ry, rb.reshape({1, c, 1, 1}));
    GradientStore rg = backward(ry, seed.to(DType::f64));
    const double m = double(n * h * w);
    Tensor want_rm = add(mul(rm0.to(DType::f64), 1.0 - momentum), mul(mu.detach().reshape({c}), momentum));
    Tensor want_rv =
        add(mul(rv0.to(DType::f64), 1.0 - momentum), mul(var.detach().reshape({c}), momentum * m / (m - 1.0)));

    for (DType dt : {DType::f32, DType::f64}) {
      SCOPED_TRACE(what + " " + std::string(dtype_name(dt)));
      // Copies: to() of a tensor already of the dtype and device returns it, and the running statistics change.
      auto copy = [&](const Tensor& t) { return t.to(dt).to(dev).clone(); };
      Tensor x = view(copy(stored)).requires_grad_();
      ASSERT_EQ(x.is_contiguous(), k.layout == 0 || k.layout == 3);
      Tensor wt = copy(w0).requires_grad_(), bt = copy(b0).requires_grad_();
      // With channels sliced out, the running statistics are strided views too (every other element of a
      // wider buffer): updated through a contiguous copy written back.
      auto running = [&](const Tensor& t) {
        return k.layout == 2 ? copy(stack({t, zeros_like(t)}, 1)).select(1, 0) : copy(t);
      };
      Tensor rm = running(rm0), rv = running(rv0);
      ASSERT_EQ(rm.is_contiguous(), k.layout != 2);
      Profiler prof;
      Tensor y = batch_norm2d(x, rm, rv, has_w ? wt : Tensor(), has_b ? bt : Tensor(), true, momentum, eps);
      GradientStore g = backward(y, seed.to(dt).to(dev));
      std::vector<std::string> rows;
      for (const ProfileRow& r : prof.rows()) rows.push_back(r.name);
      // Every device with the family takes f32; f64 only where the device computes in f64.
      if (dt == DType::f32 || dev.is_cpu())
        for (const char* kernel : {"forward batch_norm2d batch_norm_stats", "forward batch_norm2d batch_norm_forward",
                                 "backward batch_norm2d batch_norm_backward_reduce",
                                 "backward batch_norm2d batch_norm_backward"})
          EXPECT_NE(std::find(rows.begin(), rows.end(), kernel), rows.end()) << kernel << " did not run\n"
                                                                             << prof.table();
      const double tol = dt == DType::f32 ? 1e-4 : 1e-10;
      auto host = [](const Tensor& t) { return t.detach().cpu().to(DType::f64); };
      rumus::testing::expect_matches(y.detach(), ry.detach(), tol, what + " out");
      rumus::testing::expect_matches(g.get(x), rg.get(rx), tol, what + " grad_x");
      // Sums over up to 131072 values: an error relative to the largest.
      auto sums = [&](const Tensor& got, const Tensor& want, const char* name) {
        const double scale = std::max(1.0, max(abs(want)).item());
        rumus::testing::expect_matches(div(host(got), scale), div(want, scale), tol, what + " " + name);
      };
      if (has_w) sums(g.get(wt), rg.get(rw), "grad_weight");
      if (has_b) sums(g.get(bt), rg.get(rb), "grad_bias");
      rumus::testing::expect_matches(rm, want_rm, tol, what + " running_mean");
      rumus::testing::expect_matches(rv, want_rv, tol, what + " running_var");
    }
  }
}

// A 16-bit input with f32 parameters and running statistics (what autocast
// leaves after a 16-bit convolution, PyTorch's mixed batch norm): the output
// and the input's gradient keep the input's dtype, the statistics and the
// parameters' gradients are f32; on a GPU through the batch-norm kernels, on
// the CPU in f32 with the output cast back. Against the f64 formula on the
// rounded input; 16-bit parameters are widened, and eval mode keeps the dtype.
TEST_P(BatchNormOnEveryDevice, SixteenBitInputWithF32ParametersKeepsItsDtype) {
  const Device dev = GetParam();
  const std::vector<std::int64_t> dims{0, 2, 3};
  const double momentum = 0.2, eps = 1e-5;
  for (DType dt : {DType::f16, DType::bf16})
    for (const Shape& shape : {Shape{8, 5, 6, 7}, Shape{64, 3, 20, 20}}) {
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape);
      SCOPED_TRACE(what);
      Generator gen(5);
      const std::int64_t c = shape[1];
      const Tensor x0 = (randn(shape, {}, &gen) * 2.0 + 5.0).to(dt), seed = randn(shape, {}, &gen).to(dt);
      const Tensor w0 = randn({c}, {}, &gen), b0 = randn({c}, {}, &gen), rm0 = randn({c}, {}, &gen),
                   rv0 = rand({c}, {}, &gen) + 0.5;
      Tensor rx = x0.to(DType::f64).requires_grad_();
      Tensor rw = w0.to(DType::f64).requires_grad_(), rb = b0.to(DType::f64).requires_grad_();
      Tensor mu = mean(rx, dims, true), var = mean(square(sub(rx, mu)), dims, true);
      Tensor ry = add(mul(div(sub(rx, mu), sqrt(add(var, eps))), rw.reshape({1, c, 1, 1})), rb.reshape({1, c, 1, 1}));
      GradientStore rg = backward(ry, seed.to(DType::f64));
      const double m = double(shape[0] * shape[2] * shape[3]);

      // Copies: to() of a tensor already on the device returns it.
      Tensor x = x0.to(dev).clone().requires_grad_(), wt = w0.to(dev).clone().requires_grad_(),
             bt = b0.to(dev).clone().requires_grad_();
      Tensor rm = rm0.to(dev).clone(), rv = rv0.to(dev).clone();
      Profiler prof;
      Tensor y = batch_norm2d(x, rm, rv, wt, bt, true, momentum, eps);
      GradientStore g = backward(y, seed.to(dev));
      if (!dev.is_cpu()) EXPECT_NE(prof.table().find("batch_norm_stats"), std::string::npos) << prof.table();
      ASSERT_EQ(y.dtype(), dt);
      ASSERT_EQ(g.get(x).dtype(), dt);
      ASSERT_EQ(g.get(wt).dtype(), DType::f32);
      ASSERT_EQ(rm.dtype(), DType::f32);
      const double tol = dt == DType::f16 ? 1e-2 : 5e-2;
      auto wide = [](const Tensor& t) { return t.detach().cpu().to(DType::f64); };
      rumus::testing::expect_matches(wide(y), ry.detach(), tol, what + " out");
      rumus::testing::expect_matches(wide(g.get(x)), rg.get(rx), tol, what + " grad_x");
      auto sums = [&](const Tensor& got, const Tensor& want, const char* name) {
        const double scale = std::max(1.0, max(abs(want)).item());
        rumus::testing::expect_matches(div(wide(got), scale), div(want, scale), 1e-3, what + " " + name);
      };
      sums(g.get(wt), rg.get(rw), "grad_weight");
      sums(g.get(bt), rg.get(rb), "grad_bias");
      rumus::testing::expect_matches(
          wide(rm), add(mul(rm0.to(DType::f64), 1.0 - momentum), mul(mu.detach().reshape({c}), momentum)), 1e-4,
          what + " running_mean");
      rumus::testing::expect_matches(
          wide(rv),
          add(mul(rv0.to(DType::f64), 1.0 - momentum), mul(var.detach().reshape({c}), momentum * m / (m - 1.0))),
          1e-4, what + " running_var");

      // 16-bit parameters too: widened for the kernels, their gradients back in their dtype.
      Tensor w16 = w0.to(dt).to(dev).requires_grad_();
      Tensor y16 = batch_norm2d(x, Tensor(), Tensor(), w16, Tensor(), true, momentum, eps);
      EXPECT_EQ(y16.dtype(), dt);
      EXPECT_EQ(backward(sum(y16.to(DType::f32))).get(w16).dtype(), dt);
      // Eval mode: the running statistics' f32 scale, the input's dtype out.
      Tensor e = batch_norm2d(x.detach(), rm, rv, wt.detach(), bt.detach(), false);
      EXPECT_EQ(e.dtype(), dt);
      Tensor want_e = add(mul(sub(x0.to(DType::f64), rm.cpu().to(DType::f64).reshape({1, c, 1, 1})),
                              mul(rsqrt(add(rv.cpu().to(DType::f64), eps)), w0.to(DType::f64)).reshape({1, c, 1, 1})),
                          b0.to(DType::f64).reshape({1, c, 1, 1}));
      rumus::testing::expect_matches(wide(e), want_e, tol, what + " eval");
    }
  // A 16-bit parameter with an f32 input is a mismatch, as in PyTorch.
  expect_error<DTypeError>(
      [&] { batch_norm2d(ones({2, 3, 4, 4}).to(dev), {}, {}, ones({3}, {.dtype = DType::f16}).to(dev), {}, true); },
      "batch_norm2d: weight dtype f16 differs from input dtype f32");
}
