// Fused scaled dot-product attention against the unfused composition
// (matmul, softmax, matmul): values and gradients with masks, causal rows,
// lengths that do not divide the kernel's tiles, dropout, errors, memory.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>

#include <rumus/rumus.hpp>

#include "devices.hpp"
#include "expect_error.hpp"

using namespace rumus;
using rumus::testing::expect_error;

namespace {

Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64) {
  Generator gen(seed);
  return randn(shape, {.dtype = dtype}, &gen);
}

// An additive mask with -1e30 where `keep` is 0 (exp underflows to exactly 0).
Tensor additive_from_keep(const Tensor& keep, DType dtype) { return (keep.to(dtype) - 1.0) * 1e30; }

Tensor causal_keep(std::int64_t lq, std::int64_t lk) {
  std::vector<std::uint8_t> v(std::size_t(lq * lk));
  for (std::int64_t i = 0; i < lq; ++i)
    for (std::int64_t j = 0; j < lk; ++j) v[std::size_t(i * lk + j)] = j <= i ? 1 : 0;
  return tensor(v, {lq, lk});
}

// softmax(q kᵀ * scale + bias) v, with ops the library already gradchecks.
Tensor unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, double scale) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * scale;
  if (bias.defined()) s = s + bias;
  return matmul(softmax(s, -1), v);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.cpu().to(DType::f64).contiguous().to_vector<double>();
  auto y = b.cpu().to(DType::f64).contiguous().to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

struct Grads {
  Tensor out, dq, dk, dv;
};

template <class F>
Grads run(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& seed, F&& f) {
  Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  Tensor out = f(q, k, v);
  GradientStore g = backward(out, seed);
  return {out.detach(), g.get(q), g.get(k), g.get(v)};
}

void expect_same(const Grads& a, const Grads& b, double tol, const std::string& what) {
  EXPECT_LT(max_abs_diff(a.out, b.out), tol) << what << " output";
  EXPECT_LT(max_abs_diff(a.dq, b.dq), tol) << what << " dq";
  EXPECT_LT(max_abs_diff(a.dk, b.dk), tol) << what << " dk";
  EXPECT_LT(max_abs_diff(a.dv, b.dv), tol) << what << " dv";
}

// Shapes crossing the CPU tiles (64 queries, 64 keys) with ragged ends; few
// heads, so the CPU backward splits each head's key tiles into parts.
constexpr std::int64_t kB = 2, kH = 3, kLq = 77, kLk = 70, kD = 8, kDv = 5;

TEST(Attention, MatchesUnfusedWithoutMask) {
  Tensor q = random_tensor({kB, kH, kLq, kD}, 1), k = random_tensor({kB, kH, kLk, kD}, 2),
         v = random_tensor({kB, kH, kLk, kDv}, 3), seed = random_tensor({kB, kH, kLq, kDv}, 4);
  const double scale = 1.0 / std::sqrt(double(kD));
  Grads fused = run(q, k, v, seed, [](auto& a, auto& b, auto& c) { return scaled_dot_product_attention(a, b, c); });
  Grads ref = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) { return unfused(a, b, c, {}, scale); });
  expect_same(fused, ref, 1e-10, "no mask");
}

TEST(Attention, CausalMatchesUnfusedWithTrilMask) {
  for (std::int64_t lk : {kLq, kLk}) {  // square, and more keys than queries (top-left aligned, as PyTorch)
    Tensor q = random_tensor({kB, kH, kLq, kD}, 5), k = random_tensor({kB, kH, lk, kD}, 6),
           v = random_tensor({kB, kH, lk, kDv}, 7), seed = random_tensor({kB, kH, kLq, kDv}, 8);
    Tensor bias = additive_from_keep(causal_keep(kLq, lk), DType::f64);
    Grads fused = run(q, k, v, seed, [](auto& a, auto& b, auto& c) {
      return scaled_dot_product_attention(a, b, c, {}, 0.0, true);
    });
    Grads ref = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) { return unfused(a, b, c, bias, 0.25); });
    Grads fused_scaled = run(q, k, v, seed, [](auto& a, auto& b, auto& c) {
      return scaled_dot_product_attention(a, b, c, {}, 0.0, true, 0.25);
    });
    expect_same(fused_scaled, ref, 1e-10, "causal, lk " + std::to_string(lk));
    Grads ref_default = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) {
      return unfused(a, b, c, bias, 1.0 / std::sqrt(double(kD)));
    });
    expect_same(fused, ref_default, 1e-10, "causal default scale, lk " + std::to_string(lk));
  }
}

TEST(Attention, PaddingMaskBoolAndAdditive) {
  // Batch element 0 keeps its first 50 keys, element 1 its first 66: a (B, 1, 1, Lk) mask.
  std::vector<std::uint8_t> keep(std::size_t(kB * kLk));
  for (std::int64_t j = 0; j < kLk; ++j) {
    keep[std::size_t(j)] = j < 50;
    keep[std::size_t(kLk + j)] = j < 66;
  }
  Tensor mask = tensor(keep, {kB, 1, 1, kLk});
  Tensor q = random_tensor({kB, kH, kLq, kD}, 9), k = random_tensor({kB, kH, kLk, kD}, 10),
         v = random_tensor({kB, kH, kLk, kDv}, 11), seed = random_tensor({kB, kH, kLq, kDv}, 12);
  const double scale = 1.0 / std::sqrt(double(kD));
  Tensor bias = additive_from_keep(mask, DType::f64);
  Grads ref = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) { return unfused(a, b, c, bias, scale); });
  Grads with_bool = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) {
    return scaled_dot_product_attention(a, b, c, mask);
  });
  expect_same(with_bool, ref, 1e-10, "bool padding mask");
  // A float mask of arbitrary values, broadcast over batch and heads.
  Tensor soft = random_tensor({kLq, kLk}, 13);
  Grads ref_soft = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) { return unfused(a, b, c, soft, scale); });
  Grads with_soft = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) {
    return scaled_dot_product_attention(a, b, c, soft);
  });
  expect_same(with_soft, ref_soft, 1e-10, "additive mask");
  // Masked keys get exactly zero gradient.
  auto dk = with_bool.dk.select(0, 0).contiguous().to_vector<double>();
  for (std::int64_t h = 0; h < kH; ++h)
    for (std::int64_t j = 50; j < kLk; ++j)
      for (std::int64_t c = 0; c < kD; ++c) EXPECT_EQ(dk[std::size_t((h * kLk + j) * kD + c)], 0.0);
}

TEST(Attention, ThreeDimInputsAndF32) {
  Tensor q = random_tensor({4, kLq, kD}, 14, DType::f32), k = random_tensor({4, kLk, kD}, 15, DType::f32),
         v = random_tensor({4, kLk, kDv}, 16, DType::f32), seed = random_tensor({4, kLq, kDv}, 17, DType::f32);
  Grads fused = run(q, k, v, seed, [](auto& a, auto& b, auto& c) {
    return scaled_dot_product_attention(a, b, c, {}, 0.0, true);
  });
  Tensor bias = additive_from_keep(causal_keep(kLq, kLk), DType::f32);
  Grads ref = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) {
    return unfused(a, b, c, bias, 1.0 / std::sqrt(double(kD)));
  });
  EXPECT_EQ(fused.out.shape(), (Shape{4, kLq, kDv}));
  EXPECT_EQ(fused.out.dtype(), DType::f32);
  expect_same(fused, ref, 1e-4, "3-d f32 causal");
}

TEST(Attention, FullyMaskedRowGivesZerosNotNan) {
  Tensor q = random_tensor({1, 1, 3, 4}, 18), k = random_tensor({1, 1, 5, 4}, 19), v = random_tensor({1, 1, 5, 2}, 20);
  std::vector<std::uint8_t> keep(15, 1);
  for (int j = 0; j < 5; ++j) keep[std::size_t(5 + j)] = 0;  // query row 1 sees nothing
  Tensor mask = tensor(keep, {3, 5});
  Grads g = run(q, k, v, random_tensor({1, 1, 3, 2}, 21),
                [&](auto& a, auto& b, auto& c) { return scaled_dot_product_attention(a, b, c, mask); });
  auto out = g.out.contiguous().to_vector<double>();
  EXPECT_EQ(out[2], 0.0);
  EXPECT_EQ(out[3], 0.0);
  for (const Tensor* t : {&g.out, &g.dq, &g.dk, &g.dv})
    for (double x : t->contiguous().to_vector<double>()) EXPECT_TRUE(std::isfinite(x));
  auto dq = g.dq.contiguous().to_vector<double>();
  for (int c = 0; c < 4; ++c) EXPECT_EQ(dq[std::size_t(4 + c)], 0.0);
}

RUMUS_DEVICE_SUITE(AttentionOnEveryDevice);

// A NaN in a key, a query row or the additive mask poisons what it touches, as
// in PyTorch and the composed ops: every row for a key, that row for a query or
// a mask entry. Forward and backward, on every device.
TEST_P(AttentionOnEveryDevice, NanInQueryKeyOrMaskGivesNanRows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Device dev = GetParam();
  struct Case {
    const char* name;
    std::int64_t head, row;  // a NaN row (row -1: every row of the head)
  };
  for (const Case& c : {Case{"key", 0, -1}, Case{"query", 1, 2}, Case{"mask", -1, 0}}) {
    SCOPED_TRACE(c.name);
    std::vector<double> qv = random_tensor({1, 2, 5, 4}, 31).to_vector<double>();
    std::vector<double> kv = random_tensor({1, 2, 7, 4}, 32).to_vector<double>();
    std::vector<double> mv(35, 0.0);
    if (c.name == std::string("key")) kv[std::size_t(3 * 4)] = nan;               // k[0, 0, 3, 0]
    if (c.name == std::string("query")) qv[std::size_t((5 + 2) * 4 + 1)] = nan;   // q[0, 1, 2, 1]
    if (c.name == std::string("mask")) mv[0] = nan;                                // mask[0, 0]
    Tensor q = tensor(qv, {1, 2, 5, 4}).to(DType::f32).to(dev);
    Tensor k = tensor(kv, {1, 2, 7, 4}).to(DType::f32).to(dev);
    Tensor v = random_tensor({1, 2, 7, 3}, 33, DType::f32).to(dev);
    Tensor mask = tensor(mv, {5, 7}).to(DType::f32).to(dev);
    Tensor seed = random_tensor({1, 2, 5, 3}, 34, DType::f32).to(dev);
    Grads fused = run(q, k, v, seed, [&](auto& a, auto& b, auto& x) { return scaled_dot_product_attention(a, b, x, mask); });
    Grads composed = run(q, k, v, seed, [&](auto& a, auto& b, auto& x) { return unfused(a, b, x, mask, 0.5); });
    auto out = fused.out.cpu().contiguous().to_vector<float>();
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 5; ++i) {
        const bool nan_row = (c.head < 0 || c.head == h) && (c.row < 0 || c.row == i);
        for (std::int64_t e = 0; e < 3; ++e)
          EXPECT_EQ(std::isnan(out[std::size_t((h * 5 + i) * 3 + e)]), nan_row) << "head " << h << " row " << i;
      }
    // The gradients are NaN where the composed ops' are.
    for (auto [f, u] : {std::pair{&fused.dq, &composed.dq}, {&fused.dk, &composed.dk}, {&fused.dv, &composed.dv}}) {
      auto a = f->cpu().contiguous().to_vector<float>(), b = u->cpu().contiguous().to_vector<float>();
      ASSERT_EQ(a.size(), b.size());
      std::size_t nans = 0;
      for (std::size_t x = 0; x < a.size(); ++x) {
        EXPECT_EQ(std::isnan(a[x]), std::isnan(b[x])) << "element " << x;
        nans += std::isnan(b[x]);
      }
      EXPECT_GT(nans, 0u);
    }
  }
}

TEST(Attention, DropoutKeepsOrZeroesWeightsAndReplaysInBackward) {
  // With v = I the output is the (dropped, rescaled) attention matrix itself.
  const std::int64_t L = 40;
  Tensor q = random_tensor({1, 2, L, 4}, 22), k = random_tensor({1, 2, L, 4}, 23);
  std::vector<double> identity(std::size_t(L * L), 0.0);
  for (std::int64_t i = 0; i < L; ++i) identity[std::size_t(i * L + i)] = 1.0;
  Tensor v = tensor(identity, {1, 1, L, L}).expand({1, 2, L, L});
  Tensor plain = scaled_dot_product_attention(q, k, v);
  Generator gen(5);
  Tensor dropped = scaled_dot_product_attention(q, k, v, {}, 0.25, false, std::nullopt, &gen);
  auto p = plain.contiguous().to_vector<double>(), d = dropped.contiguous().to_vector<double>();
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (d[i] == 0.0) {
      ++zeros;
    } else {
      EXPECT_NEAR(d[i], p[i] / 0.75, 1e-12);
    }
  }
  const double frac = double(zeros) / double(p.size());
  EXPECT_GT(frac, 0.2);
  EXPECT_LT(frac, 0.3);
  // The generator advanced: a second call draws a different mask.
  Tensor again = scaled_dot_product_attention(q, k, v, {}, 0.25, false, std::nullopt, &gen);
  EXPECT_GT(max_abs_diff(again, dropped), 0.0);
  // Backward through the same mask: compare with the unfused composition times the recovered mask.
  Tensor keep_scale = div(dropped, plain);  // 0 or 1/(1-p) per weight
  Tensor vv = random_tensor({1, 2, L, 3}, 24), seed = random_tensor({1, 2, L, 3}, 25);
  Generator gen2(5);
  Grads fused = run(q, k, vv, seed, [&](auto& a, auto& b, auto& c) {
    return scaled_dot_product_attention(a, b, c, {}, 0.25, false, std::nullopt, &gen2);
  });
  Grads ref = run(q, k, vv, seed, [&](auto& a, auto& b, auto& c) {
    Tensor w = softmax(matmul(a, b.transpose(-2, -1)) * 0.5, -1) * keep_scale;
    return matmul(w, c);
  });
  expect_same(fused, ref, 1e-10, "dropout");
}

// 32 heads: one backward work item per head on the CPU (no parts), causal
// rows over three key tiles; and dropout's gradients do not depend on how
// many threads computed them.
TEST(Attention, ManyHeadsMatchUnfusedAndAgreeAcrossThreadCounts) {
  const std::int64_t B = 4, H = 8, L = 130, D = 16;
  Tensor q = random_tensor({B, H, L, D}, 31), k = random_tensor({B, H, L, D}, 32), v = random_tensor({B, H, L, D}, 33),
         seed = random_tensor({B, H, L, D}, 34);
  Tensor bias = additive_from_keep(causal_keep(L, L), DType::f64);
  Grads fused = run(q, k, v, seed, [](auto& a, auto& b, auto& c) {
    return scaled_dot_product_attention(a, b, c, {}, 0.0, true);
  });
  Grads ref = run(q, k, v, seed, [&](auto& a, auto& b, auto& c) { return unfused(a, b, c, bias, 0.25); });
  expect_same(fused, ref, 1e-10, "32 heads, causal");

  const int threads = num_threads();
  for (std::int64_t batch : {B, std::int64_t(1)}) {  // 32 heads, and 8 (whose key tiles are split into parts)
    auto dropped = [&] {
      auto f32 = [&](const Tensor& t) { return t.narrow(0, 0, batch).to(DType::f32); };
      Generator gen(9);
      return run(f32(q), f32(k), f32(v), f32(seed), [&](auto& a, auto& b, auto& c) {
        return scaled_dot_product_attention(a, b, c, {}, 0.1, true, std::nullopt, &gen);
      });
    };
    set_num_threads(1);
    Grads one = dropped();
    set_num_threads(2);
    Grads two = dropped();
    set_num_threads(threads);
    expect_same(one, two, 1e-30, "batch " + std::to_string(batch) + ", one thread against two (bit for bit)");
  }
}

TEST(Attention, Errors) {
  Tensor q = zeros({2, 3, 4, 8}), k = zeros({2, 3, 5, 8}), v = zeros({2, 3, 5, 6});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(zeros({4, 8}), zeros({5, 8}), zeros({5, 6})); },
                           "scaled_dot_product_attention: expected 3-D (N, L, D) or 4-D (B, H, L, D) query, got "
                           "shape [4, 8]");
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, zeros({2, 3, 5, 7}), v); },
                           "scaled_dot_product_attention: expected query (..., Lq, D), key (..., Lk, D) and value "
                           "(..., Lk, Dv) with equal leading dims, got [2, 3, 4, 8], [2, 3, 5, 7] and [2, 3, 5, 6]");
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, zeros({2, 3, 4, 6})); }, "equal leading dims");
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, zeros({2, 5, 8}), v); },
                           "expected key and value of the query's rank 4");
  expect_error<DTypeError>([&] { scaled_dot_product_attention(q, k.to(DType::f64), v); },
                           "scaled_dot_product_attention: expected query, key and value of one dtype, got f32, f64 "
                           "and f32");
  expect_error<DTypeError>(
      [&] { scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)); },
      "scaled_dot_product_attention");
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v, zeros({4, 4}).to(DType::u8)); },
                           "scaled_dot_product_attention: attn_mask of shape [4, 4] does not broadcast to "
                           "[2, 3, 4, 5]");
  expect_error<DTypeError>([&] { scaled_dot_product_attention(q, k, v, zeros({4, 5}).to(DType::i64)); },
                           "scaled_dot_product_attention: expected a bool (or u8) or floating attn_mask, got i64");
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, v, zeros({4, 5}), 0.0, true); },
                           "scaled_dot_product_attention: expected attn_mask or is_causal, not both");
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, v, {}, 1.5); },
                           "scaled_dot_product_attention: expected 0 <= dropout_p <= 1, got 1.5");
}

TEST(Attention, LongSequenceNeverAllocatesScores) {
  // L = 4096: the score matrix alone would be 64 MiB of f32; q, k, v, out and
  // the gradients together are a few MiB.
  const std::int64_t L = 4096, D = 16;
  Tensor q = random_tensor({1, 1, L, D}, 26, DType::f32), k = random_tensor({1, 1, L, D}, 27, DType::f32),
         v = random_tensor({1, 1, L, D}, 28, DType::f32), seed = random_tensor({1, 1, L, D}, 29, DType::f32);
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const std::size_t scores = std::size_t(L * L) * sizeof(float);
  const DeviceStats start = device_stats(Device::cpu());
  const std::size_t before = start.bytes_in_use;
  if (start.peak_bytes_in_use > before + scores / 8)
    GTEST_SKIP() << "an earlier test of this process peaked higher than the limit; run alone (as ctest does)";
  {
    Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    GradientStore g = backward(out, seed);
    EXPECT_TRUE(g.get(q).defined());
  }
  const DeviceStats after = device_stats(Device::cpu());
  EXPECT_GT(after.peak_bytes_in_use, before);  // the counter sees this test's tensors
  EXPECT_LT(after.peak_bytes_in_use - before, scores / 8);
}

// ---- modules ----

std::vector<std::string> keys_of(const StateDict& sd) {
  std::vector<std::string> k;
  for (auto& [name, t] : sd) k.push_back(name);
  return k;
}

// PyTorch's MultiheadAttention written out: per-head projections, scores,
// softmax, weighted values, output projection. `bias` is added to the scores.
Tensor mha_by_hand(nn::MultiheadAttention& m, const Tensor& query, const Tensor& kv, const Tensor& bias) {
  const std::int64_t n = query.shape()[0], l = query.shape()[1], e = m.embed_dim, h = m.num_heads, dh = e / h;
  auto project = [&](const Tensor& x, std::int64_t i) {
    Tensor w = m.in_proj_weight.detach().narrow(0, i * e, e), b = m.in_proj_bias.detach().narrow(0, i * e, e);
    return (matmul(x, w.transpose(0, 1)) + b).reshape({n, x.shape()[1], h, dh}).transpose(1, 2);
  };
  Tensor q = project(query, 0), k = project(kv, 1), v = project(kv, 2);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(dh)));
  if (bias.defined()) scores = scores + bias;
  Tensor o = matmul(softmax(scores, -1), v).transpose(1, 2).reshape({n, l, e});
  return matmul(o, m.out_proj.weight.detach().transpose(0, 1)) + m.out_proj.bias.detach();
}

// q, k and v as views of [B, L, H, D] tensors are read where they lie; the
// output lies as [B, L, H, Dv], so merging its heads needs no copy.
TEST(Attention, HeadsReadInPlaceAndOutputLiesAsBatchLengthHeads) {
  Tensor xq = random_tensor({2, 7, 3, 4}, 40), xk = random_tensor({2, 9, 3, 4}, 41);
  Tensor xv = random_tensor({2, 9, 3, 5}, 42), seed = random_tensor({2, 3, 7, 5}, 43);
  auto grads = [&](bool in_place) {
    Tensor a = xq.detach().requires_grad_(), b = xk.detach().requires_grad_(), c = xv.detach().requires_grad_();
    auto heads = [&](const Tensor& t) { return in_place ? t.transpose(1, 2) : t.transpose(1, 2).contiguous(); };
    Tensor out = scaled_dot_product_attention(heads(a), heads(b), heads(c), {}, 0.0, true);
    auto g = backward(sum(out * seed));
    return std::array<Tensor, 4>{out, g.at(a), g.at(b), g.at(c)};
  };
  const auto in_place = grads(true), copied = grads(false);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_LT(max_abs_diff(in_place[i], copied[i]), 1e-12) << i;
  EXPECT_TRUE(in_place[0].transpose(1, 2).is_contiguous());
  EXPECT_TRUE(copied[0].transpose(1, 2).is_contiguous());
}

// One packed projection in, heads merged out: the same as the attention of
// the heads split from it, with masks, causal rows and dropout.
TEST(PackedSelfAttention, MatchesAttentionOnSplitHeads) {
  const std::int64_t N = 2, L = 9, H = 3, D = 4, E = H * D;
  Tensor keep = tensor(std::vector<std::uint8_t>{1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {N, 1, 1, L});
  Tensor seed = random_tensor({N, L, E}, 51);
  struct Case {
    const char* name;
    Tensor mask;
    double dropout;
    bool causal;
  };
  for (const Case& c : {Case{"plain", {}, 0.0, false}, Case{"causal", {}, 0.0, true},
                        Case{"padding", keep, 0.0, false}, Case{"additive dropout", additive_from_keep(keep, DType::f64),
                                                                0.3, false}}) {
    Tensor qkv = random_tensor({N, L, 3 * E}, 50).requires_grad_();
    Generator g1(9), g2(9);
    Tensor got = packed_self_attention(qkv, H, c.mask, c.dropout, c.causal, std::nullopt, &g1);
    Tensor got_grad = backward(sum(got * seed)).at(qkv);
    Tensor heads = qkv.reshape({N, L, 3, H, D});
    auto split = [&](std::int64_t i) { return heads.select(2, i).transpose(1, 2); };
    Tensor want = scaled_dot_product_attention(split(0), split(1), split(2), c.mask, c.dropout, c.causal,
                                               std::nullopt, &g2)
                      .transpose(1, 2)
                      .reshape({N, L, E});
    Tensor want_grad = backward(sum(want * seed)).at(qkv);
    EXPECT_EQ(got.shape(), (Shape{N, L, E})) << c.name;
    EXPECT_LT(max_abs_diff(got, want), 1e-12) << c.name;
    EXPECT_LT(max_abs_diff(got_grad, want_grad), 1e-12) << c.name;
  }
  expect_error<ShapeError>([] { packed_self_attention(zeros({2, 5, 10}), 3); },
                           "packed_self_attention: expected (N, L, 3 * E) with E divisible by num_heads 3, got shape "
                           "[2, 5, 10]");
  expect_error<ShapeError>([] { packed_self_attention(zeros({5, 12}), 2); }, "got shape [5, 12]");
  expect_error<ShapeError>([] { packed_self_attention(zeros({2, 5, 12}), 0); }, "num_heads 0");
  expect_error<ValueError>([] { packed_self_attention(zeros({2, 5, 12}), 2, {}, 2.0); },
                           "packed_self_attention: expected 0 <= dropout_p <= 1, got 2");
  expect_error<ShapeError>([] { packed_self_attention(zeros({2, 5, 12}), 2, zeros({3, 5}).to(DType::u8)); },
                           "packed_self_attention: attn_mask of shape [3, 5] does not broadcast to [2, 2, 5, 5]");
  expect_error<DTypeError>([] { packed_self_attention(zeros({2, 5, 12}).to(DType::i64), 2); },
                           "packed_self_attention");
}

TEST(MultiheadAttention, PyTorchParameterNames) {
  nn::MultiheadAttention m(16, 4);
  EXPECT_EQ(keys_of(m.state_dict()),
            (std::vector<std::string>{"in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"}));
  EXPECT_EQ(m.in_proj_weight.shape(), (Shape{48, 16}));
  EXPECT_EQ(m.in_proj_bias.shape(), (Shape{48}));
  EXPECT_EQ(m.out_proj.weight.shape(), (Shape{16, 16}));
  nn::MultiheadAttention no_bias(16, 4, 0.0, false);
  EXPECT_EQ(keys_of(no_bias.state_dict()), (std::vector<std::string>{"in_proj_weight", "out_proj.weight"}));
  expect_error<Error>([] { nn::MultiheadAttention(10, 4); },
                      "MultiheadAttention: expected embed_dim divisible by num_heads (both >= 1), got 10 and 4");
}

TEST(MultiheadAttention, MatchesHandWrittenAttention) {
  nn::MultiheadAttention m(12, 3);
  Generator gen(3);
  nn::init::normal_(m.in_proj_bias, 0.0, 0.3, &gen);  // non-zero biases exercise the bias split
  nn::init::normal_(m.out_proj.bias, 0.0, 0.3, &gen);
  Tensor x = random_tensor({2, 5, 12}, 30, DType::f32), mem = random_tensor({2, 7, 12}, 31, DType::f32);
  EXPECT_LT(max_abs_diff(m(x), mha_by_hand(m, x, x, {})), 1e-5);
  {  // The input's gradient through the fused projection and its split into q, k and v.
    Tensor xs = x.detach().requires_grad_(), seed = random_tensor({2, 5, 12}, 33, DType::f32);
    Tensor got_grad = backward(sum(m(xs) * seed)).at(xs);
    Tensor want_grad = backward(sum(mha_by_hand(m, xs, xs, {}) * seed)).at(xs);
    EXPECT_LT(max_abs_diff(got_grad, want_grad), 1e-5);
  }
  // Cross-attention with a key padding mask (nonzero = padding) and a causal rule together.
  std::vector<std::uint8_t> pad(14, 0);
  pad[5] = pad[6] = pad[13] = 1;
  Tensor padding = tensor(pad, {2, 7});
  Tensor keep = tensor(std::vector<std::uint8_t>{1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0}, {2, 1, 1, 7});
  Tensor bias = additive_from_keep(keep, DType::f32) + additive_from_keep(causal_keep(5, 7), DType::f32);
  Tensor got = m.forward(x, mem, mem, padding, {}, true);
  EXPECT_LT(max_abs_diff(got, mha_by_hand(m, x, mem, bias)), 1e-5);
  // A float attn_mask is added as is.
  Tensor soft = random_tensor({5, 7}, 32, DType::f32);
  EXPECT_LT(max_abs_diff(m.forward(x, mem, mem, {}, soft), mha_by_hand(m, x, mem, soft)), 1e-5);
  expect_error<ShapeError>([&] { m.forward(x, mem, mem, zeros({2, 5}).to(DType::u8)); },
                           "MultiheadAttention: expected key_padding_mask of shape [2, 7], got [2, 5]");
  expect_error<ShapeError>([&] { m.forward(zeros({2, 5, 8})); },
                           "MultiheadAttention: expected (N, L, 12) query, key and value (batch_first), got [2, 5, 8]");
}

TEST(TransformerEncoderLayer, PyTorchNamesAndPostAndPreNorm) {
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.1, .activation = "gelu",
                                             .norm_first = norm_first});
    EXPECT_EQ(keys_of(layer.state_dict()),
              (std::vector<std::string>{"linear1.bias", "linear1.weight", "linear2.bias", "linear2.weight",
                                        "norm1.bias", "norm1.weight", "norm2.bias", "norm2.weight",
                                        "self_attn.in_proj_bias", "self_attn.in_proj_weight",
                                        "self_attn.out_proj.bias", "self_attn.out_proj.weight"}));
    layer.eval();  // no dropout
    Tensor x = random_tensor({3, 4, 8}, 33, DType::f32);
    auto ff = [&](const Tensor& t) {
      Tensor hdn = gelu(matmul(t, layer.linear1.weight.detach().transpose(0, 1)) + layer.linear1.bias.detach());
      return matmul(hdn, layer.linear2.weight.detach().transpose(0, 1)) + layer.linear2.bias.detach();
    };
    auto ln = [](const Tensor& t) {  // fresh LayerNorms are the identity affine
      Tensor mu = mean(t, {-1}, true);
      Tensor var = mean((t - mu) * (t - mu), {-1}, true);
      return (t - mu) / sqrt(var + 1e-5);
    };
    Tensor expected;
    if (norm_first) {
      Tensor y = x + mha_by_hand(layer.self_attn, ln(x), ln(x), {});
      expected = y + ff(ln(y));
    } else {
      Tensor y = ln(x + mha_by_hand(layer.self_attn, x, x, {}));
      expected = ln(y + ff(y));
    }
    EXPECT_LT(max_abs_diff(layer(x), expected), 1e-5) << "norm_first " << norm_first;
  }
  expect_error<Error>([] { nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}); },
                      "TransformerEncoderLayer: expected activation \"relu\" or \"gelu\", got \"tanh\"");
}

TEST(DecoderOnlyBlock, FutureTokensDoNotChangeThePast) {
  nn::DecoderOnlyBlock block(8, 2, 32, 0.0);
  Tensor x = random_tensor({2, 6, 8}, 34, DType::f32);
  Tensor changed = x.clone();
  changed.narrow(1, 4, 2).copy_(random_tensor({2, 2, 8}, 35, DType::f32));
  Tensor a = block(x), b = block(changed);
  EXPECT_EQ(max_abs_diff(a.narrow(1, 0, 4), b.narrow(1, 0, 4)), 0.0);
  EXPECT_GT(max_abs_diff(a.narrow(1, 4, 2), b.narrow(1, 4, 2)), 1e-3);
}

TEST(PositionalEmbeddings, SinusoidalValuesAndLearnedRows) {
  nn::SinusoidalPositionalEncoding sin_pe(10, 6);
  EXPECT_TRUE(sin_pe.state_dict().empty());  // a non-persistent buffer, as PyTorch code registers it
  Tensor zero = zeros({1, 10, 6});
  auto pe = sin_pe(zero).contiguous().to_vector<float>();
  for (int p : {0, 3, 9})
    for (int i = 0; i < 6; ++i) {
      const double angle = p / std::pow(10000.0, double(i - i % 2) / 6.0);
      EXPECT_NEAR(pe[std::size_t(p * 6 + i)], i % 2 ? std::cos(angle) : std::sin(angle), 1e-6);
    }
  nn::LearnedPositionalEmbedding learned(10, 6);
  EXPECT_EQ(keys_of(learned.state_dict()), (std::vector<std::string>{"weight"}));
  Tensor x = random_tensor({2, 4, 6}, 36, DType::f32);
  Tensor expected = x + learned.weight.detach().narrow(0, 0, 4);
  EXPECT_EQ(max_abs_diff(learned(x), expected), 0.0);
  expect_error<ShapeError>([&] { learned(zeros({1, 11, 6})); },
                           "LearnedPositionalEmbedding: sequence length 11 exceeds max_len 10");
}

TEST(GPT, TiedHeadSharesTheEmbedding) {
  nn::GPTConfig c{.vocab_size = 11, .context = 8, .d_model = 16, .num_heads = 2, .num_layers = 2, .dropout = 0.0};
  nn::GPT tied(c);
  StateDict sd = tied.state_dict();
  EXPECT_TRUE(sd.count("token_embedding.weight"));
  EXPECT_TRUE(sd.count("position_embedding.weight"));
  EXPECT_TRUE(sd.count("blocks.1.self_attn.in_proj_weight"));
  EXPECT_FALSE(sd.count("head.weight"));
  Tensor tokens = tensor(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5});
  Tensor logits = tied(tokens);
  EXPECT_EQ(logits.shape(), (Shape{2, 5, 11}));
  // Gradient reaches the embedding through the head too: token 0 is never an input, yet its row gets one.
  GradientStore g = backward(sum(logits * logits));
  auto grad = g.get(tied.token_embedding.weight).contiguous().to_vector<float>();
  double row0 = 0;
  for (int i = 0; i < 16; ++i) row0 += std::abs(grad[std::size_t(i)]);
  EXPECT_GT(row0, 0.0);
  c.tie_weights = false;
  c.sinusoidal_positions = true;
  nn::GPT untied(c);
  EXPECT_TRUE(untied.state_dict().count("head.weight"));
  EXPECT_FALSE(untied.state_dict().count("position_embedding.weight"));
  EXPECT_EQ(untied.num_parameters() - tied.num_parameters(), 11 * 16 - 8 * 16);
  expect_error<ShapeError>([&] { tied(zeros({1, 9}, {.dtype = DType::i64})); },
                           "GPT: sequence length 9 exceeds the context 8");
}

}  // namespace
