// Optimizer steps and scheduler curves against values computed with PyTorch 1.13
// (torch.optim, float64) for the same parameters and gradients.
#include <gtest/gtest.h>
#include <unistd.h>

#include <rumus/rumus.hpp>

#include "devices.hpp"
#include "expect_error.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

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

// A parameter that fails the step (a gradient of the wrong shape) leaves the
// updates before it applied, as one by one: SGD queues its updates and still
// applies them, so the next step continues from a seeded momentum buffer.
TEST(SGD, AFailedStepKeepsTheUpdatesBeforeTheFailure) {
  Tensor a = ones({2}), b = ones({3});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  GradientStore bad, good;
  bad.insert(a.grad_id(), ones({2}));
  bad.insert(b.grad_id(), ones({2}));
  expect_error<ShapeError>([&] { opt.step(bad); }, "SGD.step: gradient of shape [2] for a parameter of shape [3]");
  EXPECT_FLOAT_EQ(a.to_vector<float>()[0], 0.9f);  // 1 - 0.1 * 1
  EXPECT_FLOAT_EQ(b.to_vector<float>()[0], 1.0f);
  good.insert(a.grad_id(), ones({2}));
  good.insert(b.grad_id(), ones({3}));
  opt.step(good);
  EXPECT_FLOAT_EQ(a.to_vector<float>()[1], 0.71f);  // momentum 0.9 * 1 + 1, then 0.9 - 0.1 * 1.9
  EXPECT_FLOAT_EQ(b.to_vector<float>()[1], 0.9f);   // its first update
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

  // The groups' options come from the state dict (as PyTorch's param_groups):
  // a buffer those options do not keep is an error.
  optim::SGD plain({a}, {.lr = 0.1});
  StateDict no_momentum = momentum.state_dict();
  no_momentum["group.0.momentum"] = scalar_tensor(0.0, {.dtype = DType::f64});
  msg = load_error(plain, no_momentum);
  EXPECT_NE(msg.find("'state.0.0.momentum_buffer' is not a buffer of this SGD (expected: none)"), std::string::npos)
      << msg;
  EXPECT_EQ(load_error(plain, momentum.state_dict()), "no error");
  EXPECT_EQ(plain.param_groups()[0].option("momentum"), 0.9);

  optim::RMSprop centered({a}, {.lr = 0.1, .centered = true});
  centered.step(backward(sum(a)));
  optim::RMSprop plain_rms({a}, {.lr = 0.1});
  StateDict not_centered = centered.state_dict();
  not_centered["group.0.centered"] = scalar_tensor(0.0, {.dtype = DType::f64});
  msg = load_error(plain_rms, not_centered);
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

// A schedule resumed from its state dict continues the uninterrupted curve.
TEST(Scheduler, StateDictResumesTheCurve) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD full_opt({p}, {.lr = 0.1}), resumed_opt({p}, {.lr = 0.1});
  optim::OneCycleLR uninterrupted(full_opt, 1.0, 10), first(resumed_opt, 1.0, 10);
  for (int i = 0; i < 4; ++i) {
    uninterrupted.step();
    first.step();
  }
  const StateDict saved = first.state_dict();
  EXPECT_EQ(saved.at("last_epoch").item<std::int64_t>(), 4);
  optim::OneCycleLR second(resumed_opt, 1.0, 10);
  second.load_state_dict(saved);
  for (int i = 0; i < 4; ++i) {
    uninterrupted.step();
    second.step();
    EXPECT_EQ(resumed_opt.lr(), full_opt.lr()) << "step " << i;
  }
  expect_error<Error>([&] { second.load_state_dict({}); }, "LRScheduler::load_state_dict: the state dict has no 'last_epoch'");
  expect_error<Error>([&] { second.load_state_dict({{"last_epoch", full({}, -1.0)}}); },
                      "expected 'last_epoch' to be a count, got -1");
}

// ReduceLROnPlateau's counters travel in its state dict, so a resumed run
// reduces the lr at the same epochs as the uninterrupted one.
TEST(Scheduler, ReduceLROnPlateauStateDictResumesTheCounters) {
  const std::vector<double> metrics = {1.0, 0.9, 0.95, 0.92, 0.91, 0.9, 0.9, 0.899, 0.95, 0.97, 0.5, 0.6, 0.6};
  const optim::ReduceLROnPlateauOptions options{.factor = 0.5, .patience = 2, .cooldown = 1};
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD full_opt({p}, {.lr = 0.1});
  optim::ReduceLROnPlateau uninterrupted(full_opt, options);
  std::vector<double> want;
  for (double m : metrics) {
    uninterrupted.step(m);
    want.push_back(full_opt.lr());
  }
  const std::size_t split = 3;  // best and one bad epoch so far: a fresh scheduler would not reduce at epoch 5
  optim::SGD opt({p}, {.lr = 0.1});
  StateDict saved;
  {
    optim::ReduceLROnPlateau first(opt, options);
    for (std::size_t i = 0; i < split; ++i) first.step(metrics[i]);
    // Through a file, as a checkpoint keeps it.
    const std::string path =
        (std::filesystem::temp_directory_path() / fmt::format("rumus_plateau_{}.safetensors", ::getpid())).string();
    io::save_safetensors(first.state_dict(), path);
    saved = io::load_safetensors(path);
    std::filesystem::remove(path);
  }
  optim::ReduceLROnPlateau second(opt, options);  // the lr itself comes back with the optimizer
  second.load_state_dict(saved);
  EXPECT_EQ(second.last_step(), std::int64_t(split));
  std::vector<double> got(want.begin(), want.begin() + std::ptrdiff_t(split));
  for (std::size_t i = split; i < metrics.size(); ++i) {
    second.step(metrics[i]);
    got.push_back(opt.lr());
  }
  EXPECT_EQ(got, want);
  StateDict partial = saved;
  partial.erase("cooldown_counter");
  expect_error<Error>([&] { second.load_state_dict(partial); },
                      "ReduceLROnPlateau::load_state_dict: the state dict has no 'cooldown_counter'");
  EXPECT_EQ(second.last_step(), std::int64_t(metrics.size())) << "a refused load changes nothing";
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

// The fused CPU kernels (dense operands) agree with the update ops compose
// where a fused kernel does not apply (taken here for transposed operands).
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

// The foreach forms name a bad update as the one-at-a-time ops do, on every device.
TEST(FusedSteps, ForeachRejectTheBadUpdateByName) {
  for (const Device dev : rumus::testing::test_devices()) {
    Tensor p = zeros({3}, {.device = dev}), g = zeros({3}, {.device = dev}), buf = zeros({4}, {.device = dev});
    const Tensor ok = zeros({3}, {.device = dev});
    const std::vector<SgdUpdate> sgd = {{ok.clone(), g, ok.clone(), {.lr = 0.1, .momentum = 0.9}},
                                        {p, g, buf, {.lr = 0.1, .momentum = 0.9}}};
    expect_error<ShapeError>([&] { sgd_step_foreach_(sgd); },
                             "sgd_step_: momentum buffer shape [4] differs from parameter shape [3]");
    const std::vector<AdamUpdate> adam = {{p, g, ok.clone(), ok.clone(), {.lr = 0.1, .step = 0}}};
    expect_error<Error>([&] { adam_step_foreach_(adam); }, "adam_step_: expected step >= 1, got 0");
  }
}

}  // namespace

// Trajectories and curves written by tests/torch_reference/make_reference.py
// (optimizer_trajectory, scheduler_curve): PyTorch 1.13 in float64.
namespace {

std::map<std::string, Tensor> read_reference(const std::string& name) {
  std::ifstream in(std::string(RUMUS_TORCH_REFERENCE_DIR) + "/" + name + ".txt");
  if (!in) throw std::runtime_error("missing reference file " + name);
  std::map<std::string, Tensor> out;
  std::string header, values;
  while (std::getline(in, header) && std::getline(in, values)) {
    std::istringstream h(header), v(values);
    std::string key, kind;
    int nd = 0;
    h >> key >> kind >> nd;
    Shape shape(std::size_t(nd), 0);
    for (auto& d : shape) h >> d;
    std::vector<double> data(std::size_t(numel_of(shape)));
    for (auto& x : data) v >> x;
    out[key] = tensor(data, shape, {.dtype = DType::f64});
  }
  return out;
}

void expect_values(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-12) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << what << " element " << i;
}

// Runs the optimizer `make` builds over two groups (options per group, as
// in make_reference.py) on f(p) = sum(w p^2 / 2 + c p), comparing every step.
template <class Make>
void expect_trajectory(const std::string& name, Make make, std::vector<std::map<std::string, double>> group_options,
                       std::vector<std::optional<double>> group_lr = {},
                       std::vector<std::optional<double>> group_weight_decay = {}, double tol = 1e-12) {
  auto ref = read_reference("optim_" + name);
  std::vector<Tensor> params{ref.at("p0").clone().requires_grad_(), ref.at("p1").clone().requires_grad_()};
  std::vector<optim::ParamGroup> groups;
  for (std::size_t i = 0; i < 2; ++i) {
    optim::ParamGroup g{.params = {params[i]}, .options = group_options[i]};
    if (i < group_lr.size()) g.lr = group_lr[i];
    if (i < group_weight_decay.size()) g.weight_decay = group_weight_decay[i];
    groups.push_back(g);
  }
  auto opt = make(std::move(groups));
  for (int s = 0; ref.contains(fmt::format("step{}.p0", s)); ++s) {
    Tensor loss = zeros({}, {.dtype = DType::f64});
    for (int i = 0; i < 2; ++i) {
      const Tensor& w = ref.at(fmt::format("w{}", i));
      const Tensor& c = ref.at(fmt::format("c{}", i));
      loss = add(loss, sum(add(div(mul(w, square(params[i])), 2.0), mul(c, params[i]))));
    }
    opt.step(backward(loss));
    for (int i = 0; i < 2; ++i)
      expect_values(params[i], ref.at(fmt::format("step{}.p{}", s, i)), fmt::format("{} step {} p{}", name, s, i),
                    tol);
  }
}

using Groups = std::vector<optim::ParamGroup>;

}  // namespace

TEST(TorchTrajectory, Adagrad) {
  expect_trajectory("adagrad",
                    [](Groups g) { return optim::Adagrad(std::move(g), {.lr = 0.1, .initial_accumulator_value = 0.2}); },
                    {{{"lr_decay", 0.05}}, {{"eps", 1e-3}}}, {}, {0.1});
}

TEST(TorchTrajectory, NAdam) {
  expect_trajectory("nadam", [](Groups g) { return optim::NAdam(std::move(g), {.lr = 0.05}); },
                    {{{"momentum_decay", 0.01}}, {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-3}}}, {}, {0.1},
                    1e-8);  // PyTorch keeps mu_product in float32
}

TEST(TorchTrajectory, RAdamBothSidesOfTheRectificationThreshold) {
  expect_trajectory("radam", [](Groups g) { return optim::RAdam(std::move(g), {.lr = 0.05}); },
                    {{}, {{"beta1", 0.5}, {"beta2", 0.9}, {"eps", 1e-3}}}, {}, {0.1});
}

TEST(TorchTrajectory, AdamAmsgradPerGroup) {
  expect_trajectory("adam_amsgrad", [](Groups g) { return optim::Adam(std::move(g), {.lr = 0.2, .amsgrad = true}); },
                    {{}, {{"beta1", 0.5}, {"beta2", 0.9}, {"amsgrad", 0}}}, {}, {0.1});
}

TEST(TorchTrajectory, AdamWAmsgrad) {
  expect_trajectory("adamw_amsgrad",
                    [](Groups g) { return optim::AdamW(std::move(g), {.lr = 0.2, .weight_decay = 0.01, .amsgrad = true}); },
                    {{}, {{"beta1", 0.5}, {"beta2", 0.9}, {"eps", 1e-3}}}, {}, {0.1});
}

TEST(TorchTrajectory, SGDGroupsWithTheirOwnMomentum) {
  expect_trajectory("sgd_groups", [](Groups g) { return optim::SGD(std::move(g), {.lr = 0.1}); },
                    {{{"momentum", 0.9}, {"nesterov", 1}}, {{"momentum", 0.5}, {"dampening", 0.1}}}, {},
                    {std::nullopt, 0.2});
}

TEST(TorchTrajectory, RMSpropGroupsWithTheirOwnOptions) {
  expect_trajectory("rmsprop_groups", [](Groups g) { return optim::RMSprop(std::move(g), {.lr = 0.05}); },
                    {{{"centered", 1}, {"momentum", 0.5}}, {{"alpha", 0.9}, {"eps", 1e-3}}});
}

namespace {

// The lrs (and momenta) of an SGD's two groups (base lr 0.1 and 0.02, momentum
// 0.9) at construction and after each step of the scheduler `make` builds.
template <class Make, class Step>
void expect_schedule(const std::string& name, Make make, Step step) {
  auto ref = read_reference("sched_" + name);
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD opt(Groups{{.params = {a}}, {.params = {b}, .lr = 0.02}}, {.lr = 0.1, .momentum = 0.9});
  auto sched = make(opt);
  const Tensor& lr = ref.at("lr");
  const bool momentum = ref.contains("momentum");
  std::vector<double> metrics;
  if (ref.contains("metrics")) metrics = ref.at("metrics").to_vector<double>();
  for (std::int64_t s = 0; s < lr.shape()[0]; ++s) {
    if (s > 0) step(*sched, metrics.empty() ? 0.0 : metrics[std::size_t(s - 1)]);
    for (std::size_t g = 0; g < 2; ++g) {
      EXPECT_NEAR(opt.param_groups()[g].lr, lr.select(0, s).to_vector<double>()[g], 1e-12)
          << name << " lr at step " << s << " group " << g;
      if (momentum)
        EXPECT_NEAR(opt.param_groups()[g].option("momentum"), ref.at("momentum").select(0, s).to_vector<double>()[g],
                    1e-12)
            << name << " momentum at step " << s << " group " << g;
    }
  }
}

auto plain_step = [](auto& sched, double) { sched.step(); };
auto metric_step = [](auto& sched, double metric) { sched.step(metric); };

}  // namespace

TEST(TorchSchedule, ExponentialLR) {
  expect_schedule("exponential", [](auto& o) { return std::make_unique<optim::ExponentialLR>(o, 0.8); }, plain_step);
}

TEST(TorchSchedule, LambdaLRPerGroup) {
  expect_schedule("lambda",
                  [](auto& o) {
                    return std::make_unique<optim::LambdaLR>(
                        o, std::vector<optim::LambdaLR::Lambda>{[](std::int64_t e) { return 1.0 / double(e + 1); },
                                                                [](std::int64_t e) { return std::pow(0.9, double(e)); }});
                  },
                  plain_step);
}

TEST(TorchSchedule, CyclicLRModes) {
  for (std::string mode : {"triangular", "triangular2", "exp_range"}) {
    expect_schedule("cyclic_" + mode,
                    [&](auto& o) {
                      return std::make_unique<optim::CyclicLR>(
                          o, std::vector<double>{0.01, 0.002}, std::vector<double>{0.1, 0.05},
                          optim::CyclicLROptions{.step_size_up = 3, .step_size_down = 2, .mode = mode,
                                                 .gamma = mode == "exp_range" ? 0.9 : 1.0, .base_momentum = {0.8},
                                                 .max_momentum = {0.95}});
                    },
                    plain_step);
  }
}

// OneCycleLR cycles the momentum by default (0.95 down to 0.85 and back), as PyTorch's.
TEST(TorchSchedule, OneCycleLRCyclesMomentum) {
  expect_schedule("one_cycle", [](auto& o) { return std::make_unique<optim::OneCycleLR>(o, 0.5, 10); }, plain_step);
}

TEST(TorchSchedule, OneCycleLRThreePhasesLinear) {
  expect_schedule("one_cycle_three_phase_linear",
                  [](auto& o) {
                    return std::make_unique<optim::OneCycleLR>(
                        o, 0.5, 13,
                        optim::OneCycleLROptions{.pct_start = 0.25, .anneal_strategy = "linear", .base_momentum = {0.8},
                                                 .max_momentum = {0.9}, .div_factor = 10.0, .final_div_factor = 100.0,
                                                 .three_phase = true});
                  },
                  plain_step);
}

TEST(TorchSchedule, ReduceLROnPlateauMinRelativeWithCooldown) {
  expect_schedule("plateau_min_rel",
                  [](auto& o) {
                    return std::make_unique<optim::ReduceLROnPlateau>(
                        o, optim::ReduceLROnPlateauOptions{.factor = 0.5, .patience = 2, .cooldown = 1,
                                                           .min_lr = {0.01, 0.004}});
                  },
                  metric_step);
}

TEST(TorchSchedule, ReduceLROnPlateauMaxAbsolute) {
  expect_schedule("plateau_max_abs",
                  [](auto& o) {
                    return std::make_unique<optim::ReduceLROnPlateau>(
                        o, optim::ReduceLROnPlateauOptions{.mode = "max", .factor = 0.3, .patience = 1,
                                                           .threshold = 0.05, .threshold_mode = "abs",
                                                           .min_lr = {0.005}});
                  },
                  metric_step);
}

// Each optim_* and sched_* reference file is compared by a test above.
TEST(TorchTrajectory, EveryReferenceFileHasATest) {
  const std::set<std::string> tested{"optim_adagrad", "optim_nadam", "optim_radam", "optim_adam_amsgrad",
                                     "optim_adamw_amsgrad", "optim_sgd_groups", "optim_rmsprop_groups",
                                     "sched_exponential", "sched_lambda", "sched_cyclic_triangular",
                                     "sched_cyclic_triangular2", "sched_cyclic_exp_range", "sched_plateau_min_rel",
                                     "sched_plateau_max_abs", "sched_one_cycle", "sched_one_cycle_three_phase_linear",
                                     "optim_lbfgs", "optim_lbfgs_strong_wolfe"};
  for (const auto& entry : std::filesystem::directory_iterator(RUMUS_TORCH_REFERENCE_DIR)) {
    const std::string stem = entry.path().stem().string();
    if (stem.starts_with("optim_") || stem.starts_with("sched_")) EXPECT_TRUE(tested.contains(stem)) << stem;
  }
}

TEST(Optimizer, GroupOptionsAreTheOptimizersOwnAndRoundTrip) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  optim::SGD opt(Groups{{.params = {a}}, {.params = {b}, .options = {{"momentum", 0.5}}}}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(opt.param_groups()[0].option("momentum"), 0.9);
  EXPECT_EQ(opt.param_groups()[1].option("momentum"), 0.5);
  EXPECT_EQ(opt.param_groups()[1].option("dampening"), 0.0);
  StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("group.1.momentum").item(), 0.5);
  EXPECT_EQ(sd.at("group.0.nesterov").item(), 0.0);
  optim::SGD other(Groups{{.params = {a}}, {.params = {b}}}, {.lr = 0.1});
  other.load_state_dict(sd);
  EXPECT_EQ(other.param_groups()[1].option("momentum"), 0.5);
  // A state dict saved before an option existed keeps this optimizer's value for it.
  StateDict older = sd;
  older.erase("group.1.dampening");
  optim::SGD newer(Groups{{.params = {a}}, {.params = {b}}}, {.lr = 0.1, .dampening = 0.25});
  newer.load_state_dict(older);
  EXPECT_EQ(newer.param_groups()[1].option("dampening"), 0.25);
  EXPECT_EQ(newer.param_groups()[1].option("momentum"), 0.5);
  expect_error<ValueError>(
      [&] { optim::SGD(Groups{{.params = {a}, .options = {{"beta1", 0.5}}}}); },
      "SGD: group 0 sets the option 'beta1', which this optimizer does not have (expected one of: lr, weight_decay, "
      "dampening, momentum, nesterov)");
  expect_error<Error>([&] { optim::Adam(Groups{{.params = {a}, .options = {{"beta2", 1.5}}}}); },
                      "Adam: expected betas in [0, 1), got (0.9, 1.5)");
  expect_error<Error>([&] { opt.param_groups()[0].option("beta1"); }, "the parameter group has no option 'beta1'");
}

TEST(Optimizer, NewOptimizersStateDictsRoundTrip) {
  auto run = [](auto make) {
    auto init = [] { return tensor({1.0, -2.0, 3.0}, {.dtype = DType::f64}).requires_grad_(); };
    Tensor g = tensor({0.3, -0.2, 0.1}, {.dtype = DType::f64});
    Tensor p1 = init(), p2 = init();
    auto o1 = make(p1);
    for (int i = 0; i < 3; ++i) o1.step(backward(sum(mul(square(p1), g))));
    {
      NoGradGuard ng;
      p2.copy_(p1);
    }
    auto o2 = make(p2);
    o2.load_state_dict(o1.state_dict());
    for (int i = 0; i < 2; ++i) {
      o1.step(backward(sum(mul(square(p1), g))));
      o2.step(backward(sum(mul(square(p2), g))));
    }
    EXPECT_EQ(p1.to_vector<double>(), p2.to_vector<double>()) << o1.type_name();
    return o1.state_dict();
  };
  EXPECT_TRUE(run([](Tensor p) { return optim::Adagrad({p}, {.lr = 0.1, .lr_decay = 0.1}); }).contains("state.0.0.sum"));
  EXPECT_TRUE(run([](Tensor p) { return optim::NAdam({p}); }).contains("state.0.0.exp_avg_sq"));
  EXPECT_TRUE(run([](Tensor p) { return optim::RAdam({p}); }).contains("state.0.0.exp_avg"));
  EXPECT_TRUE(run([](Tensor p) { return optim::Adam({p}, {.amsgrad = true}); }).contains("state.0.0.max_exp_avg_sq"));
}

TEST(Optimizer, NewOptimizersAndSchedulersRejectBadOptions) {
  Tensor p = ones({2}).requires_grad_();
  expect_error<Error>([&] { optim::Adagrad({p}, {.lr_decay = -1}); }, "Adagrad: expected lr_decay >= 0, got -1");
  expect_error<Error>([&] { optim::NAdam({p}, {.beta1 = 1.0}); }, "NAdam: expected betas in [0, 1), got (1, 0.999)");
  expect_error<Error>([&] { optim::RAdam({p}, {.eps = -1}); }, "RAdam: expected eps >= 0, got -1");
  optim::SGD sgd({p}, {.lr = 0.1});
  optim::Adagrad adagrad({p});
  expect_error<Error>([&] { optim::ExponentialLR(sgd, 0.0); }, "ExponentialLR: expected gamma > 0, got 0");
  expect_error<Error>([&] { optim::LambdaLR(sgd, std::vector<optim::LambdaLR::Lambda>{}); },
                      "LambdaLR: expected one lr_lambda per parameter group (1), got 0");
  expect_error<Error>([&] { optim::CyclicLR(sgd, 0.1, 1.0, {.mode = "sine"}); },
                      "CyclicLR: expected mode 'triangular', 'triangular2' or 'exp_range', got 'sine'");
  expect_error<Error>([&] { optim::CyclicLR(adagrad, 0.1, 1.0); },
                      "CyclicLR: cycle_momentum needs an optimizer with momentum or beta1; Adagrad has neither");
  expect_error<Error>([&] { optim::CyclicLR(sgd, {0.1, 0.2}, {1.0}); },
                      "CyclicLR: expected one base_lr or one per parameter group (1), got 2");
  expect_error<Error>([&] { optim::ReduceLROnPlateau(sgd, {.factor = 1.0}); },
                      "ReduceLROnPlateau: expected factor < 1, got 1");
  expect_error<Error>([&] { optim::ReduceLROnPlateau(sgd, {.mode = "up"}); },
                      "ReduceLROnPlateau: expected mode 'min' or 'max', got 'up'");
  expect_error<Error>([&] { optim::ReduceLROnPlateau(sgd, {.threshold_mode = "log"}); },
                      "ReduceLROnPlateau: expected threshold_mode 'rel' or 'abs', got 'log'");
}

namespace {

// LBFGS steps on a quadratic plus a Rosenbrock valley (make_reference.py's lbfgs_trajectory).
void expect_lbfgs(const std::string& name, optim::LBFGSOptions options) {
  auto ref = read_reference("optim_" + name);
  Tensor p = ref.at("p0").clone().requires_grad_(), q = ref.at("p1").clone().requires_grad_();
  const Tensor &w = ref.at("w0"), &c = ref.at("c0");
  optim::LBFGS opt({p, q}, options);
  int calls = 0;
  auto closure = [&] {
    ++calls;
    Tensor head = q.narrow(0, 0, 3), tail = q.narrow(0, 1, 3);
    Tensor valley = sum(add(square(sub(1.0, head)), mul(square(sub(tail, square(head))), 10.0)));
    return add(sum(add(div(mul(w, square(p)), 2.0), mul(c, p))), valley);
  };
  for (int s = 0; ref.contains(fmt::format("step{}.p0", s)); ++s) {
    Tensor loss = opt.step(closure);
    EXPECT_NEAR(loss.item(), ref.at(fmt::format("step{}.loss", s)).item(), 1e-9) << name << " step " << s;
    expect_values(p, ref.at(fmt::format("step{}.p0", s)), fmt::format("{} step {} p0", name, s), 1e-9);
    expect_values(q, ref.at(fmt::format("step{}.p1", s)), fmt::format("{} step {} p1", name, s), 1e-9);
  }
  EXPECT_GT(calls, 3);
}

}  // namespace

TEST(TorchTrajectory, LBFGS) { expect_lbfgs("lbfgs", {.lr = 0.2, .max_iter = 4, .history_size = 3}); }

TEST(TorchTrajectory, LBFGSStrongWolfe) {
  expect_lbfgs("lbfgs_strong_wolfe", {.max_iter = 5, .history_size = 3, .line_search_fn = "strong_wolfe"});
}

TEST(Optimizer, LBFGSErrors) {
  Tensor p = ones({2}).requires_grad_();
  optim::LBFGS opt({p});
  expect_error<Error>([&] { opt.step(backward(sum(p))); }, "LBFGS.step: expected a closure that computes and returns");
  expect_error<ShapeError>([&] { opt.step([&] { return mul(p, 2.0); }); },
                           "LBFGS.step: expected the closure to return the loss, one element, got [2]");
  expect_error<ValueError>([&] { optim::LBFGS({p}, {.line_search_fn = "backtracking"}); },
                           "LBFGS: expected line_search_fn \"\" or \"strong_wolfe\", got \"backtracking\"");
  expect_error<Error>([&] { optim::LBFGS({p}, {.history_size = 0}); }, "LBFGS: expected history_size >= 1, got 0");
}

// With Adam, CyclicLR cycles beta1 (as PyTorch 2): max_momentum at the lowest
// lr, base_momentum at the highest, and the update reads the group's value.
TEST(Scheduler, CyclicLRCyclesAdamsBeta1) {
  Tensor p = ones({2}).requires_grad_();
  optim::Adam opt({p});
  optim::CyclicLR sched(opt, 0.01, 0.1, {.step_size_up = 2, .base_momentum = {0.8}, .max_momentum = {0.9}});
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.9);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.01);
  sched.step();
  sched.step();
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.8);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  optim::CyclicLR plain(opt, 0.01, 0.1, {.step_size_up = 2, .cycle_momentum = false});
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.8);  // left alone
}

// With Adam, OneCycleLR cycles beta1: max_momentum at the first step, base_momentum at the peak.
TEST(Scheduler, OneCycleLRCyclesAdamsBeta1AndNamesItsErrors) {
  Tensor p = ones({2}).requires_grad_();
  optim::Adam opt({p});
  optim::OneCycleLR sched(opt, 0.1, 10);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.95);
  sched.set_step(2);  // the peak: 0.3 * 10 - 1
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.85);
  optim::OneCycleLR plain(opt, 0.1, 10, {.cycle_momentum = false});
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].option("beta1"), 0.85);  // left alone
  optim::Adagrad adagrad({p});
  expect_error<Error>([&] { optim::OneCycleLR(adagrad, 0.1, 10); },
                      "OneCycleLR: cycle_momentum needs an optimizer with momentum or beta1; Adagrad has neither");
  expect_error<Error>([&] { optim::OneCycleLR(opt, 0.1, 10, {.anneal_strategy = "cosine"}); },
                      "OneCycleLR: expected anneal_strategy 'cos' or 'linear', got 'cosine'");
  expect_error<Error>([&] { optim::OneCycleLR(opt, 0.1, 10, {.max_momentum = {0.9, 0.95}}); },
                      "OneCycleLR: expected one max_momentum or one per parameter group (1), got 2");
}

// LBFGS's history travels in its state dict: a loaded copy continues identically.
TEST(Optimizer, LBFGSStateDictContinuesIdentically) {
  auto init = [] { return tensor({1.5, -0.5, 0.7}, {.dtype = DType::f64}).requires_grad_(); };
  Tensor p1 = init(), p2 = init();
  auto loss_of = [](const Tensor& p) {
    return add(sum(square(sub(p, 1.0))), sum(mul(square(square(p)), 0.1)));  // not quadratic: curvature changes
  };
  optim::LBFGS o1({p1}, {.max_iter = 3, .history_size = 2, .line_search_fn = "strong_wolfe"});
  o1.step([&] { return loss_of(p1); });
  StateDict sd = o1.state_dict();
  EXPECT_TRUE(sd.contains("extra.old_dirs.0"));
  {
    NoGradGuard ng;
    p2.copy_(p1);
  }
  optim::LBFGS o2({p2}, {.max_iter = 3, .history_size = 2, .line_search_fn = "strong_wolfe"});
  o2.load_state_dict(sd);
  for (int i = 0; i < 2; ++i) {
    o1.step([&] { return loss_of(p1); });
    o2.step([&] { return loss_of(p2); });
  }
  EXPECT_EQ(p1.to_vector<double>(), p2.to_vector<double>());
  sd.erase("extra.d");
  optim::LBFGS o3({p2}, {.max_iter = 3});
  expect_error<Error>([&] { o3.load_state_dict(sd); }, "LBFGS.load_state_dict: the state dict has no 'extra.d'");
}

RUMUS_DEVICE_SUITE(OptimOnEveryDevice);

// The fused SGD and Adam steps (the GPU's kernels) against the same steps in f64 on the CPU.
TEST_P(OptimOnEveryDevice, FusedStepsMatchTheF64Steps) {
  const Device dev = GetParam();
  Generator gen(9);
  Tensor p = randn({300}, {}, &gen), g = randn({300}, {}, &gen);
  for (int variant = 0; variant < 4; ++variant) {
    auto state = [&](Device where, DType dt) {
      return std::vector<Tensor>{p.to(dt).to(where), zeros({300}, {.dtype = dt, .device = where}),
                                 zeros({300}, {.dtype = dt, .device = where})};
    };
    std::vector<Tensor> got = state(dev, DType::f32), want = state(Device::cpu(), DType::f64);
    for (int step = 1; step <= 3; ++step) {
      auto apply = [&](std::vector<Tensor>& s, const Tensor& grad) {
        if (variant < 2) {
          sgd_step_(s[0], grad, s[1],
                    {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = variant == 1, .first = step == 1});
        } else {
          adam_step_(s[0], grad, s[1], s[2], {.lr = 0.01, .weight_decay = 0.1, .decoupled = variant == 3, .step = step});
        }
      };
      apply(got, g.to(dev));
      apply(want, g.to(DType::f64));
    }
    rumus::testing::expect_matches(got[0], want[0], 1e-5, "optimizer variant " + std::to_string(variant));
  }
}

namespace {
// The kernels `opt` runs for its second step over `params` with grads[i] for
// params[i] (the first makes the optimizer's state): on a GPU the commands it
// records, on the CPU the kernel calls the profiler sees.
std::uint64_t kernels_of_second_step(optim::Optimizer& opt, const std::vector<Tensor>& params,
                                     const std::vector<Tensor>& grads, Device dev) {
  GradientStore store;
  for (std::size_t i = 0; i < params.size(); ++i) store.insert(params[i].grad_id(), grads[i]);
  opt.step(store);
  synchronize(dev);
  if (dev.is_cpu()) {
    Profiler prof;
    opt.step(store);
    std::uint64_t calls = 0;
    for (const ProfileRow& row : prof.rows()) calls += row.calls;
    return calls;
  }
  const std::uint64_t before = device_stats(dev).commands;
  opt.step(store);
  return device_stats(dev).commands - before;
}
}  // namespace

// sgd_step_foreach_ (what SGD.step runs): the bits of sgd_step_ on each
// update, for 9 parameters of mixed sizes (more than one kernel's 6 slots on
// a GPU; enough elements for the CPU's threads to share them), two kinds of
// hyper-parameters, a view at an offset and a strided gradient (those run one
// by one). An SGD step over 6 parameters is one kernel.
TEST_P(OptimOnEveryDevice, ForeachSgdMatchesOneUpdateAtATime) {
  const Device dev = GetParam();
  Generator gen(21);
  const std::vector<Shape> shapes = {{300, 70}, {7}, {3, 4, 5}, {}, {1000}, {2, 2}, {513}, {64, 9}, {400, 401}};
  std::vector<Tensor> params, grads;
  for (const Shape& s : shapes) {
    params.push_back(randn(s, {}, &gen).to(dev));
    grads.push_back(randn(s, {}, &gen).to(dev));
  }
  Tensor storage = randn({40}, {}, &gen).to(dev);
  params.push_back(storage.narrow(0, 3, 20));  // a view at an offset
  grads.push_back(randn({20, 2}, {}, &gen).to(dev).select(1, 1));  // strided
  for (bool nesterov : {false, true}) {
    std::vector<Tensor> one = params, many = params, one_buf, many_buf;
    for (Tensor& t : one) t = t.clone();
    for (Tensor& t : many) t = t.clone();
    one.back() = storage.clone().narrow(0, 3, 20);  // each its own storage, still a view at an offset
    many.back() = storage.clone().narrow(0, 3, 20);
    for (const Tensor& t : params) {
      one_buf.push_back(zeros(t.shape(), {.device = dev}));
      many_buf.push_back(zeros(t.shape(), {.device = dev}));
    }
    for (int step = 0; step < 3; ++step) {
      std::vector<SgdUpdate> updates;
      for (std::size_t i = 0; i < params.size(); ++i) {
        // Every other parameter with other hyper-parameters: two kinds in one call.
        const SgdStep o{.lr = i % 2 ? 0.1 : 0.05, .momentum = 0.9, .weight_decay = i % 2 ? 0.01 : 0.0,
                        .nesterov = nesterov, .first = step == 0};
        sgd_step_(one[i], grads[i], one_buf[i], o);
        updates.push_back({many[i], grads[i], many_buf[i], o});
      }
      sgd_step_foreach_(updates);
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::string what = "parameter " + std::to_string(i) + (nesterov ? ", nesterov" : "");
      rumus::testing::expect_matches(many[i], one[i], 0, what);
      rumus::testing::expect_matches(many_buf[i], one_buf[i], 0, what + " momentum");
    }
  }
  // SGD.step over 6 parameters, after the momentum buffers exist: one kernel.
  std::vector<Tensor> six(params.begin(), params.begin() + 6);
  for (Tensor& t : six) t = t.clone();
  optim::SGD opt(six, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(kernels_of_second_step(opt, six, grads, dev), 1u);
}

// adam_step_foreach_ (what Adam and AdamW run): the bits of adam_step_ on
// each update, for 7 parameters (more than one kernel's 4 slots on a GPU;
// enough elements for the CPU's threads to share them), Adam and AdamW in one
// call, and a view at an offset (run alone). An AdamW step over 7 parameters
// takes two kernels on a GPU and one on the CPU.
TEST_P(OptimOnEveryDevice, ForeachAdamMatchesOneUpdateAtATime) {
  const Device dev = GetParam();
  Generator gen(22);
  const std::vector<Shape> shapes = {{300, 70}, {7}, {}, {1000}, {513}, {64, 9}, {400, 401}};
  std::vector<Tensor> params, grads;
  for (const Shape& s : shapes) {
    params.push_back(randn(s, {}, &gen).to(dev));
    grads.push_back(randn(s, {}, &gen).to(dev));
  }
  const Tensor storage = randn({40}, {}, &gen).to(dev);
  grads.push_back(randn({20}, {}, &gen).to(dev));
  std::vector<Tensor> one, many, one_m, one_v, many_m, many_v;
  for (const Tensor& t : params) {
    one.push_back(t.clone());
    many.push_back(t.clone());
  }
  one.push_back(storage.clone().narrow(0, 3, 20));  // a view at an offset
  many.push_back(storage.clone().narrow(0, 3, 20));
  for (const Tensor& t : one)
    for (auto* list : {&one_m, &one_v, &many_m, &many_v}) list->push_back(zeros(t.shape(), {.device = dev}));
  for (int step = 1; step <= 3; ++step) {
    std::vector<AdamUpdate> updates;
    for (std::size_t i = 0; i < one.size(); ++i) {
      const AdamStep o{.lr = 0.01, .weight_decay = 0.1, .decoupled = i % 2 == 1, .step = step};  // Adam and AdamW
      adam_step_(one[i], grads[i], one_m[i], one_v[i], o);
      updates.push_back({many[i], grads[i], many_m[i], many_v[i], o});
    }
    adam_step_foreach_(updates);
  }
  for (std::size_t i = 0; i < one.size(); ++i) {
    const std::string what = "parameter " + std::to_string(i);
    rumus::testing::expect_matches(many[i], one[i], 0, what);
    rumus::testing::expect_matches(many_m[i], one_m[i], 0, what + " exp_avg");
    rumus::testing::expect_matches(many_v[i], one_v[i], 0, what + " exp_avg_sq");
  }
  std::vector<Tensor> seven = params;
  for (Tensor& t : seven) t = t.clone();
  optim::AdamW opt(seven, {.lr = 0.01});
  EXPECT_EQ(kernels_of_second_step(opt, seven, grads, dev), dev.is_cpu() ? 1u : 2u);
}

namespace {
// Gradients of mixed shapes (one spans several reduction workgroups) with
// their norm on a device, after clipping.
struct Clipped {
  double norm = 0;
  std::vector<Tensor> grads;
  DeviceStats before, after;
};

Clipped clip_on(Device dev, double max_norm, double p, DType dtype = DType::f32) {
  Generator gen(13);
  std::vector<Tensor> params, coeffs;
  for (Shape s : {Shape{300, 70}, Shape{7}, Shape{3, 4, 5}, Shape{}}) {
    params.push_back(randn(s, {}, &gen).to(dtype).to(dev).requires_grad_());
    coeffs.push_back(randn(s, {}, &gen).to(dtype).to(dev));
  }
  Tensor loss = zeros({}, {.dtype = dtype, .device = dev});
  for (std::size_t i = 0; i < params.size(); ++i) loss = add(loss, sum(mul(params[i], coeffs[i])));
  GradientStore grads = backward(loss);  // each gradient is its coefficient
  synchronize(dev);
  Clipped c;
  c.before = device_stats(dev);
  c.norm = optim::clip_grad_norm_(grads, params, max_norm, p);
  c.after = device_stats(dev);
  for (auto& t : params) c.grads.push_back(grads.at(t));
  return c;
}
}  // namespace

// clip_grad_norm_ against f64 on the CPU, for each norm type, clipping and
// not; on a GPU the norm is the one value read back.
TEST_P(OptimOnEveryDevice, ClipGradNormMatchesTheF64NormAndReadsOnce) {
  const Device dev = GetParam();
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
    for (double max_norm : {0.5, 1e9}) {  // clipped, and left alone
      const std::string what = "p " + std::to_string(p) + ", max_norm " + std::to_string(max_norm);
      Clipped want = clip_on(Device::cpu(), max_norm, p, DType::f64);
      Clipped got = clip_on(dev, max_norm, p);
      EXPECT_NEAR(got.norm, want.norm, 1e-5 * want.norm) << what;
      EXPECT_GT(want.norm, 0.5) << what;
      if (!dev.is_cpu()) {
        EXPECT_EQ(got.after.device_to_host - got.before.device_to_host, 1u) << what << ": only the norm is read";
        EXPECT_EQ(got.after.host_to_device - got.before.host_to_device, 0u) << what;
      }
      for (std::size_t i = 0; i < want.grads.size(); ++i) {
        EXPECT_EQ(got.grads[i].device(), dev) << what;
        EXPECT_EQ(got.grads[i].dtype(), DType::f32) << what;
        rumus::testing::expect_matches(got.grads[i], want.grads[i], 1e-5, what + ", gradient " + std::to_string(i));
      }
    }
  }
}
