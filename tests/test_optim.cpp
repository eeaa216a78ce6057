// Optimizer steps and scheduler curves against values computed with PyTorch 1.13
// (torch.optim, float64) for the same parameters and gradients.
#include <gtest/gtest.h>

#include <rumus/rumus.hpp>

#include "expect_error.hpp"

using namespace rumus;
using rumus::testing::expect_error;

namespace {

// Two steps with gradients [0.5, 0.25] then [-0.1, 0.4] on p = [1, -2].
template <class Opt, class Options>
std::vector<std::vector<double>> two_steps(Options options) {
  Tensor p = tensor({1.0, -2.0}, {.dtype = DType::f64}).requires_grad_();
  Opt opt(std::vector<Tensor>{p}, options);
  std::vector<std::vector<double>> out;
  for (auto g : {tensor({0.5, 0.25}, {.dtype = DType::f64}), tensor({-0.1, 0.4}, {.dtype = DType::f64})}) {
    GradientStore grads = backward(sum(mul(p, g)));
    opt.step(grads);
    out.push_back(p.to_vector<double>());
  }
  return out;
}

void expect_near(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t s = 0; s < got.size(); ++s)
    for (std::size_t i = 0; i < got[s].size(); ++i) EXPECT_NEAR(got[s][i], want[s][i], 1e-9) << "step " << s << " elem " << i;
}

}  // namespace

TEST(SGD, MomentumAndWeightDecay) {
  expect_near(two_steps<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1}),
              {{0.94, -2.005}, {0.8866, -2.02945}});
}

TEST(SGD, Nesterov) {
  expect_near(two_steps<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}),
              {{0.905, -2.0475}, {0.8835, -2.14375}});
}

TEST(SGD, Dampening) {
  expect_near(two_steps<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5}),
              {{0.95, -2.025}, {0.91, -2.0675}});
}

TEST(SGD, PlainStepIsLrTimesGradient) {
  expect_near(two_steps<optim::SGD>(optim::SGDOptions{.lr = 0.5}), {{0.75, -2.125}, {0.8, -2.325}});
}

TEST(Adam, L2WeightDecay) {
  expect_near(two_steps<optim::Adam>(optim::AdamOptions{.lr = 0.1, .weight_decay = 0.1}),
              {{0.900000001667, -2.09999998}, {0.834244167662, -2.1890104386}});
}

TEST(AdamW, DecoupledWeightDecay) {
  expect_near(two_steps<optim::AdamW>(optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.1}),
              {{0.890000002, -2.079999996}, {0.829997395679, -2.15781177595}});
}

TEST(RMSprop, Plain) {
  expect_near(two_steps<optim::RMSprop>(optim::RMSpropOptions{.lr = 0.01}),
              {{0.90000002, -2.09999996}, {0.91970660168, -2.18491912476}});
}

TEST(RMSprop, CenteredWithMomentumAndWeightDecay) {
  expect_near(two_steps<optim::RMSprop>(
                  optim::RMSpropOptions{.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9, .centered = true}),
              {{0.899496235309, -2.10050357951}, {0.810734218201, -2.28842129982}});
}

TEST(Optimizer, ParamGroupsHaveTheirOwnLr) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}}, {{b}, 0.5}}, {.lr = 0.1});
  opt.step(backward(sum(add(a, b))));
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], 0.9f);
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], 0.5f);
}

TEST(Optimizer, ParametersWithoutGradientAreUntouched) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::Adam opt({a, b}, {.lr = 0.1});
  opt.step(backward(sum(a)));
  EXPECT_FLOAT_EQ(b.to_vector<float>()[1], 1.0f);
  EXPECT_LT(a.to_vector<float>()[1], 1.0f);
}

TEST(Optimizer, StateDictRoundTripContinuesIdentically) {
  auto make = [] { return tensor({1.0, -2.0, 3.0}, {.dtype = DType::f64}).requires_grad_(); };
  Tensor g = tensor({0.3, -0.2, 0.1}, {.dtype = DType::f64});
  Tensor p1 = make(), p2 = make();
  optim::Adam o1({p1}, {.lr = 0.05});
  for (int i = 0; i < 3; ++i) o1.step(backward(sum(mul(square(p1), g))));
  {
    NoGradGuard ng;
    p2.copy_(p1);
  }
  optim::Adam o2({p2}, {.lr = 0.7});
  o2.load_state_dict(o1.state_dict());
  EXPECT_DOUBLE_EQ(o2.lr(), 0.05);
  for (int i = 0; i < 2; ++i) {
    o1.step(backward(sum(mul(square(p1), g))));
    o2.step(backward(sum(mul(square(p2), g))));
  }
  EXPECT_EQ(p1.to_vector<double>(), p2.to_vector<double>());
}

TEST(Optimizer, LoadStateDictRejectsMismatches) {
  Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_();
  optim::SGD sgd({a}, {.lr = 0.1, .momentum = 0.9});
  sgd.step(backward(sum(a)));
  optim::Adam adam({a});
  EXPECT_THROW(adam.load_state_dict(sgd.state_dict()), Error);  // another optimizer type
  optim::SGD wrong_shape({b}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(wrong_shape.load_state_dict(sgd.state_dict()), Error);
  optim::SGD more({a, b}, {.lr = 0.1});
  EXPECT_THROW(more.load_state_dict(sgd.state_dict()), Error);
}

namespace {
std::string load_error(optim::Optimizer& opt, const StateDict& state) {
  try {
    opt.load_state_dict(state);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

// A buffer missing after step > 0 would silently restart at zero; a buffer the
// optimizer does not keep means other options (e.g. momentum) than the saver's.
TEST(Optimizer, LoadStateDictRequiresExactlyTheBuffersOfTheOptions) {
  Tensor a = ones({2}).requires_grad_();
  optim::SGD momentum({a}, {.lr = 0.1, .momentum = 0.9});
  momentum.step(backward(sum(a)));
  StateDict state = momentum.state_dict();
  state.erase("state.0.0.momentum_buffer");
  optim::SGD again({a}, {.lr = 0.1, .momentum = 0.9});
  std::string msg = load_error(again, state);
  EXPECT_NE(msg.find("SGD.load_state_dict: the state dict has no 'state.0.0.momentum_buffer'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'state.0.0.step' is 1"), std::string::npos) << msg;

  optim::SGD plain({a}, {.lr = 0.1});
  msg = load_error(plain, momentum.state_dict());
  EXPECT_NE(msg.find("'state.0.0.momentum_buffer' is not a buffer of this SGD (expected: none)"), std::string::npos)
      << msg;

  optim::RMSprop centered({a}, {.lr = 0.1, .centered = true});
  centered.step(backward(sum(a)));
  optim::RMSprop plain_rms({a}, {.lr = 0.1});
  msg = load_error(plain_rms, centered.state_dict());
  EXPECT_NE(msg.find("'state.0.0.grad_avg' is not a buffer of this RMSprop (expected: square_avg)"), std::string::npos)
      << msg;
  optim::RMSprop centered2({a}, {.lr = 0.1, .centered = true});
  EXPECT_EQ(load_error(centered2, centered.state_dict()), "no error");

  // Before any step there are no buffers yet, and none are required.
  optim::Adam fresh({a});
  optim::Adam fresh2({a});
  EXPECT_EQ(load_error(fresh2, fresh.state_dict()), "no error");
}

TEST(Optimizer, BadOptionsAreErrors) {
  Tensor a = ones({2}).requires_grad_();
  EXPECT_THROW(optim::SGD({a}, {.lr = -1}), Error);
  EXPECT_THROW(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(optim::Adam({a}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(optim::SGD({ones({2}, {.dtype = DType::i64})}), Error);
}

TEST(Optimizer, EmptyParameterListIsAnError) {
  const std::vector<Tensor> none;
  expect_error<ValueError>([&] { optim::SGD o(none); }, "SGD: optimizer got an empty parameter list");
  expect_error<ValueError>([&] { optim::Adam o(none); }, "Adam: optimizer got an empty parameter list");
  expect_error<ValueError>([&] { optim::AdamW o(none); }, "AdamW: optimizer got an empty parameter list");
  expect_error<ValueError>([&] { optim::RMSprop o(none); }, "RMSprop: optimizer got an empty parameter list");
  std::vector<optim::ParamGroup> empty_groups(2);
  expect_error<ValueError>([&] { optim::SGD o(empty_groups, {.lr = 0.1}); }, "got 0 in 2 parameter groups");
  // An empty group next to a non-empty one is fine, as in PyTorch.
  empty_groups[1].params.push_back(ones({2}).requires_grad_());
  EXPECT_NO_THROW(optim::SGD(empty_groups, {.lr = 0.1}));
}

namespace {
template <class Make>
std::vector<double> curve(Make make, int n) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  auto sched = make(opt);
  std::vector<double> lrs;
  for (int i = 0; i < n; ++i) {
    lrs.push_back(opt.lr());
    sched.step();
  }
  return lrs;
}
void expect_curve(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << "step " << i;
}
}  // namespace

TEST(Scheduler, StepLR) {
  expect_curve(curve([](auto& o) { return optim::StepLR(o, 3, 0.5); }, 8),
               {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025});
}

TEST(Scheduler, MultiStepLR) {
  expect_curve(curve([](auto& o) { return optim::MultiStepLR(o, {2, 5}, 0.1); }, 7),
               {0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001});
}

TEST(Scheduler, CosineAnnealingLR) {
  expect_curve(curve([](auto& o) { return optim::CosineAnnealingLR(o, 4, 0.01); }, 6),
               {0.1, 0.0868198051534, 0.055, 0.0231801948466, 0.01, 0.0231801948466});
}

TEST(Scheduler, OneCycleLR) {
  expect_curve(curve([](auto& o) { return optim::OneCycleLR(o, 1.0, 10); }, 10),
               {0.04, 0.52, 1, 0.950484632013, 0.81174565395, 0.611262021936, 0.388741978064, 0.18825834605,
                0.0495193679865, 4e-06});
}

TEST(Scheduler, LinearWarmupMatchesLinearLR) {
  expect_curve(curve([](auto& o) { return optim::LinearWarmupLR(o, 4, 0.25); }, 6),
               {0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1});
}

TEST(Scheduler, LinearWarmupThenCosine) {
  auto lrs = curve([](auto& o) { return optim::LinearWarmupLR(o, 2, 0.0, 6, 0.0); }, 7);
  expect_curve(lrs, {0.0, 0.05, 0.1, 0.0853553390593, 0.05, 0.0146446609407, 0.0});
}

TEST(Scheduler, SetStepJumpsToTheSameLr) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::OneCycleLR s(opt, 1.0, 10);
  for (int i = 0; i < 6; ++i) s.step();
  double lr = opt.lr();
  s.set_step(0);
  s.set_step(6);
  EXPECT_DOUBLE_EQ(opt.lr(), lr);
  EXPECT_THROW(optim::StepLR(opt, 0), Error);
}

TEST(Clip, GradNormScalesAllGradientsJointly) {
  Tensor a = ones({2}).requires_grad_(), b = ones({1}).requires_grad_();
  // Gradients [3, 3] and [4]: joint norm sqrt(34).
  GradientStore grads = backward(add(sum(mul(a, 3.0)), sum(mul(b, 4.0))));
  double norm = optim::clip_grad_norm_(grads, {a, b}, 1.0);
  EXPECT_NEAR(norm, std::sqrt(34.0), 1e-5);
  EXPECT_NEAR(grads.at(a).to_vector<float>()[0], 3.0 / std::sqrt(34.0), 1e-5);
  EXPECT_NEAR(grads.at(b).to_vector<float>()[0], 4.0 / std::sqrt(34.0), 1e-5);
  double inf = optim::clip_grad_norm_(grads, {a, b}, 10.0, INFINITY);
  EXPECT_NEAR(inf, 4.0 / std::sqrt(34.0), 1e-5);
}

TEST(Clip, SharedGradientTensorIsNotScaledTwice) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  GradientStore grads = backward(sum(mul(add(a, b), 2.0)));
  // Gradients [2, 2] and [2, 2]: norm 4, halved to 1 each (a double scaling would give 0.5).
  EXPECT_NEAR(optim::clip_grad_norm_(grads, {a, b}, 2.0), 4.0, 1e-5);
  EXPECT_NEAR(grads.at(a).to_vector<float>()[0], 1.0, 1e-5);
  EXPECT_NEAR(grads.at(b).to_vector<float>()[0], 1.0, 1e-5);
}

TEST(Clip, GradNormOtherOrdersAndHalfGradients) {
  Tensor a = ones({2}).requires_grad_(), b = ones({1}).requires_grad_();
  GradientStore grads = backward(add(sum(mul(a, 3.0)), sum(mul(b, 4.0))));
  EXPECT_NEAR(optim::clip_grad_norm_(grads, {a, b}, 100.0, 1.0), 10.0, 1e-5);
  EXPECT_NEAR(optim::clip_grad_norm_(grads, {a, b}, 100.0, 3.0), std::cbrt(118.0), 1e-5);
  EXPECT_EQ(grads.at(a).to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));  // under max_norm: untouched
  // f16 gradients whose squares overflow f16 (300^2 > 65504) still give a finite norm.
  Tensor h = ones({2}, {.dtype = DType::f16}).requires_grad_();
  GradientStore half;
  half.insert(h.grad_id(), full({2}, 300.0, {.dtype = DType::f16}));
  EXPECT_NEAR(optim::clip_grad_norm_(half, {h}, 1.0), 300.0 * std::sqrt(2.0), 1e-3);
  EXPECT_EQ(half.at(h).dtype(), DType::f16);
  EXPECT_NEAR(half.at(h).to_vector<float>()[0], 1.0 / std::sqrt(2.0), 1e-3);
}

TEST(Clip, GradValue) {
  Tensor a = ones({3}).requires_grad_();
  GradientStore grads = backward(sum(mul(a, tensor({-2.0, 0.5, 3.0}))));
  optim::clip_grad_value_(grads, {a}, 1.0);
  EXPECT_EQ(grads.at(a).to_vector<float>(), (std::vector<float>{-1.0f, 0.5f, 1.0f}));
  EXPECT_THROW(optim::clip_grad_value_(grads, {a}, -1.0), Error);
}

namespace {

// The fused CPU kernels (dense operands) agree with the composed kernels every
// backend inherits (taken here for transposed, non-dense operands).
TEST(FusedSteps, MatchTheComposedKernels) {
  manual_seed(3);
  Tensor dense_p = randn({37, 5});
  Tensor strided_p = dense_p.t().contiguous().t();  // same values, column-major
  Tensor dm = zeros({37, 5}), dv = zeros({37, 5}), sm = zeros({5, 37}).t(), sv = zeros({5, 37}).t();
  Tensor dbuf = empty({37, 5}), sbuf = empty({5, 37}).t();
  for (std::int64_t step = 1; step <= 3; ++step) {
    Tensor g = randn({37, 5});
    SgdStep sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .first = step == 1};
    sgd_step_(dense_p, g, dbuf, sgd);
    sgd_step_(strided_p, g, sbuf, sgd);
    AdamStep adam{.lr = 0.01, .weight_decay = 0.1, .decoupled = step % 2 == 0, .step = step};
    adam_step_(dense_p, g, dm, dv, adam);
    adam_step_(strided_p, g, sm, sv, adam);
  }
  // Parameter, momentum buffer and both Adam moments must agree element by element.
  const std::pair<Tensor, Tensor> pairs[] = {{dense_p, strided_p}, {dbuf, sbuf}, {dm, sm}, {dv, sv}};
  for (const auto& [fused, composed] : pairs) {
    auto a = fused.to_vector<float>(), b = composed.to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * std::max(1.0f, std::abs(a[i]))) << i;
  }
}

// A state entry whose gradient stays zero decays into the subnormal range,
// where 0.9 times the smallest subnormal rounds back to itself and arithmetic
// is slow on many CPUs; the fused steps store it as zero instead.
TEST(FusedSteps, StateThatDecaysBelowTheSmallestNormalBecomesZero) {
  const std::int64_t n = 40000;  // above the size that is split across threads
  Tensor p = ones({n}), buf = empty({n}), m = zeros({n}), v = zeros({n});
  sgd_step_(p, full({n}, 1e-36), buf, {.lr = 0.1, .momentum = 0.9, .first = true});
  adam_step_(p, full({n}, 1e-35), m, v, {.lr = 0.1, .step = 1});
  ASSERT_GT(buf.to_vector<float>()[0], 0.0f);  // both start at 1e-36, a normal float
  ASSERT_GT(m.to_vector<float>()[0], 0.0f);
  for (std::int64_t step = 2; step <= 100; ++step) {  // 0.9^100 takes both below 1e-40
    sgd_step_(p, zeros({n}), buf, {.lr = 0.1, .momentum = 0.9});
    adam_step_(p, zeros({n}), m, v, {.lr = 0.1, .step = step});
  }
  for (const Tensor& state : {buf, m, v})
    for (float x : state.to_vector<float>()) ASSERT_EQ(x, 0.0f);
  for (float x : p.to_vector<float>()) ASSERT_EQ(x, 1.0f);
}

TEST(FusedSteps, RejectMismatchedState) {
  Tensor p = zeros({3}), g = zeros({3}), buf = zeros({4});
  EXPECT_THROW(sgd_step_(p, g, buf, {.lr = 0.1, .momentum = 0.9}), ShapeError);
  Tensor m = zeros({3}, {.dtype = DType::f64}), v = zeros({3});
  EXPECT_THROW(adam_step_(p, g, m, v, {.lr = 0.1}), DTypeError);
  EXPECT_THROW(adam_step_(p, g, v, v, {.lr = 0.1, .step = 0}), Error);
}

}  // namespace
