// Step capture and replay (core/capture.hpp): replayed training steps give
// bit for bit the parameters of eager steps (SGD momentum, Adam, AdamW, an lr
// schedule), memory the capture uses stays reserved, the CPU fallback runs
// the closure at replay, and every rule break is a CaptureError.
// The Vulkan tests run on any Vulkan device (CI: lavapipe); they skip without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include <rumus/rumus.hpp>

#include "devices.hpp"
#include "expect_error.hpp"

using namespace rumus;
using namespace rumus::testing;

namespace {


struct Mlp : nn::Module {
  nn::Linear fc1{20, 32}, fc2{32, 5};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}}); }
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))); }
};

enum class Kind { sgd_momentum, adam, adamw };

std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, std::vector<Tensor> params) {
  switch (kind) {
    case Kind::sgd_momentum:
      return std::make_unique<optim::SGD>(std::move(params),
                                          optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
    case Kind::adam:
      return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
    case Kind::adamw:
      return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 1e-2});
  }
  return nullptr;
}

struct TrainResult {
  std::vector<std::vector<float>> params;
  std::vector<float> losses;
  double step_count = 0;  // the optimizer's count for the first parameter
};

// `steps` training steps on fresh batches, eager or through one capture and
// its replays (each batch copied into the static inputs first). `schedule`,
// if set, runs after every step (an lr scheduler).
TrainResult train(Device dev, Kind kind, bool captured, int steps,
          const std::function<void(optim::Optimizer&)>& schedule = {}) {
  manual_seed(0);
  Mlp net;
  net.to(dev);
  auto opt = make_optimizer(kind, net.parameters());
  Generator gen(7);
  Tensor x = zeros({16, 20}, {.device = dev});
  Tensor y = zeros({16}, {.dtype = DType::i64, .device = dev});
  Tensor loss;
  auto body = [&] {
    loss = cross_entropy(net.forward(x), y);
    opt->step(backward(loss));
  };
  CapturedStep step;
  if (captured) step = capture(dev, body);
  TrainResult run;
  for (int i = 0; i < steps; ++i) {
    x.copy_(randn({16, 20}, {}, &gen));
    y.copy_(randint(0, 5, {16}, {.dtype = DType::i64}, &gen));
    if (captured) step.replay();
    else body();
    run.losses.push_back(float(loss.item()));
    if (schedule) schedule(*opt);
  }
  for (auto& p : net.parameters()) run.params.push_back(p.to_vector<float>());
  run.step_count = opt->state_dict().at("state.0.0.step").item();
  return run;
}

void expect_identical(const TrainResult& replayed, const TrainResult& eager) {
  EXPECT_EQ(replayed.losses, eager.losses);
  ASSERT_EQ(replayed.params.size(), eager.params.size());
  for (std::size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_EQ(replayed.params[i], eager.params[i]) << "parameter " << i << " differs from eager steps";
  EXPECT_EQ(replayed.step_count, eager.step_count);
}

TEST(CaptureReplay, SgdMomentumMatchesEagerBitForBit) {
  REQUIRE_VULKAN();
  TrainResult eager = train(kGpu, Kind::sgd_momentum, false, 5);
  TrainResult replayed = train(kGpu, Kind::sgd_momentum, true, 5);
  expect_identical(replayed, eager);
  EXPECT_EQ(replayed.step_count, 5);
  EXPECT_NE(replayed.params[0], train(kGpu, Kind::sgd_momentum, false, 0).params[0]) << "the replays updated nothing";
}

TEST(CaptureReplay, AdamMatchesEagerBitForBit) {
  REQUIRE_VULKAN();
  expect_identical(train(kGpu, Kind::adam, true, 5), train(kGpu, Kind::adam, false, 5));
}

TEST(CaptureReplay, AdamWMatchesEagerBitForBit) {
  REQUIRE_VULKAN();
  expect_identical(train(kGpu, Kind::adamw, true, 4), train(kGpu, Kind::adamw, false, 4));
}

// An lr scheduler between replays: the captured update reads the new lr.
TEST(CaptureReplay, LrChangedBetweenReplaysIsHonoured) {
  REQUIRE_VULKAN();
  for (Kind kind : {Kind::sgd_momentum, Kind::adam}) {
    auto with_step_lr = [&](bool captured) {
      std::unique_ptr<optim::StepLR> sched;  // halves the lr after every step
      return train(kGpu, kind, captured, 4, [&](optim::Optimizer& opt) {
        if (!sched) sched = std::make_unique<optim::StepLR>(opt, 1, 0.5);
        sched->step();
      });
    };
    TrainResult eager = with_step_lr(false);
    TrainResult replayed = with_step_lr(true);
    expect_identical(replayed, eager);
    // The schedule matters: a frozen lr would give these parameters.
    TrainResult constant = train(kGpu, kind, true, 4);
    EXPECT_NE(replayed.params[0], constant.params[0]);
  }
}

// A captured step records every hyper-parameter but the lr and SGD's
// momentum and dampening. OneCycleLR cycles the momentum by default: SGD's
// captured steps follow it bit for bit, Adam's beta1 is refused at the replay
// after the change, naming it (rather than replayed with the old value), as
// is an SGD momentum set to zero (another kernel). Without the cycling, the
// one-cycle lr replays as eager steps run.
TEST(CaptureReplay, ScheduledMomentumIsFollowedOrRefused) {
  REQUIRE_VULKAN();
  auto one_cycle = [&](Kind kind, bool captured, bool cycle_momentum) {
    std::unique_ptr<optim::OneCycleLR> sched;
    return train(kGpu, kind, captured, 5, [&](optim::Optimizer& opt) {
      if (!sched)
        sched = std::make_unique<optim::OneCycleLR>(opt, 0.05, 8, optim::OneCycleLROptions{.cycle_momentum = cycle_momentum});
      sched->step();
    });
  };
  const TrainResult cycled = one_cycle(Kind::sgd_momentum, true, true);
  expect_identical(cycled, one_cycle(Kind::sgd_momentum, false, true));
  EXPECT_NE(cycled.params[0], one_cycle(Kind::sgd_momentum, true, false).params[0]) << "the momentum did not change";
  expect_error<CaptureError>([&] { one_cycle(Kind::adam, true, true); }, "Adam group 0's beta1 changed from");
  expect_identical(one_cycle(Kind::adam, true, false), one_cycle(Kind::adam, false, false));
  expect_error<CaptureError>(
      [&] {
        train(kGpu, Kind::sgd_momentum, true, 3, [](optim::Optimizer& opt) { opt.param_groups()[0].options["momentum"] = 0; });
      },
      "SGD group 0's momentum changed from 0.9 to 0");
}

// Eager steps before and after replays share the optimizer's state.
TEST(CaptureReplay, EagerAndReplayedStepsInterleave) {
  REQUIRE_VULKAN();
  for (Kind kind : {Kind::sgd_momentum, Kind::adam}) {
    auto run = [&](bool captured) {
      manual_seed(0);
      Mlp net;
      net.to(kGpu);
      auto opt = make_optimizer(kind, net.parameters());
      Tensor x = randn({16, 20}).to(kGpu);
      Tensor y = randint(0, 5, {16}, {.dtype = DType::i64}).to(kGpu);
      auto body = [&] { opt->step(backward(cross_entropy(net.forward(x), y))); };
      body();  // eager first step
      CapturedStep step;
      if (captured) step = capture(kGpu, body);
      for (int i = 0; i < 3; ++i) captured ? step.replay() : body();
      body();  // eager again (a last, partial batch)
      std::vector<std::vector<float>> out;
      for (auto& p : net.parameters()) out.push_back(p.to_vector<float>());
      return out;
    };
    EXPECT_EQ(run(true), run(false));
  }
}

// capture() runs none of the device work; each replay runs it once.
// ---- mixed precision: an autocast step with a device-side GradScaler ----

struct AmpResult {
  std::vector<std::vector<float>> params;
  std::vector<double> scales;  // after each step
  std::vector<std::int64_t> trackers;
  double step_count = 0;
};

// `steps` autocast steps with a device-side GradScaler (init 1024, growth
// every 2 clean steps): eager, or the first `eager_first` eager and the rest
// replays of one capture. The batches of the steps in `poisoned` hold
// `poison` (1e30: inf once cast to f16, the GPU's autocast dtype): those
// steps are skipped and the scale backs off inside the replay, with no host read.
AmpResult amp_train(Device dev, Kind kind, bool captured, int steps, const std::vector<int>& poisoned,
                    int eager_first = 0, float poison = 1e30f) {
  manual_seed(0);
  Mlp net;
  net.to(dev);
  auto opt = make_optimizer(kind, net.parameters());
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2, .device_side = true});
  Generator gen(7);
  Tensor x = zeros({16, 20}, {.device = dev});
  Tensor y = zeros({16}, {.dtype = DType::i64, .device = dev});
  auto body = [&] {
    Tensor loss = autocast([&] { return cross_entropy(net.forward(x), y); });
    GradientStore grads = backward(scaler.scale(loss));
    scaler.step(*opt, grads);
    scaler.update();
  };
  CapturedStep step;
  AmpResult run;
  for (int i = 0; i < steps; ++i) {
    std::vector<float> batch = randn({16, 20}, {}, &gen).to_vector<float>();
    if (std::find(poisoned.begin(), poisoned.end(), i) != poisoned.end()) batch[5] = poison;
    x.copy_(tensor(batch, {16, 20}));
    y.copy_(randint(0, 5, {16}, {.dtype = DType::i64}, &gen));
    if (captured && i >= eager_first) {
      if (!step.valid()) step = capture(dev, body);
      step.replay();
    } else {
      body();
    }
    run.scales.push_back(scaler.get_scale());
    run.trackers.push_back(scaler.growth_tracker());
  }
  for (auto& p : net.parameters()) run.params.push_back(p.to_vector<float>());
  run.step_count = opt->state_dict().at("state.0.0.step").item();
  return run;
}

// Replays of a captured amp step land bit for bit where eager steps do,
// through a skipped first step (Adam's moments never written, SGD's momentum
// not started), growth, and a skip later on; skipped steps are not counted.
TEST(CaptureReplay, AmpStepWithDeviceSideScalerMatchesEager) {
  REQUIRE_VULKAN();
  const std::vector<int> poisoned{0, 3};
  const std::vector<double> scales{512, 512, 1024, 512, 512, 1024};
  const std::vector<std::int64_t> trackers{0, 1, 0, 0, 1, 0};
  for (Kind kind : {Kind::sgd_momentum, Kind::adam, Kind::adamw}) {
    SCOPED_TRACE(int(kind));
    const AmpResult eager = amp_train(kGpu, kind, false, 6, poisoned);
    EXPECT_EQ(eager.scales, scales);
    EXPECT_EQ(eager.trackers, trackers);
    EXPECT_EQ(eager.step_count, 4);
    for (int eager_first : {0, 2}) {  // captured from the start, and after eager steps made the state
      SCOPED_TRACE(eager_first);
      const AmpResult replayed = amp_train(kGpu, kind, true, 6, poisoned, eager_first);
      EXPECT_EQ(replayed.scales, scales);
      EXPECT_EQ(replayed.trackers, trackers);
      EXPECT_EQ(replayed.step_count, 4);
      ASSERT_EQ(replayed.params.size(), eager.params.size());
      for (std::size_t i = 0; i < eager.params.size(); ++i)
        EXPECT_EQ(replayed.params[i], eager.params[i]) << "parameter " << i << " differs from eager steps";
    }
    EXPECT_NE(eager.params[0], amp_train(kGpu, kind, false, 0, {}).params[0]) << "the steps updated nothing";
  }
}

// On the CPU the closure runs at each replay: the same steps, the same numbers.
// (Its autocast dtype, bf16, holds 1e30: the poisoned batches hold inf.)
TEST(CaptureReplay, AmpStepWithDeviceSideScalerReplaysOnTheCpu) {
  const std::vector<int> poisoned{0, 3};
  const float inf = std::numeric_limits<float>::infinity();
  for (Kind kind : {Kind::sgd_momentum, Kind::adam}) {
    const AmpResult eager = amp_train(Device::cpu(), kind, false, 5, poisoned, 0, inf);
    const AmpResult replayed = amp_train(Device::cpu(), kind, true, 5, poisoned, 0, inf);
    EXPECT_EQ(replayed.scales, eager.scales);
    EXPECT_EQ(replayed.scales, (std::vector<double>{512, 512, 1024, 512, 512}));
    EXPECT_EQ(replayed.step_count, 3);
    EXPECT_EQ(replayed.params, eager.params);
  }
}

// The scaler's and the optimizer's device state made inside a capture gets
// its first values at the first replay; read or used eagerly before that, it
// holds them already (and the replay does not write them again).
TEST(CaptureReplay, AmpStateMadeInsideACaptureIsUsableBeforeTheFirstReplay) {
  REQUIRE_VULKAN();
  manual_seed(0);
  Mlp net;
  net.to(kGpu);
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2, .device_side = true});
  Tensor x = randn({16, 20}).to(kGpu), y = zeros({16}, {.dtype = DType::i64, .device = kGpu});
  auto body = [&] {
    Tensor loss = autocast([&] { return cross_entropy(net.forward(x), y); });
    GradientStore grads = backward(scaler.scale(loss));
    scaler.step(opt, grads);
    scaler.update();
  };
  CapturedStep step = capture(kGpu, body);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  body();  // eager, before any replay
  EXPECT_EQ(opt.state_dict().at("state.0.0.step").item(), 1);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  step.replay();
  EXPECT_EQ(scaler.get_scale(), 2048.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(opt.state_dict().at("state.0.0.step").item(), 2);
  for (const Tensor& p : net.parameters())
    for (float v : p.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
}

TEST(CaptureReplay, CaptureRecordsAndReplayRuns) {
  REQUIRE_VULKAN();
  Tensor counter = zeros({4}, {.device = kGpu});
  CapturedStep step = capture(kGpu, [&] { counter.add_(ones({4}, {.device = kGpu})); });
  EXPECT_EQ(counter.to_vector<float>(), std::vector<float>(4, 0.0f));
  for (int i = 0; i < 3; ++i) step.replay();
  EXPECT_EQ(counter.to_vector<float>(), std::vector<float>(4, 3.0f));
  EXPECT_EQ(step.replays(), 3u);
  EXPECT_EQ(step.device(), kGpu);
}

// Many replays queued at once, each after an eager copy of its own input
// into the step's static input (more than the stream lets run ahead): each
// replay must see its own input and the one before's result, in order.
TEST(CaptureReplay, ReplaysQueuedDeepStayInOrderWithTheirInputs) {
  REQUIRE_VULKAN();
  constexpr int kSteps = 24;
  std::vector<Tensor> inputs;
  for (int i = 0; i < kSteps; ++i) inputs.push_back(full({256}, double(i % 7) - 3.0, {.device = kGpu}));
  Tensor x = zeros({256}, {.device = kGpu});
  Tensor acc = ones({256}, {.device = kGpu});
  // acc = acc * 0.5 + x: the result depends on the order of the inputs.
  CapturedStep step = capture(kGpu, [&] { acc.copy_(add(mul(acc, 0.5), x)); });
  for (int i = 0; i < kSteps; ++i) {
    x.copy_(inputs[i]);
    step.replay();
  }
  double want = 1.0;
  for (int i = 0; i < kSteps; ++i) want = want * 0.5 + (double(i % 7) - 3.0);
  for (float v : acc.to_vector<float>()) ASSERT_NEAR(v, want, 1e-5);
  EXPECT_EQ(step.replays(), std::size_t(kSteps));
}

// With RUMUS_VULKAN_PROFILE=1 (the ctest entry vulkan_replays_timed runs
// this test so) every replay is timed on the GPU between two timestamps
// submitted around it: the count, a positive GPU time each and a gap before
// each replay after the first; the replays still run in order with their
// inputs. Without it, nothing is timed.
TEST(CaptureReplay, ReplaysAreTimedOnTheGpuWhenProfiling) {
  REQUIRE_VULKAN();
  const char* flag = std::getenv("RUMUS_VULKAN_PROFILE");
  const bool profiling = flag && std::string(flag) != "" && std::string(flag) != "0";
  constexpr int kSteps = 12;
  Tensor x = zeros({512}, {.device = kGpu});
  Tensor acc = zeros({512}, {.device = kGpu});
  CapturedStep step = capture(kGpu, [&] { acc.copy_(add(mul(acc, 0.5), exp(x))); });
  synchronize(kGpu);
  const DeviceStats before = device_stats(kGpu);
  double want = 0.0;
  for (int i = 0; i < kSteps; ++i) {
    x.fill_(double(i % 3));
    step.replay();
    want = want * 0.5 + std::exp(double(i % 3));
  }
  for (float v : acc.to_vector<float>()) ASSERT_NEAR(v, want, 1e-4);
  const DeviceStats after = device_stats(kGpu);
  if (!profiling) {
    EXPECT_EQ(after.replays_timed, before.replays_timed) << "replays are timed only when profiling";
    return;
  }
  EXPECT_EQ(after.replays_timed - before.replays_timed, std::uint64_t(kSteps));
  EXPECT_GT(after.replay_gpu_ms - before.replay_gpu_ms, 0.0);
  EXPECT_GE(after.replay_gaps - before.replay_gaps, std::uint64_t(kSteps - 1));
  EXPECT_GT(after.replay_gap_ms - before.replay_gap_ms, 0.0) << "each replay's fill runs between two replays";
}

// Temporaries the closure frees, and outputs the caller drops, stay reserved:
// later allocations do not reuse them, so replays never write into other
// tensors (which the allocator would hand those ranges to otherwise).
TEST(CaptureReplay, MemoryOfTheCaptureStaysReserved) {
  REQUIRE_VULKAN();
  Tensor x = full({1000}, 2.0, {.device = kGpu});
  Tensor out;
  CapturedStep step = capture(kGpu, [&] {
    Tensor t = mul(x, x);       // freed when the closure returns
    out = add(exp(neg(t)), t);  // exp(-4) + 4
  });
  std::vector<Tensor> others;
  auto allocate_others = [&] {
    synchronize(kGpu);  // every freed range is reusable now
    for (int i = 0; i < 20; ++i) others.push_back(full({1000}, -1.0 - double(others.size()), {.device = kGpu}));
  };
  allocate_others();
  step.replay();
  const float want = std::exp(-4.0f) + 4.0f;
  for (float v : out.to_vector<float>()) ASSERT_FLOAT_EQ(v, want);
  out = Tensor();  // the capture still writes its memory
  allocate_others();
  step.replay();
  for (std::size_t i = 0; i < others.size(); ++i)
    ASSERT_EQ(others[i].to_vector<float>(), std::vector<float>(1000, -1.0f - float(i))) << "tensor " << i;
}

// On the CPU, capture() keeps the closure and replay() runs it.
TEST(CaptureReplay, CpuReplayRunsTheClosure) {
  int runs = 0;
  Tensor counter = zeros({2});
  CapturedStep step = capture(Device::cpu(), [&] {
    ++runs;
    counter.add_(ones({2}));
    EXPECT_FALSE(is_capturing());
  });
  EXPECT_EQ(runs, 0);
  step.replay();
  step.replay();
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(counter.to_vector<float>(), std::vector<float>(2, 2.0f));
  expect_identical(train(Device::cpu(), Kind::adam, true, 3), train(Device::cpu(), Kind::adam, false, 3));
}

TEST(CaptureErrors, HostReadsInside) {
  REQUIRE_VULKAN();
  Tensor x = ones({3}, {.device = kGpu});
  expect_error<CaptureError>([&] { capture(kGpu, [&] { sum(x).item(); }); }, "host read");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { x.to(Device::cpu()); }); }, "item(), to(cpu)");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { synchronize(kGpu); }); }, "synchronize");
  // The device records eagerly again afterwards.
  EXPECT_EQ(sum(x).item(), 3.0);
}

TEST(CaptureErrors, UploadsInside) {
  REQUIRE_VULKAN();
  Tensor x = zeros({3}, {.device = kGpu});
  Tensor host = ones({3});
  expect_error<CaptureError>([&] { capture(kGpu, [&] { x.copy_(host); }); }, "upload");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { tensor({1.0, 2.0}).to(kGpu); }); },
                             "copy new inputs into static tensors");
}

// Random draws inside a capture take fresh numbers at each replay: the same
// ones eager calls would have taken from the generator.
TEST(CaptureReplay, RandomDrawsMatchEagerDraws) {
  REQUIRE_VULKAN();
  auto draws = [](bool captured) {
    manual_seed(3);
    Generator own(11);
    Tensor x = ones({64}, {.device = kGpu});
    Tensor a, b;
    auto body = [&] {
      a = dropout(x, 0.5, true);
      b = randn({8}, {.device = kGpu}, &own);
    };
    CapturedStep step;
    if (captured) step = capture(kGpu, body);
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 3; ++i) {
      captured ? step.replay() : body();
      out.push_back(a.to_vector<float>());
      out.push_back(b.to_vector<float>());
    }
    return out;
  };
  auto eager = draws(false), replayed = draws(true);
  EXPECT_EQ(replayed, eager);
  EXPECT_NE(replayed[0], replayed[2]) << "each replay draws new numbers";
}

TEST(CaptureErrors, AttentionDropoutInside) {
  REQUIRE_VULKAN();
  Tensor q = ones({1, 1, 4, 8}, {.device = kGpu});
  expect_error<CaptureError>(
      [&] { capture(kGpu, [&] { scaled_dot_product_attention(q, q, q, {}, 0.1); }); }, "attention dropout");
}

// An update the fused kernels do not take (f64 or strided on Vulkan) is
// composed of ops, which would bake this step's learning rate into the
// capture: refused, naming the op. Eagerly it runs, on the device.
TEST(CaptureErrors, ComposedOptimizerUpdateInside) {
  REQUIRE_VULKAN();
  Tensor p = ones({4}, {.dtype = DType::f64, .device = kGpu}), g = full({4}, 0.5, {.dtype = DType::f64, .device = kGpu});
  Tensor m = zeros_like(p), v = zeros_like(p), buf = zeros_like(p);
  expect_error<CaptureError>([&] { capture(kGpu, [&] { sgd_step_(p, g, buf, {.lr = 0.1, .momentum = 0.9, .first = true}); }); },
                             "sgd_step_: an SGD update of a parameter the fused kernel does not take");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { adam_step_(p, g, m, v, {.lr = 0.1, .step = 1}); }); },
                             "adam_step_: an Adam update of a parameter the fused kernel does not take");
  sgd_step_(p, g, buf, {.lr = 0.1, .momentum = 0.9, .first = true});
  EXPECT_TRUE(p.device() == kGpu);
  EXPECT_EQ(p.cpu().to_vector<double>(), std::vector<double>(4, 1.0 - 0.1 * 0.5));
}

TEST(CaptureErrors, NestingAndReplayInside) {
  REQUIRE_VULKAN();
  Tensor x = zeros({2}, {.device = kGpu});
  CapturedStep inner = capture(kGpu, [&] { x.add_(x); });
  expect_error<CaptureError>([&] { capture(kGpu, [&] { capture(kGpu, [] {}); }); }, "capture: nested capture");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { inner.replay(); }); }, "replay: replaying a step");
  expect_error<CaptureError>([&] { CapturedStep().replay(); }, "the step is empty");
  // Nested inside a CPU replay too.
  CapturedStep cpu = capture(Device::cpu(), [&] { capture(Device::cpu(), [] {}); });
  expect_error<CaptureError>([&] { cpu.replay(); }, "nested capture");
}

TEST(CaptureErrors, OtherDevicesAndThreads) {
  REQUIRE_VULKAN();
  Tensor x = zeros({2}, {.device = kGpu});
  CapturedStep other = capture(kGpu, [&] { x.add_(x); });
  std::string replay_error, kernel_error;
  CapturedStep step = capture(kGpu, [&] {
    std::thread t([&] {
      try {
        other.replay();
      } catch (const CaptureError& e) {
        replay_error = e.what();
      }
      try {
        Tensor y = ones({2}, {.device = kGpu});
      } catch (const CaptureError& e) {
        kernel_error = e.what();
      }
    });
    t.join();
  });
  EXPECT_NE(replay_error.find("from another thread while a capture records"), std::string::npos) << replay_error;
  EXPECT_NE(kernel_error.find("from another thread"), std::string::npos) << kernel_error;
  EXPECT_EQ(other.replays(), 0u);
}

TEST(CaptureErrors, OptimizersThatCannotBeCapturedOrAreGone) {
  REQUIRE_VULKAN();
  Tensor w = ones({3}, {.device = kGpu}).requires_grad_();
  optim::RMSprop rms({w});
  expect_error<CaptureError>([&] { capture(kGpu, [&] { rms.step(backward(sum(mul(w, w)))); }); },
                             "RMSprop.step: this optimizer cannot be captured");
  auto sgd = std::make_unique<optim::SGD>(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.1});
  CapturedStep step = capture(kGpu, [&] { sgd->step(backward(sum(mul(w, w)))); });
  sgd.reset();
  expect_error<CaptureError>([&] { step.replay(); }, "has been destroyed");
  // Loading a state dict replaces the buffers a capture updates.
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  CapturedStep stale = capture(kGpu, [&] { opt.step(backward(sum(mul(w, w)))); });
  stale.replay();
  opt.load_state_dict(opt.state_dict());
  expect_error<CaptureError>([&] { stale.replay(); }, "SGD.load_state_dict replaced the state");
}

// What a replay depends on is checked at capture and at each replay: a second
// optimizer step in one capture, a model moved away and back, an input rebound
// to a new tensor. Each is a CaptureError, on the CPU (from its first replay
// on) as on Vulkan, never a replay that writes stale memory.
TEST(CaptureErrors, WhatTheStepUsesChangedSinceCapture) {
  std::vector<Device> devices{Device::cpu()};
  if (have_vulkan()) devices.push_back(kGpu);
  for (const Device dev : devices) {
    SCOPED_TRACE(dev.str());
    Tensor w = full({1}, 2.0, {.device = dev}).requires_grad_();
    optim::Adam adam({w}, {.lr = 0.1});
    auto two_steps = [&] {
      adam.step(backward(sum(mul(w, w))));
      adam.step(backward(sum(mul(w, w))));
    };
    expect_error<CaptureError>(
        [&] {
          CapturedStep step = capture(dev, two_steps);
          step.replay();
        },
        "Adam.step: a second step inside one capture");

    Mlp net;
    net.to(dev);
    optim::SGD sgd(net.parameters(), {.lr = 0.1});
    Tensor x = ones({4, 20}, {.device = dev});
    Tensor y = zeros({4}, {.dtype = DType::i64, .device = dev});
    CapturedStep step = capture(dev, [&] { sgd.step(backward(cross_entropy(net.forward(x), y))); });
    step.replay();
    step.replay();
    const std::vector<float> before = net.fc1.weight.to_vector<float>();
    net.to(Device::cpu());
    net.to(dev);
    if (dev != Device::cpu())
      expect_error<CaptureError>([&] { step.replay(); }, "was moved to other memory since capture");
    EXPECT_EQ(net.fc1.weight.to_vector<float>(), before);  // nothing was written anywhere

    CapturedStep fresh = capture(dev, [&] { sgd.step(backward(cross_entropy(net.forward(x), y))); });
    fresh.replay();
    x = ones({8, 20}, {.device = dev});  // rebound, not copied into
    expect_error<CaptureError>([&] { fresh.replay(); }, "was released or rebound to another tensor since capture");
  }
}

}  // namespace
