// Mixed precision: the autocast scope and its policy, 16-bit GEMMs with f32
// accumulation on every device, and GradScaler's dynamic loss scaling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <rumus/rumus.hpp>

#include "backend/attention.hpp"  // kernel-level checks
#include "backend/gemm.hpp"
#include "backend/pointwise.hpp"
#include "devices.hpp"
#include "expect_error.hpp"

using namespace rumus;
using namespace rumus::testing;

namespace {


Tensor rnd(const Shape& shape, Device device, std::uint64_t seed) {
  Generator gen(seed);
  return uniform(shape, -1.0, 1.0, {.device = device}, &gen);
}

// |got - want| <= atol + rtol * |want| everywhere.
void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to(DType::f64).cpu().to_vector<double>();
  auto w = want.to(DType::f64).cpu().to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::abs(g[i] - w[i]), atol + rtol * std::abs(w[i])) << what << " at " << i << ": " << g[i] << " vs " << w[i];
}

// Tolerances of a product over k terms of inputs in [-1, 1] whose inputs and
// output are rounded to `dt` (f16: 11 significant bits, bf16: 8).
double atol_for(DType dt, std::int64_t k) {
  const double eps = dt == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  return 4 * eps * std::sqrt(double(k));
}
double rtol_for(DType dt) { return dt == DType::f16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -6); }

}  // namespace

// ---- the scope ----

TEST(Autocast, OffByDefaultAndRestoredByTheGuard) {
  EXPECT_FALSE(autocast_enabled());
  {
    AutocastGuard on;
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(Device::cpu()), DType::bf16);
    EXPECT_EQ(autocast_dtype(Device::vulkan(0)), DType::f16);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_FALSE(autocast_dtype_override().has_value());
}

TEST(Autocast, NestedScopesRestoreTheOuterState) {
  AutocastGuard outer(DType::bf16);
  EXPECT_EQ(autocast_dtype(Device::vulkan(0)), DType::bf16);
  {
    AutocastGuard inner(DType::f16);
    EXPECT_EQ(autocast_dtype(Device::cpu()), DType::f16);
    {
      AutocastGuard off(false);  // torch.autocast(enabled=False) inside a region
      EXPECT_FALSE(autocast_enabled());
      Tensor x = rnd({2, 3}, Device::cpu(), 1), w = rnd({4, 3}, Device::cpu(), 2);
      EXPECT_EQ(linear(x, w).dtype(), DType::f32);
    }
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(Device::cpu()), DType::f16);
  }
  EXPECT_EQ(autocast_dtype(Device::cpu()), DType::bf16);
}

TEST(Autocast, FunctionFormReturnsTheResultAndEndsTheScope) {
  Tensor a = rnd({3, 4}, Device::cpu(), 3), b = rnd({4, 5}, Device::cpu(), 4);
  Tensor out = autocast(DType::f16, [&] { return matmul(a, b); });
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);  // disabled again: f32 as before
}

TEST(Autocast, RejectsADtypeThatIsNot16Bit) {
  expect_error<DTypeError>([] { AutocastGuard g(DType::f32); }, "autocast: expected a dtype of f16 or bf16, got f32");
  EXPECT_FALSE(autocast_enabled());
}

// ---- the policy ----

TEST(AutocastPolicy, TableListsEachOpOnce) {
  std::set<std::string_view> seen;
  for (const auto& e : autocast_table()) {
    EXPECT_TRUE(seen.insert(e.op).second) << e.op;
    EXPECT_EQ(autocast_policy(e.op), e.policy);
  }
  EXPECT_EQ(autocast_policy("matmul"), AutocastPolicy::lower_precision);
  EXPECT_EQ(autocast_policy("softmax"), AutocastPolicy::f32);
  EXPECT_EQ(autocast_policy("relu"), AutocastPolicy::none);
}

RUMUS_DEVICE_SUITE(AutocastPolicyOnEveryDevice);

TEST_P(AutocastPolicyOnEveryDevice, ProductsRunIn16BitsAndReductionsLossesNormsInF32) {
  const Device dev = GetParam();
  AutocastGuard on;
  const DType low = autocast_dtype(dev);
  Tensor x = rnd({4, 8}, dev, 5), w = rnd({6, 8}, dev, 6), b = rnd({6}, dev, 7);
  EXPECT_EQ(linear(x, w, b).dtype(), low);
  EXPECT_EQ(matmul(x, w.t()).dtype(), low);
  EXPECT_EQ(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), low);
  Tensor img = rnd({2, 3, 6, 6}, dev, 8), k = rnd({4, 3, 3, 3}, dev, 9), kb = rnd({4}, dev, 10);
  EXPECT_EQ(conv2d(img, k, kb).dtype(), low);
  Tensor kt = rnd({3, 4, 3, 3}, dev, 16);  // [C, OC, KH, KW]
  EXPECT_EQ(conv_transpose2d(img, kt, kb).dtype(), low);
  EXPECT_EQ(conv_transpose1d(img.select(2, 0), kt.select(2, 0), kb).dtype(), low);
  synchronize(dev);  // nothing left in flight at exit

  Tensor h = x.to(low);  // a 16-bit activation
  EXPECT_EQ(relu(h).dtype(), low);  // not listed: stays in its dtype
  EXPECT_EQ(softmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(log_softmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(sum(h).dtype(), DType::f32);
  EXPECT_EQ(mean(h).dtype(), DType::f32);
  EXPECT_EQ(layer_norm(h, {8}).dtype(), DType::f32);
  // batch_norm2d is not listed, as in PyTorch: a 16-bit activation keeps its
  // dtype with f32 parameters; an f32 one stays f32.
  Tensor bn_w = rnd({3}, dev, 11), bn_b = rnd({3}, dev, 12);
  EXPECT_EQ(batch_norm2d(img.to(low), {}, {}, bn_w, bn_b, true).dtype(), low);
  EXPECT_EQ(batch_norm2d(img, {}, {}, bn_w, bn_b, true).dtype(), DType::f32);
  EXPECT_EQ(mse_loss(h, x).dtype(), DType::f32);
  Tensor target = tensor(std::vector<std::int64_t>{0, 1, 2, 3}, {4}).to(dev);
  EXPECT_EQ(cross_entropy(h, target).dtype(), DType::f32);
  EXPECT_EQ(nll_loss(log_softmax(h, 1), target).dtype(), DType::f32);
}

TEST(AutocastPolicy, F64InputsAreLeftAlone) {
  AutocastGuard on;
  Tensor a = rnd({3, 4}, Device::cpu(), 11).to(DType::f64), b = rnd({4, 2}, Device::cpu(), 12).to(DType::f64);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f64);
}

TEST_P(AutocastPolicyOnEveryDevice, AttentionRunsInF32WhereTheDeviceHasNo16BitKernel) {
  const Device dev = GetParam();
  AutocastGuard on;
  Tensor q = rnd({1, 2, 4, 8}, dev, 13), k = rnd({1, 2, 5, 8}, dev, 14), v = rnd({1, 2, 5, 8}, dev, 15);
  const bool has16 = supports<AttentionForwardKernel>(backend(dev), autocast_dtype(dev));
  EXPECT_EQ(scaled_dot_product_attention(q, k, v).dtype(), has16 ? autocast_dtype(dev) : DType::f32);
}

// ---- results against f32 ----

RUMUS_DEVICE_SUITE(AutocastAccuracyOnEveryDevice);

TEST_P(AutocastAccuracyOnEveryDevice, LinearMatmulConvMatchF32WithinHalfPrecision) {
  const Device dev = GetParam();
  for (DType low : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dev.str() + " " + std::string(dtype_name(low)));
    Tensor x = rnd({33, 70}, dev, 20), w = rnd({19, 70}, dev, 21), b = rnd({19}, dev, 22);
    Tensor img = rnd({2, 3, 9, 9}, dev, 23), k = rnd({5, 3, 3, 3}, dev, 24), kb = rnd({5}, dev, 25);
    Tensor a3 = rnd({3, 17, 40}, dev, 26), b3 = rnd({3, 40, 12}, dev, 27);
    Tensor kt = rnd({3, 5, 3, 3}, dev, 28);
    Tensor lin, mm, conv, batched, deconv;
    {
      AutocastGuard on(low);
      lin = linear(x, w, b);
      mm = matmul(x, w.t());
      conv = conv2d(img, k, kb, {.padding = {1, 1}});
      batched = bmm(a3, b3);
      deconv = conv_transpose2d(img, kt, kb, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}});
    }
    for (const Tensor* t : {&lin, &mm, &conv, &batched, &deconv}) EXPECT_EQ(t->dtype(), low);
    expect_close(lin, linear(x, w, b), atol_for(low, 70), rtol_for(low), "linear");
    expect_close(mm, matmul(x, w.t()), atol_for(low, 70), rtol_for(low), "matmul");
    expect_close(conv, conv2d(img, k, kb, {.padding = {1, 1}}), atol_for(low, 27), rtol_for(low), "conv2d");
    expect_close(batched, bmm(a3, b3), atol_for(low, 40), rtol_for(low), "bmm");
    expect_close(deconv, conv_transpose2d(img, kt, kb, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}}),
                 atol_for(low, 27), rtol_for(low), "conv_transpose2d");
  }
}

RUMUS_DEVICE_SUITE(AutocastGradientsOnEveryDevice);

TEST_P(AutocastGradientsOnEveryDevice, ReachF32ParametersInF32) {
  const Device dev = GetParam();
  Tensor x = rnd({8, 12}, dev, 30), w = rnd({5, 12}, dev, 31).requires_grad_(),
         b = rnd({5}, dev, 32).requires_grad_(), k = rnd({2, 1, 3, 3}, dev, 33).requires_grad_();
  Tensor img = rnd({2, 1, 5, 5}, dev, 34);
  auto loss_of = [&] { return sum(square(linear(x, w, b))) + sum(conv2d(img, k)); };
  GradientStore ref = backward(loss_of());
  Tensor loss = autocast(DType::f16, loss_of);
  EXPECT_EQ(loss.dtype(), DType::f32);
  GradientStore grads = backward(loss);
  for (const Tensor* p : {&w, &b, &k}) {
    EXPECT_EQ(p->dtype(), DType::f32);
    ASSERT_EQ(grads.at(*p).dtype(), DType::f32);
    expect_close(grads.at(*p), ref.at(*p), 0.05, 0.01, "gradient");
  }
}

// A backward function that calls a listed op (linear's bias gradient is a
// sum) keeps the forward's dtype even when backward runs inside the scope.
TEST(AutocastGradients, BackwardRunsWithAutocastOff) {
  const TensorOptions half{.dtype = DType::f16};
  Tensor x = ones({4, 3}, half), w = ones({2, 3}, half).requires_grad_(), b = ones({2}, half).requires_grad_();
  AutocastGuard on(DType::f16);
  GradientStore grads = backward(sum(linear(x, w, b)));
  EXPECT_EQ(grads.at(b).dtype(), DType::f16);
  EXPECT_EQ(grads.at(w).dtype(), DType::f16);
  EXPECT_TRUE(autocast_enabled());  // restored after backward
}

// One SGD step of a two-layer MLP under autocast and a GradScaler lands where
// the f32 step does; the parameters stay f32.
TEST_P(AutocastGradientsOnEveryDevice, MlpStepWithScalerMatchesF32Step) {
  const Device dev = GetParam();
  auto make = [&] {
    return std::vector<Tensor>{rnd({32, 20}, dev, 40).mul_(0.3).requires_grad_(),
                               rnd({32}, dev, 41).mul_(0.1).requires_grad_(),
                               rnd({10, 32}, dev, 42).mul_(0.3).requires_grad_(),
                               rnd({10}, dev, 43).mul_(0.1).requires_grad_()};
  };
  Tensor x = rnd({16, 20}, dev, 44);
  Generator gen(45);
  Tensor y = randint(0, 10, {16}, {.dtype = DType::i64, .device = dev}, &gen);
  auto loss_of = [&](const std::vector<Tensor>& p) {
    return cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), y);
  };
  std::vector<Tensor> ref = make(), amp = make();
  optim::SGD ref_opt(ref, {.lr = 0.5}), amp_opt(amp, {.lr = 0.5});
  ref_opt.step(backward(loss_of(ref)));

  optim::GradScaler scaler;
  Tensor loss = autocast([&] { return loss_of(amp); });
  GradientStore grads = backward(scaler.scale(loss));
  EXPECT_TRUE(scaler.step(amp_opt, grads));
  scaler.update();
  for (std::size_t i = 0; i < amp.size(); ++i) {
    EXPECT_EQ(amp[i].dtype(), DType::f32);
    const double tol = dev.is_cpu() ? 2e-2 : 5e-3;  // bf16 on the CPU, f16 on GPUs
    expect_close(amp[i], ref[i], tol, tol, "parameter " + std::to_string(i));
  }
}

// ---- 16-bit GEMM kernels ----

namespace {

TensorArg arg_of(const Tensor& t) { return {t.storage_ptr().get(), t.dtype(), &t.layout()}; }

// C = A(m x k) B(k x n) + beta * C through the device's gemm kernel, with C's
// rows ldc = n + 3 apart inside a buffer whose gap entries must stay put.
void check_gemm(Device dev, DType in, DType out, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
                bool trans_b, double beta) {
  SCOPED_TRACE(dev.str() + " " + std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)) + " " +
               std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + (trans_a ? " tA" : "") +
               (trans_b ? " tB" : "") + " beta " + std::to_string(beta));
  const std::int64_t ldc = n + 3;
  Tensor a = rnd(trans_a ? Shape{k, m} : Shape{m, k}, dev, 50).to(in);
  Tensor b = rnd(trans_b ? Shape{n, k} : Shape{k, n}, dev, 51).to(in);
  Tensor cbuf = rnd({m, ldc}, dev, 52).to(out);
  Tensor before = cbuf.cpu().to(DType::f64);
  Tensor c = cbuf.slice(1, 0, n);
  GemmArgs g = GemmArgs::packed(arg_of(a), arg_of(b), arg_of(c), m, n, k, {.trans_a = trans_a, .trans_b = trans_b});
  g.ldc = ldc;
  g.beta = beta;
  run_kernel<GemmKernel>(backend(dev), g);
  // Reference in f64 from the same rounded inputs.
  Tensor a64 = a.cpu().to(DType::f64), b64 = b.cpu().to(DType::f64);
  if (trans_a) a64 = a64.t();
  if (trans_b) b64 = b64.t();
  Tensor want = add(matmul(a64, b64), before.slice(1, 0, n), beta);
  const double eps = out == DType::f32 ? 1e-6 : out == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  expect_close(c, want, 1e-4 * std::sqrt(double(k)) + 2 * eps, 2 * eps, "C");
  expect_close(cbuf.slice(1, n, ldc), before.slice(1, n, ldc), 0, 0, "gap between C's rows");
}

}  // namespace

RUMUS_DEVICE_SUITE(Gemm16OnEveryDevice);

TEST_P(Gemm16OnEveryDevice, InputsAccumulateInF32) {
  const Device dev = GetParam();
  for (DType in : {DType::f16, DType::bf16}) {
    for (DType out : {in, DType::f32}) {
      check_gemm(dev, in, out, 37, 29, 45, false, false, 0.0);  // ragged
      check_gemm(dev, in, out, 37, 29, 45, true, true, 1.0);
      check_gemm(dev, in, out, 64, 64, 64, false, true, 1.0);   // aligned tiles (ldc keeps C unaligned)
    }
  }
}

TEST(Gemm16, AlignedAndSplitKPathsOnVulkan) {
  if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  const Device dev = Device::vulkan(0);
  for (DType in : {DType::f16, DType::bf16}) {
    for (DType out : {in, DType::f32}) {
      SCOPED_TRACE(std::string(dtype_name(in)) + "->" + std::string(dtype_name(out)));
      // Aligned: every dim a multiple of the tile, contiguous C (vec4 loads and stores).
      Tensor a = rnd({128, 64}, dev, 60).to(in), b = rnd({64, 128}, dev, 61).to(in);
      Tensor c = zeros({128, 128}, {.dtype = out, .device = dev});
      {
        run_kernel<GemmKernel>(backend(dev), GemmArgs::packed(arg_of(a), arg_of(b), arg_of(c), 128, 128, 64));
      }
      const double eps = out == DType::f32 ? 1e-6 : out == DType::f16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      expect_close(c, matmul(a.cpu().to(DType::f64), b.cpu().to(DType::f64)), 1e-3 + 2 * eps * 8, 2 * eps, "aligned");
      // Few output tiles, long K: split across workgroups, slices summed in f32.
      Tensor sa = rnd({8, 2048}, dev, 62).to(in), sb = rnd({2048, 8}, dev, 63).to(in);
      Tensor sc = full({8, 8}, 1.0, {.dtype = out, .device = dev});
      GemmArgs g = GemmArgs::packed(arg_of(sa), arg_of(sb), arg_of(sc), 8, 8, 2048);
      g.beta = 1.0;
      run_kernel<GemmKernel>(backend(dev), g);
      Tensor want = add(matmul(sa.cpu().to(DType::f64), sb.cpu().to(DType::f64)), 1.0);
      expect_close(sc, want, 5e-3 + 2 * eps * 45, 2 * eps, "split-K");
    }
  }
}

TEST(Gemm16, MixedInputDtypesAreRejectedOnVulkan) {
  if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  const Device dev = Device::vulkan(0);
  Tensor a = rnd({4, 4}, dev, 70).to(DType::f16), b = rnd({4, 4}, dev, 71), c = zeros({4, 4}, {.device = dev});
  const GemmArgs g = GemmArgs::packed(arg_of(a), arg_of(b), arg_of(c), 4, 4, 4);
  expect_error<DTypeError>([&] { run_kernel<GemmKernel>(backend(dev), g); }, "got f16 x f32 -> f32");
}

// ---- GradScaler ----

namespace {

// A parameter, its gradient store for a loss of sum(p * 3) scaled by `scaler`.
struct ScaledParam {
  Tensor p = rnd({6}, Device::cpu(), 80).requires_grad_();
  optim::SGD opt{{p}, {.lr = 0.1}};
  GradientStore grads(optim::GradScaler& scaler) { return backward(scaler.scale(sum(mul(p, 3.0)))); }
};

Tensor with_value_at(const Tensor& t, std::int64_t i, double v) {
  auto values = t.to_vector<float>();
  values[std::size_t(i)] = float(v);
  return tensor(values, t.shape());
}

}  // namespace

TEST(GradScaler, DefaultsArePyTorchs) {
  optim::GradScaler s;
  EXPECT_EQ(s.options().init_scale, 65536.0);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_EQ(s.get_scale(), 65536.0);
}

TEST(GradScaler, ScaleMultipliesAndUnscaleRestoresTheGradients) {
  ScaledParam su;
  optim::GradScaler scaler;
  Tensor loss = sum(mul(su.p, 3.0));
  EXPECT_DOUBLE_EQ(scaler.scale(loss).item(), loss.item() * scaler.get_scale());
  GradientStore plain = backward(sum(mul(su.p, 3.0)));
  GradientStore grads = su.grads(scaler);
  expect_close(grads.at(su.p), mul(plain.at(su.p), scaler.get_scale()), 0, 0, "scaled");
  scaler.unscale_(su.opt, grads);
  expect_close(grads.at(su.p), plain.at(su.p), 0, 0, "unscaled");
  // step() after unscale_ does not divide again.
  Tensor before = su.p.detach().clone();
  EXPECT_TRUE(scaler.step(su.opt, grads));
  expect_close(su.p, sub(before, mul(plain.at(su.p), 0.1)), 1e-6, 0, "stepped once with the true gradient");
}

TEST(GradScaler, SkipsTheStepOnInfOrNanAndBacksOff) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(bad);
    ScaledParam su;
    optim::GradScaler scaler;
    GradientStore grads = su.grads(scaler);
    grads.insert(su.p.grad_id(), with_value_at(grads.at(su.p), 2, bad));
    Tensor before = su.p.detach().clone();
    EXPECT_FALSE(scaler.step(su.opt, grads));
    expect_close(su.p, before, 0, 0, "parameters untouched");
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 65536.0 * 0.5);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanStepsInARow) {
  ScaledParam su;
  optim::GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto clean_step = [&] {
    GradientStore g = su.grads(scaler);
    EXPECT_TRUE(scaler.step(su.opt, g));
    scaler.update();
  };
  clean_step();
  clean_step();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  // An overflow resets the count.
  GradientStore g = su.grads(scaler);
  g.insert(su.p.grad_id(), with_value_at(g.at(su.p), 0, std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(scaler.step(su.opt, g));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 4.0);
  clean_step();
  clean_step();
  EXPECT_EQ(scaler.get_scale(), 4.0);
  clean_step();
  EXPECT_EQ(scaler.get_scale(), 8.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// With all-zero gradients every step is clean: the scale grows until it
// saturates at the largest finite f32 instead of reaching 2^128 (inf in f32,
// which would make the scaled loss NaN and skip every step from then on).
TEST(GradScaler, GrowthSaturatesAtTheLargestFiniteF32) {
  Tensor p = rnd({4}, Device::cpu(), 81).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::GradScaler scaler({.init_scale = 0x1p120, .growth_interval = 1});
  for (int i = 0; i < 12; ++i) {
    SCOPED_TRACE(i);
    GradientStore g = backward(scaler.scale(sum(mul(p, 0.0))));
    EXPECT_TRUE(scaler.step(opt, g));
    scaler.update();
    EXPECT_TRUE(std::isfinite(float(scaler.get_scale())));
  }
  EXPECT_EQ(scaler.get_scale(), double(std::numeric_limits<float>::max()));
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, UnscaleOfAWholeStoreIsSeenByStep) {
  ScaledParam su;
  optim::GradScaler scaler;
  GradientStore grads = su.grads(scaler);
  grads.insert(su.p.grad_id(), with_value_at(grads.at(su.p), 1, std::numeric_limits<double>::quiet_NaN()));
  scaler.unscale_(grads);
  EXPECT_FALSE(scaler.step(su.opt, grads));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScaler, MisuseIsAnError) {
  ScaledParam su;
  optim::GradScaler scaler;
  GradientStore grads = su.grads(scaler);
  scaler.unscale_(su.opt, grads);
  expect_error<Error>([&] { scaler.unscale_(su.opt, grads); }, "already called for this optimizer");
  scaler.step(su.opt, grads);
  expect_error<Error>([&] { scaler.step(su.opt, grads); }, "GradScaler.step: already called");
  scaler.update();
  expect_error<Error>([&] { scaler.update(); }, "no gradients were unscaled or stepped");
  GradientStore half;
  half.insert(su.p.grad_id(), ones({6}, {.dtype = DType::f16}));
  expect_error<DTypeError>([&] { scaler.unscale_(su.opt, half); }, "a gradient is f16");
  expect_error<ValueError>([] { optim::GradScaler s({.backoff_factor = 1.5}); }, "expected 0 < backoff_factor < 1");
  expect_error<ValueError>([] { optim::GradScaler s({.growth_interval = 0}); }, "expected growth_interval >= 1");
}

TEST(GradScaler, DisabledPassesThrough) {
  ScaledParam su;
  optim::GradScaler scaler({.enabled = false});
  Tensor loss = sum(mul(su.p, 3.0));
  EXPECT_EQ(scaler.scale(loss).item(), loss.item());
  GradientStore grads = backward(loss);
  grads.insert(su.p.grad_id(), with_value_at(grads.at(su.p), 0, std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(scaler.step(su.opt, grads));  // no checks: the optimizer sees what it is given
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

TEST(GradScaler, StateDictRoundTrips) {
  optim::GradScaler a({.init_scale = 128.0, .growth_interval = 5});
  ScaledParam su;
  GradientStore g = su.grads(a);
  a.step(su.opt, g);
  a.update();
  optim::GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 128.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  StateDict bad = a.state_dict();
  bad["scale"] = scalar_tensor(-1.0);
  expect_error<ValueError>([&] { b.load_state_dict(bad); }, "expected a finite scale > 0, got -1");
}

// ---- GradScaler without host reads (device_side) ----

RUMUS_DEVICE_SUITE(DeviceSideScalerOnEveryDevice);

namespace {

enum class ScaledOpt { sgd_momentum, adam };

struct ScalerRun {
  std::vector<std::vector<float>> params;  // every parameter after the last step
  std::vector<std::vector<float>> first;   // the first parameter after each step
  std::vector<double> scales;              // after each update()
  std::vector<std::int64_t> trackers;
  std::vector<bool> ran;                   // step()'s answers
  double step_count = 0;                   // the optimizer's count for the first parameter
  double last_step_count = 0;              // and for the last one (no gradient at step 5)
};

constexpr int kScalerSteps = 8;
bool poisoned(int i) { return i == 0 || i == 3 || i == 4; }  // the first, and two in a row

// Eight autocast steps of a small MLP with a GradScaler (init 1024, growth
// every 2 clean steps), host or device side; the gradients of steps 0, 3 and
// 4 are made inf or NaN before the step.
ScalerRun scaler_run(Device dev, ScaledOpt kind, bool device_side) {
  std::vector<Tensor> p{rnd({12, 8}, dev, 90).mul_(0.3).requires_grad_(), rnd({12}, dev, 91).mul_(0.1).requires_grad_(),
                        rnd({4, 12}, dev, 92).mul_(0.3).requires_grad_(), rnd({4}, dev, 93).mul_(0.1).requires_grad_()};
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == ScaledOpt::sgd_momentum) opt = std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  else opt = std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 1e-2});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2, .device_side = device_side});
  ScalerRun run;
  for (int i = 0; i < kScalerSteps; ++i) {
    Tensor x = rnd({6, 8}, dev, 100 + i);
    Generator gen(200 + i);
    Tensor y = randint(0, 4, {6}, {.dtype = DType::i64, .device = dev}, &gen);
    Tensor loss = autocast([&] { return cross_entropy(linear(relu(linear(x, p[0], p[1])), p[2], p[3]), y); });
    GradientStore grads = backward(scaler.scale(loss));
    if (poisoned(i)) grads.insert(p[2].grad_id(), mul(grads.at(p[2]), std::numeric_limits<double>::infinity()));
    if (i == 5) {  // the last parameter sits this step out: its count must stay where the others' moves
      GradientStore some;
      for (int k = 0; k < 3; ++k) some.insert(p[k].grad_id(), grads.at(p[k]));
      grads = std::move(some);
    }
    // SGD's momentum changes each step, as a one-cycle schedule changes it.
    if (kind == ScaledOpt::sgd_momentum) opt->param_groups()[0].options["momentum"] = 0.9 - 0.02 * i;
    run.ran.push_back(scaler.step(*opt, grads));
    scaler.update();
    run.first.push_back(p[0].to_vector<float>());
    run.scales.push_back(scaler.get_scale());
    run.trackers.push_back(scaler.growth_tracker());
  }
  for (const Tensor& t : p) run.params.push_back(t.to_vector<float>());
  run.step_count = opt->state_dict().at("state.0.0.step").item();
  run.last_step_count = opt->state_dict().at("state.0.3.step").item();
  return run;
}

}  // namespace

// The device-side scaler (flag, scale and count on the device, the step
// skipped by the fused kernel) follows the host-side one step for step over
// a run with a skipped first step and two skips in a row: the same scales and
// counts, parameters untouched by skipped steps, and skipped steps not counted
// by the optimizer (SGD's momentum starts at the first step applied, Adam's
// bias correction counts applied steps only), also where one parameter of
// the group has no gradient in a step (the group's shared count splits), and
// with SGD's momentum changed at every step.
TEST_P(DeviceSideScalerOnEveryDevice, MatchesTheHostScalerOverStepsWithInfs) {
  const Device dev = GetParam();
  const std::vector<double> scales{512, 512, 1024, 512, 256, 256, 512, 512};
  const std::vector<std::int64_t> trackers{0, 1, 0, 0, 0, 1, 0, 1};
  for (ScaledOpt kind : {ScaledOpt::sgd_momentum, ScaledOpt::adam}) {
    SCOPED_TRACE(kind == ScaledOpt::adam ? "adam" : "sgd momentum");
    const ScalerRun host = scaler_run(dev, kind, false), device = scaler_run(dev, kind, true);
    for (const ScalerRun* run : {&host, &device}) {
      EXPECT_EQ(run->scales, scales);
      EXPECT_EQ(run->trackers, trackers);
      EXPECT_EQ(run->step_count, kScalerSteps - 3) << "skipped steps are not counted";
      EXPECT_EQ(run->last_step_count, kScalerSteps - 4) << "nor steps without a gradient";
      for (int i = 1; i < kScalerSteps; ++i)
        if (poisoned(i)) EXPECT_EQ(run->first[i], run->first[i - 1]) << "step " << i << " was skipped";
        else EXPECT_NE(run->first[i], run->first[i - 1]) << "step " << i << " ran";
    }
    EXPECT_EQ(host.ran, (std::vector<bool>{false, true, true, false, false, true, true, true}));
    EXPECT_EQ(device.ran, std::vector<bool>(kScalerSteps, true)) << "device_side: the update is always issued";
    for (std::size_t k = 0; k < host.params.size(); ++k) {
      if (kind == ScaledOpt::sgd_momentum) {
        EXPECT_EQ(device.params[k], host.params[k]) << "parameter " << k;  // the same floats reach the kernel
      } else {
        // Adam's bias corrections: advanced in f32 on the device, from double on the host.
        for (std::size_t j = 0; j < host.params[k].size(); ++j)
          ASSERT_NEAR(device.params[k][j], host.params[k][j], 1e-7) << "parameter " << k << " at " << j;
      }
    }
  }
}

// An optimizer without a fused update (RMSprop) reads the flag on the host
// instead, and skips the same way.
TEST_P(DeviceSideScalerOnEveryDevice, UnfusedOptimizerReadsTheFlag) {
  const Device dev = GetParam();
  Tensor p = rnd({6}, dev, 94).requires_grad_();
  optim::RMSprop opt({p}, {.lr = 0.01});
  optim::GradScaler scaler({.device_side = true});
  GradientStore grads = backward(scaler.scale(sum(mul(p, 3.0))));
  grads.insert(p.grad_id(), mul(grads.at(p), std::numeric_limits<double>::infinity()));
  const std::vector<float> before = p.to_vector<float>();
  scaler.step(opt, grads);
  scaler.update();
  EXPECT_EQ(p.to_vector<float>(), before);
  EXPECT_EQ(opt.state_dict().at("state.0.0.step").item(), 0);
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  grads = backward(scaler.scale(sum(mul(p, 3.0))));
  scaler.step(opt, grads);
  scaler.update();
  EXPECT_NE(p.to_vector<float>(), before);
  EXPECT_EQ(opt.state_dict().at("state.0.0.step").item(), 1);
}

// On a GPU the device-side step reads nothing back, where the host-side
// step reads the flag once.
TEST(DeviceSideScaler, StepAndUpdateReadNothingBackOnAGpu) {
  REQUIRE_VULKAN();
  for (bool device_side : {true, false}) {
    SCOPED_TRACE(device_side ? "device side" : "host side");
    Tensor p = rnd({6, 4}, kGpu, 95).requires_grad_();
    optim::Adam opt({p}, {.lr = 1e-2});
    optim::GradScaler scaler({.init_scale = 1024.0, .device_side = device_side});
    Tensor x = rnd({3, 4}, kGpu, 96);
    auto step = [&] {
      GradientStore grads = backward(scaler.scale(sum(autocast([&] { return matmul(x, p.t()); }))));
      scaler.step(opt, grads);
      scaler.update();
    };
    step();  // the first makes the state
    const std::uint64_t reads = device_backend(kGpu).stats().device_to_host;
    step();
    step();
    const std::uint64_t more = device_backend(kGpu).stats().device_to_host - reads;
    if (device_side) EXPECT_EQ(more, 0u);
    else EXPECT_EQ(more, 2u) << "one read of the flag per step";
    EXPECT_EQ(opt.state_dict().at("state.0.0.step").item(), 3);
  }
}

TEST(DeviceSideScaler, MisuseIsAnError) {
  expect_error<ValueError>([] { optim::GradScaler s({.growth_interval = (std::int64_t(1) << 24) + 1}); },
                           "expected growth_interval >= 1 and <= 2^24");
  Tensor p = rnd({4}, Device::cpu(), 97).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  GradientStore grads = backward(sum(p));
  expect_error<ShapeError>([&] { opt.step(grads, zeros({2})); },
                           "SGD.step: expected found_inf to be a one-element f32 tensor, got f32 [2]");
  if (have_vulkan())
    expect_error<DeviceError>([&] { opt.step(grads, zeros({1}, {.device = kGpu})); },
                              "SGD.step: found_inf is on vulkan:0 but a parameter is on cpu");
  // The composed updates (here of a strided parameter) cannot skip on the device.
  Tensor strided = zeros({4, 3}).t(), g = ones({3, 4}), buf = zeros({3, 4}), scalars = zeros({5});
  expect_error<DeviceError>([&] { sgd_step_(strided, g, buf, {.lr = 0.1, .momentum = 0.9, .scalars = scalars}); },
                            "sgd_step_: a step skipped on the device (scalars with a found-inf flag) needs the fused kernel");
  expect_error<ShapeError>([&] { sgd_step_(strided, g, buf, {.lr = 0.1, .scalars = zeros({6})}); },
                           "expected scalars to be a contiguous f32 tensor of 4 or 5 elements, got f32 [6]");
}

// ---- the fused unscale-and-check ----

RUMUS_DEVICE_SUITE(AmpUnscaleOnEveryDevice);

// amp_unscale against the composed ops, on every device: values, the flag for
// inf, NaN and overflow, a flag that stays set, strided and broadcast
// gradients, f64 and f16 (through the composed path where no kernel has them).
TEST_P(AmpUnscaleOnEveryDevice, MatchesTheComposedOpsAndFlagsInfNanAndOverflow) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Device dev = GetParam();
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    if (!dev.is_cpu() && dt == DType::f64 && !supports<UnaryKernel>(backend(dev), DType::f64)) continue;
    SCOPED_TRACE(dtype_name(dt));
    const Tensor big = rnd({100003}, dev, 3).to(dt);  // past the CPU's parallel grain and one workgroup
    const Tensor strided = rnd({40, 30}, dev, 4).to(dt).t();
    const Tensor broadcast = rnd({1, 50}, dev, 5).to(dt).expand({20, 50});
    for (const Tensor& g : {big, strided, broadcast}) {
      for (double inv : {1.0 / 65536, 3.0}) {
        Tensor flag = zeros({1}, {.device = dev});
        Tensor out = amp_unscale(g, flag, inv);
        EXPECT_EQ(out.dtype(), g.dtype());
        expect_close(out, mul(g, inv), 0, 0, "unscaled values");
        EXPECT_EQ(flag.item(), 0.0);
        // The factor read from a device tensor (a view at an offset) gives the same values.
        const Tensor inv_t = full({3}, inv, {.device = dev}).narrow(0, 1, 1);
        expect_close(amp_unscale(g, flag, inv_t), out, 0, 0, "unscaled by a tensor");
        EXPECT_EQ(flag.item(), 0.0);
      }
    }
    for (double bad : {inf, -inf, nan}) {
      Tensor flag = zeros({}, {.device = dev});
      amp_unscale(big, flag, 0.5);
      EXPECT_EQ(flag.item(), 0.0);
      amp_unscale(with_value_at(big.to(DType::f32).cpu(), 77777, bad).to(dt).to(dev), flag, 0.5);
      EXPECT_EQ(flag.item(), 1.0) << bad;
      amp_unscale(big, flag, 0.5);  // a later clean gradient leaves the flag set
      EXPECT_EQ(flag.item(), 1.0);
    }
    // Finite gradients whose product overflows, by a factor given either way.
    const Tensor huge = mul(big, dt == DType::f64 ? 1e300 : dt == DType::f32 ? 1e38 : 6e4);
    Tensor flag = zeros({1}, {.device = dev});
    amp_unscale(huge, flag, 1e10);
    EXPECT_EQ(flag.item(), 1.0);
    Tensor flag_t = zeros({1}, {.device = dev});
    amp_unscale(huge, flag_t, full({1}, 1e10, {.device = dev}));
    EXPECT_EQ(flag_t.item(), 1.0);
  }
}

TEST(AmpUnscale, DevicesAgreeAndBadArgumentsAreErrors) {
  if (have_vulkan()) {
    const Tensor g = rnd({3000}, Device::cpu(), 8);
    Tensor flag_cpu = zeros({1}), flag_gpu = zeros({1}, {.device = Device::vulkan(0)});
    expect_close(amp_unscale(g.to(Device::vulkan(0)), flag_gpu, 0.125), amp_unscale(g, flag_cpu, 0.125), 0, 0,
                 "vulkan against cpu");
    Tensor flag_other = zeros({1});
    expect_error<DeviceError>([&] { amp_unscale(g.to(Device::vulkan(0)), flag_other, 1.0); }, "amp_unscale");
  }
  Tensor g = rnd({10}, Device::cpu(), 9), flag = zeros({1});
  Tensor two = zeros({2}), f64_flag = zeros({1}, {.dtype = DType::f64});
  expect_error<ShapeError>([&] { amp_unscale(g, two, 1.0); },
                           "amp_unscale: expected found_inf to be a one-element f32 tensor, got f32 [2]");
  expect_error<ShapeError>([&] { amp_unscale(g, f64_flag, 1.0); }, "one-element f32 tensor, got f64 [1]");
  expect_error<ValueError>([&] { amp_unscale(g, flag, std::numeric_limits<double>::infinity()); },
                           "amp_unscale: expected a finite inv_scale, got inf");
  Tensor ints = zeros({3}, {.dtype = DType::i32});
  expect_error<DTypeError>([&] { amp_unscale(ints, flag, 1.0); }, "amp_unscale: expected a floating-point tensor");
  expect_error<ShapeError>([&] { amp_unscale(g, flag, zeros({2})); },
                           "amp_unscale: expected inv_scale to be a one-element f32 tensor, got f32 [2]");
  expect_error<ValueError>([&] { amp_unscale(g, flag, Tensor()); }, "amp_unscale: expected a defined inv_scale tensor");
  if (have_vulkan())
    expect_error<DeviceError>([&] { amp_unscale(g, flag, ones({1}, {.device = Device::vulkan(0)})); }, "amp_unscale");
  EXPECT_EQ(flag.item(), 0.0);
}

// ---- several gradients at once, and the scale's update ----

RUMUS_DEVICE_SUITE(AmpForeachOnEveryDevice);

// amp_unscale_foreach against amp_unscale one gradient at a time: the same
// values and flag for more gradients than one kernel's slots, strided,
// broadcast and offset views, an empty one, f16 (and f64 where the device has
// it) through the per-tensor path; an inf, a NaN or an overflow in any one
// gradient sets the flag; a flag inside a larger tensor gets it in place.
TEST_P(AmpForeachOnEveryDevice, MatchesAmpUnscaleOneByOne) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const Device dev = GetParam();
  std::vector<Tensor> grads;
  for (int i = 0; i < 9; ++i) grads.push_back(rnd({100 + 37 * i}, dev, 20 + i));
  grads.push_back(rnd({40, 30}, dev, 40).t());
  grads.push_back(rnd({1, 50}, dev, 41).expand({20, 50}));
  grads.push_back(rnd({300}, dev, 42).narrow(0, 7, 200));
  grads.push_back(rnd({100003}, dev, 43));  // past the CPU's parallel grain and one workgroup
  grads.push_back(zeros({0}, {.device = dev}));
  grads.push_back(rnd({64}, dev, 44).to(DType::f16));
  if (dev.is_cpu() || supports<UnaryKernel>(backend(dev), DType::f64)) grads.push_back(rnd({77}, dev, 45).to(DType::f64));
  const Tensor inv = full({1}, 1.0 / 1024, {.device = dev});
  Tensor flag = zeros({1}, {.device = dev});
  const std::vector<Tensor> out = amp_unscale_foreach(grads, flag, inv);
  ASSERT_EQ(out.size(), grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    Tensor own = zeros({1}, {.device = dev});
    EXPECT_EQ(out[i].dtype(), grads[i].dtype()) << i;
    expect_close(out[i], amp_unscale(grads[i], own, inv), 0, 0, "gradient " + std::to_string(i));
  }
  EXPECT_EQ(flag.item(), 0.0);
  for (std::size_t at : {std::size_t(0), std::size_t(7), std::size_t(9), std::size_t(12)}) {
    for (double bad : {inf, nan, 1e30}) {  // 1e30 / 1024 is finite; times 1e10 below it overflows
      std::vector<Tensor> with_bad = grads;
      const Tensor g = grads[at].contiguous().to(DType::f32).cpu();
      with_bad[at] = with_value_at(g, g.numel() - 1, bad).to(grads[at].dtype()).to(dev);
      Tensor f = zeros({1}, {.device = dev});
      amp_unscale_foreach(with_bad, f, bad == 1e30 ? full({1}, 1e10, {.device = dev}) : inv);
      EXPECT_EQ(f.item(), 1.0) << "gradient " << at << " holding " << bad;
    }
  }
  // A flag inside a larger tensor: set in place, its neighbours untouched.
  Tensor flags = zeros({3}, {.device = dev}), middle = flags.narrow(0, 1, 1);
  std::vector<Tensor> two = {grads[0], with_value_at(grads[1].cpu(), 3, inf).to(dev)};
  const std::vector<Tensor> again = amp_unscale_foreach(two, middle, inv);
  expect_close(again[0], out[0], 0, 0, "with a flag at an offset");
  expect_close(flags, tensor(std::vector<float>{0, 1, 0}, {3}).to(dev), 0, 0, "the flag at an offset");
}

// Six dense f32 gradients (a kernel's slots) are checked in one kernel, nine in two.
TEST(AmpForeach, OneKernelPerSixGradientsOnVulkan) {
  if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  const Device gpu = Device::vulkan(0);
  for (std::size_t count : {std::size_t(6), std::size_t(9)}) {
    std::vector<Tensor> grads;
    for (std::size_t i = 0; i < count; ++i) grads.push_back(rnd({std::int64_t(1000 + i)}, gpu, 50 + i));
    Tensor flag = zeros({1}, {.device = gpu}), inv = full({1}, 0.5, {.device = gpu});
    synchronize(gpu);
    const std::uint64_t before = device_stats(gpu).commands;
    amp_unscale_foreach(grads, flag, inv);
    EXPECT_EQ(device_stats(gpu).commands - before, count == 6 ? 1u : 2u) << count;
  }
}

TEST(AmpForeach, BadArgumentsAreErrors) {
  const Tensor g = rnd({10}, Device::cpu(), 9), inv = ones({1});
  Tensor flag = zeros({1}), two = zeros({2});
  std::vector<Tensor> one = {g};
  expect_error<ShapeError>([&] { amp_unscale_foreach(one, two, inv); },
                           "amp_unscale_foreach: expected found_inf to be a one-element f32 tensor, got f32 [2]");
  expect_error<ShapeError>([&] { amp_unscale_foreach(one, flag, zeros({1}, {.dtype = DType::f64})); },
                           "amp_unscale_foreach: expected inv_scale to be a one-element f32 tensor, got f64 [1]");
  expect_error<ValueError>([&] { amp_unscale_foreach(one, flag, Tensor()); },
                           "amp_unscale_foreach: expected a defined inv_scale tensor");
  std::vector<Tensor> with_undefined = {g, Tensor()};
  expect_error<ValueError>([&] { amp_unscale_foreach(with_undefined, flag, inv); },
                           "amp_unscale_foreach: gradient 1 is undefined");
  std::vector<Tensor> ints = {zeros({3}, {.dtype = DType::i32})};
  expect_error<DTypeError>([&] { amp_unscale_foreach(ints, flag, inv); },
                           "amp_unscale_foreach: expected a floating-point tensor");
  if (have_vulkan()) {
    std::vector<Tensor> on_gpu = {g.to(Device::vulkan(0))};
    expect_error<DeviceError>([&] { amp_unscale_foreach(on_gpu, flag, inv); },
                              "amp_unscale_foreach: gradient 0 is on vulkan:0 but found_inf is on cpu");
    expect_error<DeviceError>([&] { amp_unscale_foreach(one, flag, ones({1}, {.device = Device::vulkan(0)})); },
                              "amp_unscale_foreach");
  }
  EXPECT_EQ(flag.item(), 0.0);
}

RUMUS_DEVICE_SUITE(AmpUpdateScaleOnEveryDevice);

// amp_update_scale_ step by step against PyTorch's rule computed on the host:
// growth after growth_interval clean steps in a row, backoff and a restarted
// count on an inf, growth saturating at the largest finite f32.
TEST_P(AmpUpdateScaleOnEveryDevice, FollowsPyTorchsRule) {
  const Device dev = GetParam();
  const float max = std::numeric_limits<float>::max();
  for (float start : {65536.0f, max / 1.5f}) {
    Tensor scale = full({1}, start, {.device = dev}), tracker = zeros({1}, {.device = dev});
    float want_scale = start, want_count = 0;
    bool saturated = false;
    const int flags[] = {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0};
    for (int step = 0; step < int(std::size(flags)); ++step) {
      const Tensor found = full({1}, flags[step] ? 1.0 : 0.0, {.device = dev});
      Tensor& returned = amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3);
      EXPECT_EQ(&returned, &scale);
      if (flags[step]) {
        want_scale *= 0.5f;
        want_count = 0;
      } else if (++want_count == 3) {
        saturated = saturated || want_scale * 2.0f > max;
        want_scale = std::min(want_scale * 2.0f, max);
        want_count = 0;
      }
      EXPECT_EQ(float(scale.item()), want_scale) << "step " << step << " from " << start;
      EXPECT_EQ(float(tracker.item()), want_count) << "step " << step << " from " << start;
    }
    EXPECT_EQ(saturated, start > 65536.0f);  // the large start's first growth stops at the largest f32
  }
}

TEST(AmpUpdateScale, BadArgumentsAreErrors) {
  Tensor scale = ones({1}), tracker = zeros({1}), found = zeros({1});
  expect_error<ShapeError>([&] { Tensor s = ones({2}); amp_update_scale_(s, tracker, found, 2, 0.5, 10); },
                           "amp_update_scale_: expected scale to be a one-element f32 tensor, got f32 [2]");
  expect_error<ShapeError>(
      [&] { Tensor t = zeros({1}, {.dtype = DType::f64}); amp_update_scale_(scale, t, found, 2, 0.5, 10); },
      "amp_update_scale_: expected growth_tracker to be a one-element f32 tensor, got f64 [1]");
  expect_error<ValueError>([&] { amp_update_scale_(scale, tracker, Tensor(), 2, 0.5, 10); },
                           "amp_update_scale_: expected a defined found_inf tensor");
  expect_error<ValueError>([&] { amp_update_scale_(scale, tracker, found, 2, 0.5, 0); },
                           "amp_update_scale_: expected growth_interval >= 1 and <= 2^24 (an f32 count), got 0");
  expect_error<ValueError>([&] { amp_update_scale_(scale, tracker, found, std::nan(""), 0.5, 10); },
                           "amp_update_scale_: expected finite growth and backoff factors > 0");
  if (have_vulkan())
    expect_error<DeviceError>(
        [&] { amp_update_scale_(scale, tracker, zeros({1}, {.device = Device::vulkan(0)}), 2, 0.5, 10); },
        "amp_update_scale_");
  EXPECT_EQ(scale.item(), 1.0);
  EXPECT_EQ(tracker.item(), 0.0);
}

TEST_P(AutocastPolicyOnEveryDevice, MathLibraryFunctionsThat16BitsHurtRunInF32) {
  const Device dev = GetParam();
  Tensor h = rnd({4, 8}, dev, 9).to(DType::f16);
  AutocastGuard on;
  EXPECT_EQ(tan(h).dtype(), DType::f32);
  EXPECT_EQ(log1p(h).dtype(), DType::f32);
  EXPECT_EQ(norm(h, 2, {1}).dtype(), DType::f32);
  EXPECT_EQ(prod(h, 1).dtype(), DType::f32);
  EXPECT_EQ(sin(h).dtype(), DType::f16);  // not listed: its inputs' dtype
}
