// The autograd engine: Kahn's algorithm, GradientStore, grad mode, versions, threads, custom functions.
#include <gtest/gtest.h>

#include "devices.hpp"
#include "expect_error.hpp"

#include <cmath>
#include <functional>

#include <thread>

#include <rumus/rumus.hpp>

using namespace rumus;
using rumus::testing::expect_error;

namespace {

TEST(Autograd, ScalarBackwardAndSharedSubgraphs) {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = mul(x, x);           // used twice below: gradients accumulate
  Tensor loss = sum(add(y, mul(y, 3.0)));
  GradientStore g = backward(loss);
  EXPECT_EQ(g.at(x).to_vector<float>(), (std::vector<float>{8, 16, 24}));  // 4 * 2x
  EXPECT_EQ(g.size(), 1u);
  EXPECT_EQ(autograd::tape_size(), 0u);
}

// Gradients of several views of parts of one tensor (select, narrow, slice;
// overlapping, one view used twice) and of a whole-tensor consumer add up,
// whichever reaches the engine first: the engine adds a view's gradient into
// its part of the input's gradient in place once it holds that buffer.
TEST(Autograd, GradientsOfViewsOfPartsAddUp) {
  const std::int64_t A = 4, B = 3, C = 5;
  Generator gen(7);
  const TensorOptions f64{.dtype = DType::f64};
  Tensor w1 = randn({A, C}, f64, &gen), w2 = randn({A, C}, f64, &gen), w3 = randn({A, B, 3}, f64, &gen);
  Tensor w4 = randn({2, B, C}, f64, &gen), c = randn({A, B, C}, f64, &gen);
  // dL/dy, built element by element.
  std::vector<double> dy = c.to_vector<double>();
  auto at = [&](std::int64_t a, std::int64_t b, std::int64_t k) { return std::size_t((a * B + b) * C + k); };
  const auto v1 = w1.to_vector<double>(), v2 = w2.to_vector<double>(), v3 = w3.to_vector<double>(),
             v4 = w4.to_vector<double>();
  for (std::int64_t a = 0; a < A; ++a)
    for (std::int64_t k = 0; k < C; ++k) {
      dy[at(a, 0, k)] += 2 * v1[std::size_t(a * C + k)];  // select(1, 0) used twice
      dy[at(a, 2, k)] += v2[std::size_t(a * C + k)];
      for (std::int64_t b = 0; b < B; ++b) {
        if (k >= 1 && k < 4) dy[at(a, b, k)] += v3[std::size_t((a * B + b) * 3 + (k - 1))];
        if (a % 2 == 0) dy[at(a, b, k)] += v4[std::size_t(((a / 2) * B + b) * C + k)];
      }
    }
  for (const bool whole_first : {true, false}) {
    SCOPED_TRACE(whole_first ? "whole-tensor consumer recorded first" : "views recorded first");
    Tensor x = randn({A, B, C}, f64, &gen).requires_grad_();
    Tensor y = mul(x, 3.0);
    auto of_parts = [&] {
      Tensor parts = add(add(sum(mul(y.select(1, 0), w1)), sum(mul(y.select(1, 2), w2))),
                         add(sum(mul(y.narrow(2, 1, 3), w3)), sum(mul(y.slice(0, 0, A, 2), w4))));
      return add(parts, sum(mul(y.select(1, 0), w1)));
    };
    Tensor whole, parts;
    if (whole_first) {
      whole = sum(mul(y, c));
      parts = of_parts();
    } else {
      parts = of_parts();
      whole = sum(mul(y, c));
    }
    Tensor loss = add(whole, parts);
    const std::vector<double> got = backward(loss).at(x).to_vector<double>();
    ASSERT_EQ(got.size(), dy.size());
    for (std::size_t i = 0; i < dy.size(); ++i) EXPECT_NEAR(got[i], 3 * dy[i], 1e-12) << "element " << i;
  }
}

TEST(Autograd, SeededBackwardOnNonScalar) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = mul(x, 3.0);
  GradientStore g = backward(y, tensor({1.0, 10.0}));
  EXPECT_EQ(g.at(x).to_vector<float>(), (std::vector<float>{3, 30}));
}

TEST(Autograd, NonScalarWithoutSeedIsAnError) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = mul(x, 2.0);
  try {
    backward(y);
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("backward: expected a scalar"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3]"), std::string::npos);
  }
  EXPECT_THROW(backward(y, ones({2})), ShapeError);
  EXPECT_THROW(backward(ones({})), AutogradError);  // does not require grad
  autograd::clear_tape();
}

TEST(Autograd, LeavesWithoutGradAndUnusedInputs) {
  Tensor a = ones({2}).requires_grad_();
  Tensor b = ones({2}).requires_grad_();
  Tensor c = ones({2});  // no grad
  GradientStore g = backward(sum(mul(a, c)));
  EXPECT_TRUE(g.contains(a));
  EXPECT_FALSE(g.contains(b));
  EXPECT_FALSE(g.get(b).defined());
  EXPECT_FALSE(g.contains(c));
  EXPECT_THROW(g.at(b), AutogradError);
}

TEST(Autograd, NoGradGuardIsNestable) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard outer;
    {
      NoGradGuard inner;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled());
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  autograd::clear_tape();
}

TEST(Autograd, InPlaceWriteToSavedTensorIsReported) {
  Tensor w = ones({2}).requires_grad_();
  Tensor x = tensor({1.0, 2.0});
  Tensor y = mul(w, x);  // saves x
  x.add_(1.0);
  try {
    backward(sum(y));
    FAIL() << "expected a version error";
  } catch (const AutogradError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("backward of mul"), std::string::npos) << m;
    EXPECT_NE(m.find("saved at version 0, now version 1"), std::string::npos) << m;
  }
  autograd::clear_tape();
}

TEST(Autograd, InPlaceOnTensorRequiringGradIsRejected) {
  Tensor w = ones({2}).requires_grad_();
  EXPECT_THROW(w.add_(1.0), AutogradError);
  NoGradGuard g;
  w.add_(1.0);  // optimizers update under NoGradGuard
  EXPECT_EQ(sum(w).item(), 4.0);
}

// relu, sigmoid and tanh write over a temporary nobody else holds, and only then.
TEST(Autograd, ActivationsWriteOverTemporariesNothingElseHolds) {
  const std::vector<double> values{-1.5, -0.25, 0.5, 2.0, -3.0, 0.75};
  for (const char* name : {"relu", "sigmoid", "tanh"}) {
    SCOPED_TRACE(name);
    auto act = [name](Tensor&& t) {
      const std::string n = name;
      return n == "relu" ? relu(std::move(t)) : n == "sigmoid" ? sigmoid(std::move(t)) : rumus::tanh(std::move(t));
    };
    auto act_held = [name](const Tensor& t) {
      const std::string n = name;
      return n == "relu" ? relu(t) : n == "sigmoid" ? sigmoid(t) : rumus::tanh(t);
    };
    Tensor x = tensor(values).requires_grad_();
    const Tensor expected = act_held(mul(x, 2.0)).detach();
    const std::vector<float> expected_grad = backward(sum(mul(act_held(mul(x, 2.0)), x))).at(x).to_vector<float>();

    // A temporary: written over, and the gradient is the same.
    Tensor t = mul(x, 2.0);
    const Storage* storage = t.storage_ptr().get();
    Tensor y = act(std::move(t));
    EXPECT_EQ(y.storage_ptr().get(), storage);
    EXPECT_EQ(y.to_vector<float>(), expected.to_vector<float>());
    EXPECT_EQ(backward(sum(mul(y, x))).at(x).to_vector<float>(), expected_grad);

    // Held elsewhere (a copy, a view, an op's saved input, a leaf): left alone.
    Tensor a = mul(x, 2.0), copy = a;
    EXPECT_NE(act(std::move(a)).storage_ptr().get(), copy.storage_ptr().get());
    EXPECT_EQ(copy.to_vector<float>(), mul(x, 2.0).to_vector<float>());
    Tensor b = mul(x, 2.0), view = b.narrow(0, 1, 3);
    const std::vector<float> view_before = view.to_vector<float>();
    EXPECT_NE(act(std::move(b)).storage_ptr().get(), view.storage_ptr().get());
    EXPECT_EQ(view.to_vector<float>(), view_before);
    Tensor c = mul(x, 2.0);
    Tensor product = mul(c, c);  // saves c
    Tensor z = act(std::move(c));
    EXPECT_NO_THROW(backward(sum(add(product, z))));  // no version error: c was not written
    Tensor leaf = tensor(values).requires_grad_();
    const Storage* leaf_storage = leaf.storage_ptr().get();
    Tensor w = act(std::move(leaf));
    EXPECT_NE(w.storage_ptr().get(), leaf_storage);
    autograd::clear_tape();
  }
  // Sequential hands each output on, so its ReLU writes over the Linear's output.
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2), nn::Tanh());
  Tensor in = tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}).view({2, 3});
  Tensor out = net.forward(in);
  GradientStore g = backward(sum(out));
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(g.contains(p));
  NoGradGuard no_grad;
  Tensor h = in;
  for (const auto& [name, layer] : net.named_children()) h = layer->forward(h);
  EXPECT_EQ(out.to_vector<float>(), h.to_vector<float>());
}

TEST(Autograd, InferenceLoopLeavesTapeEmpty) {
  Tensor w = randn({8, 8});
  Tensor x = randn({4, 8});
  for (int i = 0; i < 10000; ++i) x = tanh(matmul(x, w));
  EXPECT_EQ(autograd::tape_size(), 0u);
}

TEST(Autograd, DiscardedGraphsArePruned) {
  Tensor w = randn({4, 4}).requires_grad_();
  for (int i = 0; i < 20000; ++i) {
    Tensor unused = sum(relu(matmul(ones({1, 4}), w)));
  }
  EXPECT_LT(autograd::tape_size(), 20000u);  // 60,000 entries were recorded
  autograd::clear_tape();
}

// Deeper graphs, whose nodes save each other's outputs, are pruned too: the
// tape keeps only what a tensor outside it can still reach. Five patterns, a
// validation loss computed without NoGradGuard among them.
TEST(Autograd, DiscardedDeepGraphsArePruned) {
  manual_seed(1);
  Tensor w1 = randn({8, 16}).requires_grad_(), b1 = zeros({16}).requires_grad_();
  Tensor w2 = randn({16, 4}).requires_grad_(), b2 = zeros({4}).requires_grad_();
  Tensor x = randn({5, 8});
  Tensor y = tensor({0.0, 1.0, 2.0, 3.0, 1.0}).to(DType::i64);
  auto mlp = [&] { return add(matmul(relu(add(matmul(x, w1), b1)), w2), b2); };
  const std::vector<std::function<void()>> patterns = {
      [&] { Tensor loss = cross_entropy(mlp(), y); },
      [&] { Tensor h = sigmoid(tanh(mlp())); Tensor s = sum(square(h)); },
      [&] { Tensor p = softmax(mlp(), 1); Tensor m = mean(mul(p, p)); },
      [&] {  // a graph kept by retain_graph, then dropped
        Tensor loss = sum(exp(tanh(mlp())));
        GradientStore g = backward(loss, {.retain_graph = true});
      },
      [&] { Tensor z = mlp(); for (int k = 0; k < 4; ++k) z = gelu(z); Tensor s = sum(z); },
  };
  for (std::size_t p = 0; p < patterns.size(); ++p) {
    autograd::clear_tape();
    std::size_t peak = 0;
    for (int i = 0; i < 4000; ++i) {
      patterns[p]();
      peak = std::max(peak, autograd::tape_size());
    }
    // Pruning runs every few thousand entries; the tape never holds more than
    // a few rounds of it, where 4,000 iterations record 28,000 to 48,000 entries.
    EXPECT_LT(peak, 10000u) << "pattern " << p;
  }
  autograd::clear_tape();
}

// A graph of a few large tensors, dropped without backward (an evaluation loss
// computed in grad mode), is freed by the next forward, not after thousands of
// entries: a GPT of char_lm's default size (d_model 256, 4 layers, context
// 128; batch 4 here) keeps no more than about two forwards' tensors.
TEST(Autograd, DroppedLargeGraphsAreFreedByTheNextForward) {
  manual_seed(2);
  nn::GPT gpt(nn::GPTConfig{.dropout = 0.0});
  Tensor tokens = randint(0, 256, {4, 128});
  autograd::clear_tape();
  std::size_t one_forward = 0;
  {
    Tensor logits = gpt.forward(tokens);
    one_forward = autograd::tape_saved_bytes();
  }
  ASSERT_GT(one_forward, std::size_t(16) << 20);
  std::size_t peak = 0;
  for (int step = 0; step < 8; ++step) {
    Tensor loss = mean(gpt.forward(tokens));
    peak = std::max(peak, autograd::tape_saved_bytes());
  }
  EXPECT_LE(peak, 3 * one_forward) << "one forward saves " << one_forward << " bytes";
  autograd::clear_tape();
}

// Hooks see a tensor's gradient once all its contributions are summed, may
// replace it, run in registration order, and stop after remove().
TEST(AutogradHooks, ReadReplaceAndRemove) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = mul(x, 3.0);
  std::vector<std::vector<double>> seen_y, seen_x;
  autograd::HookHandle on_y = autograd::register_hook(y, [&](const Tensor& g) {
    seen_y.push_back(g.to_vector<double>());
    return mul(g, 10.0);  // the replacement flows on to x
  });
  autograd::HookHandle on_x1 = autograd::register_hook(x, [&](const Tensor& g) {
    seen_x.push_back(g.to_vector<double>());
    return Tensor();  // undefined: keep
  });
  autograd::HookHandle on_x2 = autograd::register_hook(x, [&](const Tensor& g) { return add(g, 1.0); });
  // y is used twice: its hook fires once, with the sum.
  GradientStore g = backward(sum(add(y, mul(y, y))), {.retain_graph = true});
  ASSERT_EQ(seen_y.size(), 1u);
  EXPECT_EQ(seen_y[0], (std::vector<double>{1 + 2 * 3.0, 1 + 2 * 6.0}));
  ASSERT_EQ(seen_x.size(), 1u);
  EXPECT_EQ(seen_x[0], (std::vector<double>{10 * 7.0 * 3, 10 * 13.0 * 3}));
  EXPECT_EQ(g.at(x).to_vector<double>(), (std::vector<double>{10 * 7.0 * 3 + 1, 10 * 13.0 * 3 + 1}));
  // The same hooks in autograd::grad.
  EXPECT_EQ(autograd::grad({sum(y)}, {x}, {.retain_graph = true})[0].to_vector<double>(),
            (std::vector<double>{31, 31}));
  on_y.remove();
  on_x2.remove();
  EXPECT_FALSE(on_y.active());
  EXPECT_TRUE(on_x1.active());
  EXPECT_EQ(backward(sum(y)).at(x).to_vector<double>(), (std::vector<double>{3, 3}));
  on_x1.remove();
  // A replacement of another shape is refused.
  autograd::HookHandle bad = autograd::register_hook(x, [](const Tensor&) { return zeros({3}); });
  expect_error<AutogradError>([&] { backward(sum(mul(x, 2.0))); }, "a gradient hook returned shape [3]");
  bad.remove();
  expect_error<AutogradError>([&] { autograd::register_hook(ones({2}), [](const Tensor& t) { return t; }); },
                              "does not require grad");
}

TEST(AutogradHooks, RetainGradKeepsIntermediateGradients) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = mul(x, x);
  autograd::retain_grad(h);
  GradientStore g = backward(sum(mul(h, 5.0)));
  EXPECT_EQ(g.at(h).to_vector<double>(), (std::vector<double>{5, 5}));
  EXPECT_EQ(g.at(x).to_vector<double>(), (std::vector<double>{10, 20}));
}

// Micro-batches: gradients of several passes summed into one store equal the
// gradient of the summed losses.
TEST(AutogradAccumulation, StoresAddUp) {
  Tensor w = tensor({0.5, -1.0, 2.0}).requires_grad_();
  Tensor b = tensor({0.25}).requires_grad_();
  std::vector<Tensor> xs{tensor({1.0, 2.0, 3.0}), tensor({-1.0, 0.5, 4.0}), tensor({0.0, 1.0, -2.0})};
  GradientStore total;
  Tensor whole;
  for (const Tensor& x : xs) {
    Tensor loss = square(add(sum(mul(w, x)), b));
    total += backward(loss);
    Tensor again = square(add(sum(mul(w, x)), b));
    whole = whole.defined() ? add(whole, again) : again;
  }
  GradientStore once = backward(sum(whole));
  EXPECT_EQ(total.at(w).to_vector<double>(), once.at(w).to_vector<double>());
  EXPECT_EQ(total.at(b).to_vector<double>(), once.at(b).to_vector<double>());
}

// Anomaly mode names the op whose backward made the first NaN or infinity
// (sqrt at 0), and is silent when off.
TEST(AutogradAnomaly, NamesTheOpThatMadeTheFirstNonFinite) {
  autograd::clear_tape();
  Tensor x = tensor({0.0, 4.0}).requires_grad_();
  auto loss = [&] { return sum(mul(exp(sqrt(x)), 2.0)); };
  EXPECT_TRUE(std::isinf(backward(loss()).at(x).to_vector<double>()[0]));
  {
    autograd::DetectAnomalyGuard anomaly;
    EXPECT_TRUE(autograd::anomaly_mode_enabled());
    expect_error<AutogradError>([&] { backward(loss()); }, "anomaly detected: the backward of sqrt (the forward's entry 0");
  }
  EXPECT_FALSE(autograd::anomaly_mode_enabled());
  autograd::clear_tape();
}

// Activation checkpointing: a deep MLP with dropout and a GPT with every
// block checkpointed give the gradients of the plain model bit for bit, and
// hold at most a third of its activation memory after forward, on every device.
namespace checkpointing {
struct Run {
  std::size_t held = 0;  // bytes the forward left in use
  std::vector<std::vector<float>> grads;
};

template <class Forward>
Run measure(Device dev, const std::vector<Tensor>& params, Forward&& forward) {
  Run run;
  GradientStore g;
  {
    const std::size_t before = device_stats(dev).bytes_in_use;
    Tensor loss = forward();
    run.held = device_stats(dev).bytes_in_use - before;
    g = backward(loss);
  }
  for (const Tensor& p : params) run.grads.push_back(g.at(p).cpu().to_vector<float>());
  return run;
}

// Bit-identical gradients (tol 0), or within tol relative to each gradient's
// largest magnitude where the device sums with float atomics, whose order
// varies from run to run even without checkpointing.
void expect_same_and_smaller(const Run& plain, const Run& ckpt, const char* what, double tol = 0.0) {
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (std::size_t i = 0; i < plain.grads.size(); ++i) {
    if (tol == 0.0) {
      EXPECT_EQ(plain.grads[i], ckpt.grads[i]) << what << ": parameter " << i << " differs";
      continue;
    }
    ASSERT_EQ(plain.grads[i].size(), ckpt.grads[i].size());
    double largest = 0.0, worst = 0.0;
    for (std::size_t e = 0; e < plain.grads[i].size(); ++e) {
      largest = std::max(largest, std::abs(double(plain.grads[i][e])));
      worst = std::max(worst, std::abs(double(plain.grads[i][e]) - double(ckpt.grads[i][e])));
    }
    EXPECT_LE(worst, tol * largest) << what << ": parameter " << i << " differs by " << worst;
  }
  EXPECT_LE(3 * ckpt.held, plain.held) << what << ": checkpointed forward holds " << ckpt.held << " bytes, plain "
                                       << plain.held;
}
}  // namespace checkpointing

RUMUS_DEVICE_SUITE(AutogradCheckpointOnEveryDevice);

TEST_P(AutogradCheckpointOnEveryDevice, DeepMlpAndGptKeepAThirdOfTheActivations) {
  const Device dev = GetParam();
  {  // eight tanh layers with dropout after each
    manual_seed(5);
    std::vector<nn::Linear> layers;
    for (int i = 0; i < 8; ++i) layers.emplace_back(96, 96);
    std::vector<Tensor> params;
    for (nn::Linear& l : layers) {
      l.to(dev);
      for (const Tensor& p : l.parameters()) params.push_back(p);
    }
    Tensor x = randn({64, 96}).to(dev);
    auto pair = [&](std::size_t i) {  // a checkpointed segment: two layers
      return [&layers, i](const Tensor& h) {
        Tensor y = dropout(tanh(layers[i](h)), 0.2, true);
        return dropout(tanh(layers[i + 1](y)), 0.2, true);
      };
    };
    auto forward = [&](bool ckpt) {
      manual_seed(11);  // the same dropout draws in both runs
      Tensor h = x;
      for (std::size_t i = 0; i < layers.size(); i += 2) h = ckpt ? autograd::checkpoint(pair(i), h) : pair(i)(h);
      return sum(square(h));
    };
    const auto plain = checkpointing::measure(dev, params, [&] { return forward(false); });
    const auto ckpt = checkpointing::measure(dev, params, [&] { return forward(true); });
    checkpointing::expect_same_and_smaller(plain, ckpt, "deep MLP");
  }
  {  // nn::GPT, its blocks checkpointed one by one
    manual_seed(6);
    nn::GPT gpt(nn::GPTConfig{.vocab_size = 32, .context = 16, .d_model = 32, .num_heads = 2, .num_layers = 4,
                              .dropout = 0.1});
    gpt.to(dev);
    Tensor tokens = randint(0, 32, {4, 16}).to(dev);
    auto forward = [&](bool ckpt) {
      manual_seed(12);
      Tensor h = gpt.dropout((*gpt.position_embedding)(gpt.token_embedding(tokens)));
      for (std::size_t b = 0; b < gpt.blocks.size(); ++b) {
        nn::Module& block = gpt.blocks[b];
        h = ckpt ? autograd::checkpoint([&block](const Tensor& t) { return block.forward(t); }, h) : block.forward(h);
      }
      return mean(square(linear(gpt.norm(h), gpt.token_embedding.weight)));
    };
    const auto plain = checkpointing::measure(dev, gpt.parameters(), [&] { return forward(false); });
    const auto ckpt = checkpointing::measure(dev, gpt.parameters(), [&] { return forward(true); });
    // The embedding's and attention's gradients sum with float atomics on a GPU.
    checkpointing::expect_same_and_smaller(plain, ckpt, "GPT", dev.is_cpu() ? 0.0 : 1e-5);
  }
}

TEST(AutogradCheckpoint, InputsGradientsAndErrors) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, -1.0}).requires_grad_();
  Tensor w = tensor({0.5, 0.25}).requires_grad_();
  auto f = [&](const std::vector<Tensor>& in) { return sum(mul(mul(in[0], in[1]), w)); };
  GradientStore plain = backward(f({a, b}));
  GradientStore ckpt = backward(autograd::checkpoint(f, {a, b}));
  for (const Tensor* t : {&a, &b, &w}) EXPECT_EQ(ckpt.at(*t).to_vector<double>(), plain.at(*t).to_vector<double>());
  {
    NoGradGuard no_grad;  // nothing to save for: a plain call
    EXPECT_FALSE(autograd::checkpoint(f, {a, b}).requires_grad());
  }
  expect_error<AutogradError>([&] { autograd::checkpoint(std::function<Tensor(const Tensor&)>(), a); },
                              "checkpoint: expected a function");
  expect_error<AutogradError>(
      [&] { autograd::checkpoint([](const std::vector<Tensor>&) { return Tensor(); }, {a}); },
      "checkpoint: the function returned an undefined tensor");
}

// A parameter read inside a checkpoint (and outside it) gets its hook once per
// backward, with the whole gradient, as without checkpointing (and as PyTorch).
TEST(AutogradCheckpoint, ParameterHookFiresOncePerBackward) {
  Tensor x = tensor({1.0, -2.0}).requires_grad_();
  Tensor w = tensor({0.5, 3.0}).requires_grad_();
  auto f = [&](const Tensor& h) { return mul(tanh(h), w); };
  std::vector<std::vector<double>> seen;
  autograd::HookHandle on_w = autograd::register_hook(w, [&](const Tensor& g) {
    seen.push_back(g.to_vector<double>());
    return Tensor();
  });
  GradientStore plain = backward(sum(mul(f(x), w)));
  ASSERT_EQ(seen.size(), 1u);
  const std::vector<double> expected = plain.at(w).to_vector<double>();
  EXPECT_EQ(seen[0], expected);
  seen.clear();
  GradientStore ckpt = backward(sum(mul(autograd::checkpoint(f, x), w)));
  ASSERT_EQ(seen.size(), 1u) << "the hook ran in the recomputation's backward and again in the outer one";
  EXPECT_EQ(seen[0], expected);
  EXPECT_EQ(ckpt.at(w).to_vector<double>(), expected);
  on_w.remove();
}

// A root whose graph is not on this thread's tape is an error that says why,
// not a store without gradients.
TEST(Autograd, BackwardWithoutTheGraphSaysWhy) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = sum(mul(x, x));
  EXPECT_EQ(backward(y).at(x).item(), 4.0);
  expect_error<AutogradError>([&] { backward(y); }, "already freed by an earlier backward; pass {.retain_graph");

  Tensor z = sum(mul(x, x));
  std::string message;
  std::thread other([&] {
    try {
      backward(z);
    } catch (const AutogradError& e) {
      message = e.what();
    }
  });
  other.join();
  EXPECT_NE(message.find("recorded on another thread"), std::string::npos) << message;
  EXPECT_EQ(backward(z).at(x).item(), 4.0);  // on its own thread it still works
}

TEST(Autograd, RetainGraphAllowsSecondPass) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = sum(mul(x, x));
  GradientStore g1 = backward(y, {.retain_graph = true});
  GradientStore g2 = backward(y);
  EXPECT_EQ(g1.at(x).item(), 4.0);
  EXPECT_EQ(g2.at(x).item(), 4.0);
  EXPECT_EQ(autograd::tape_size(), 0u);
}

TEST(Autograd, CustomFunction) {
  // f(x) = x^3 with a hand-written backward.
  autograd::CustomFunction cube{
      "cube", [](const std::vector<Tensor>& in) { return mul(mul(in[0], in[0]), in[0]); },
      [](const Tensor& g, const std::vector<Tensor>& in, const Tensor&) {
        return std::vector<Tensor>{mul(g, mul(square(in[0]), 3.0))};
      }};
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = autograd::apply(cube, {x});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 8}));
  EXPECT_EQ(autograd::tape_size(), 1u);  // one entry, the forward's ops were not recorded
  EXPECT_EQ(backward(sum(y)).at(x).to_vector<float>(), (std::vector<float>{3, 12}));
}

TEST(Autograd, GradIdsAreUniqueAcrossThreads) {
  std::vector<GradId> a, b;
  std::thread t1([&] { for (int i = 0; i < 1000; ++i) a.push_back(zeros({1}).grad_id()); });
  std::thread t2([&] { for (int i = 0; i < 1000; ++i) b.push_back(zeros({1}).grad_id()); });
  t1.join();
  t2.join();
  std::sort(a.begin(), a.end());
  for (GradId id : b) EXPECT_FALSE(std::binary_search(a.begin(), a.end(), id));
}

// Fits y = 3x - 1 by gradient descent; returns the final (w, b).
std::pair<double, double> fit_line(std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = rand({64, 1}, {.dtype = DType::f64}, &gen);
  Tensor y = sub(mul(x, 3.0), 1.0);
  Tensor w = zeros({1, 1}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = zeros({1}, {.dtype = DType::f64, .requires_grad = true});
  for (int step = 0; step < 2000; ++step) {
    Tensor loss = mse_loss(add(matmul(x, w), b), y);
    GradientStore g = backward(loss);
    NoGradGuard ng;
    w.add_(g.at(w), -0.5);
    b.add_(g.at(b), -0.5);
  }
  return {w.item(), b.item()};
}

TEST(Autograd, TwoThreadsTrainIndependentModels) {
  std::pair<double, double> r1, r2;
  std::size_t tape1 = 1, tape2 = 1;
  std::thread t1([&] { r1 = fit_line(1); tape1 = autograd::tape_size(); });
  std::thread t2([&] { r2 = fit_line(2); tape2 = autograd::tape_size(); });
  t1.join();
  t2.join();
  EXPECT_NEAR(r1.first, 3.0, 1e-3);
  EXPECT_NEAR(r1.second, -1.0, 1e-3);
  EXPECT_NEAR(r2.first, 3.0, 1e-3);
  EXPECT_NEAR(r2.second, -1.0, 1e-3);
  EXPECT_EQ(tape1, 0u);
  EXPECT_EQ(tape2, 0u);
  // The same run on this thread gives the same numbers as on another thread.
  auto r1_again = fit_line(1);
  EXPECT_EQ(r1_again, r1);
}

}  // namespace

namespace {

const ProfileRow* find_row(const std::vector<ProfileRow>& rows, const std::string& name) {
  for (auto& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

TEST(Profiler, TimesEachKernelUnderItsPhaseAndOp) {
  manual_seed(0);
  Tensor w = randn({8, 4}).requires_grad_();
  Tensor x = randn({16, 8});
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  Profiler prof;
  const int steps = 3;
  for (int i = 0; i < steps; ++i) {
    Tensor loss = sum(relu(matmul(x, w)));
    GradientStore grads = backward(loss);
    opt.step(grads);
  }
  const auto rows = prof.rows();
  const ProfileRow* fwd_gemm = find_row(rows, "forward matmul gemm");
  const ProfileRow* fwd_relu = find_row(rows, "forward relu unary:relu");
  const ProfileRow* bwd_relu = find_row(rows, "backward relu binary:relu_backward");
  ASSERT_NE(fwd_gemm, nullptr) << prof.table();
  ASSERT_NE(fwd_relu, nullptr) << prof.table();
  ASSERT_NE(bwd_relu, nullptr) << prof.table();
  EXPECT_EQ(fwd_gemm->calls, std::uint64_t(steps));
  EXPECT_EQ(fwd_relu->calls, std::uint64_t(steps));
  EXPECT_EQ(bwd_relu->calls, std::uint64_t(steps));
  double backward_gemms = 0, step_kernels = 0, total = 0;
  for (auto& r : rows) {
    if (r.name.rfind("backward ", 0) == 0 && r.name.find(" gemm") != std::string::npos) backward_gemms += double(r.calls);
    if (r.name.rfind("step ", 0) == 0) step_kernels += double(r.calls);
    EXPECT_GE(r.milliseconds, 0.0) << r.name;
    total += r.milliseconds;
  }
  EXPECT_GE(backward_gemms, steps);  // the weight's gradient is a product
  EXPECT_GE(step_kernels, steps);    // one SGD update per step at least
  EXPECT_LE(total, prof.elapsed_ms() * 1.0001 + 1e-3);
  for (std::size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].milliseconds, rows[i].milliseconds);
  const std::string table = prof.table();
  EXPECT_NE(table.find("forward matmul gemm"), std::string::npos);
  EXPECT_NE(table.find("(outside kernels)"), std::string::npos);
}

TEST(Profiler, RecordsNothingWhenOffAndStartsAfreshOnReset) {
  Tensor x = randn({4, 4});
  EXPECT_FALSE(detail::profiling());
  {
    Profiler prof;
    EXPECT_TRUE(detail::profiling());
    (void)relu(x);
    EXPECT_EQ(prof.rows().size(), 1u);
    prof.reset();
    EXPECT_TRUE(prof.rows().empty());
    (void)exp(x);
    ASSERT_EQ(prof.rows().size(), 1u);
    EXPECT_EQ(prof.rows()[0].name, "forward exp unary:exp");
  }
  EXPECT_FALSE(detail::profiling());
  Profiler again;  // a new one starts empty
  EXPECT_TRUE(again.rows().empty());
}

// The row of the kernel running now, for a device's own per-dispatch timings
// (RUMUS_VULKAN_PROFILE labels each dispatch with it): set while a kernel
// runs, the outer one back after a nested one, empty between kernels.
TEST(Profiler, NamesTheRunningKernel) {
  Profiler prof;
  EXPECT_EQ(detail::profile_kernel_row(), "");
  {
    detail::ProfilePhase phase("backward");
    detail::ProfileKernel outer("conv2d", "conv2d_backward_weight", "");
    EXPECT_EQ(detail::profile_kernel_row(), "backward conv2d conv2d_backward_weight");
    {
      detail::ProfileKernel inner("sum", "reduce", "sum");
      EXPECT_EQ(detail::profile_kernel_row(), "backward sum reduce:sum");
    }
    EXPECT_EQ(detail::profile_kernel_row(), "backward conv2d conv2d_backward_weight");
  }
  EXPECT_EQ(detail::profile_kernel_row(), "");
  (void)relu(randn({4, 4}));  // a kernel run through the registry leaves nothing behind
  EXPECT_EQ(detail::profile_kernel_row(), "");
}

TEST(Profiler, OnePerThread) {
  Profiler prof;
  expect_error<Error>([] { Profiler second; }, "Profiler: one is already recording");
  std::thread other([] {
    Profiler mine;  // another thread records on its own
    EXPECT_TRUE(detail::profiling());
  });
  other.join();
  EXPECT_TRUE(detail::profiling());
}

}  // namespace

namespace {

// ---- autograd::grad: any tensor's gradient, and gradients of gradients ----

TEST(AutogradGrad, LeavesAndIntermediatesOfSeveralOutputs) {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = mul(x, x);               // an intermediate
  Tensor a = sum(mul(y, 3.0)), b = mul(y, x);
  std::vector<Tensor> g = autograd::grad({a, b}, {x, y}, {.grad_outputs = {Tensor(), tensor({1.0, 0.0, 2.0})}});
  // d(3 sum y + sum(v * y * x))/dy = 3 + v x;  /dx = 6x + v * 3x^2
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{4, 3, 9}));
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{9, 12, 72}));
  EXPECT_EQ(autograd::tape_size(), 0u);  // not retained: create_graph is off
}

TEST(AutogradGrad, UnusedInputsAndBadArguments) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_(), z = tensor({5.0}).requires_grad_();
  Tensor loss = sum(mul(x, 2.0));
  std::vector<Tensor> g = autograd::grad({loss}, {x, z}, {.retain_graph = true, .allow_unused = true});
  expect_error<AutogradError>([&] { autograd::grad({loss}, {x, z}); },
                              "autograd::grad: input 1 (shape [1]) was not used to compute the outputs");
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_FALSE(g[1].defined());
  expect_error<AutogradError>([&] { autograd::grad({loss}, {x}, {.grad_outputs = {Tensor(), Tensor()}}); },
                              "expected one grad_output per output (1), got 2");
  expect_error<AutogradError>([&] { autograd::grad({mul(x, 2.0)}, {x}); },
                              "autograd::grad: expected a scalar (1-element) root when no seed is given");
  expect_error<AutogradError>([&] { autograd::grad({tensor({1.0})}, {x}); }, "output 0 does not require grad");
  expect_error<AutogradError>([&] { autograd::grad({loss}, {tensor({1.0})}); }, "input 0 (shape [1]) does not require grad");
  autograd::clear_tape();
}

TEST(AutogradGrad, RetainGraphDefaultsToCreateGraph) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = mul(mul(x, x), x);
  autograd::grad({y}, {x}, {.create_graph = true});
  EXPECT_EQ(autograd::grad({y}, {x})[0].item(), 12.0);  // the graph was kept
  expect_error<AutogradError>([&] { autograd::grad({y}, {x}); }, "already freed by an earlier backward");
  autograd::clear_tape();
}

TEST(AutogradGrad, ThirdDerivativeOfACube) {
  Tensor x = tensor({1.5, -2.0}).requires_grad_();
  Tensor y = sum(mul(mul(x, x), x));
  Tensor d1 = autograd::grad({y}, {x}, {.create_graph = true})[0];             // 3x^2
  Tensor d2 = autograd::grad({sum(d1)}, {x}, {.create_graph = true})[0];       // 6x
  Tensor d3 = autograd::grad({sum(d2)}, {x})[0];                               // 6
  EXPECT_EQ(d1.to_vector<double>(), (std::vector<double>{6.75, 12.0}));
  EXPECT_EQ(d2.to_vector<double>(), (std::vector<double>{9.0, -12.0}));
  EXPECT_EQ(d3.to_vector<double>(), (std::vector<double>{6.0, 6.0}));
  autograd::clear_tape();
}

RUMUS_DEVICE_SUITE(AutogradGradOnEveryDevice);

// u = tanh(w x + b): u'' = -2 w^2 u (1 - u^2), as a physics-informed loss needs it, on every device.
TEST_P(AutogradGradOnEveryDevice, SecondDerivativeOfATanhUnit) {
  const Device dev = GetParam();
  Tensor x = tensor({-1.0, 0.25, 0.8}).to(DType::f64).to(dev).reshape({3, 1}).requires_grad_();
  Tensor w = tensor({1.7}).to(DType::f64).to(dev).reshape({1, 1}).requires_grad_();
  Tensor b = tensor({-0.3}).to(DType::f64).to(dev).requires_grad_();
  Tensor u = tanh(linear(x, w, b));
  Tensor du = autograd::grad({sum(u)}, {x}, {.create_graph = true})[0];
  Tensor d2u = autograd::grad({sum(du)}, {x}, {.create_graph = true})[0];
  // And the residual's gradient with respect to the weight, through both derivatives.
  Tensor dw = autograd::grad({sum(d2u)}, {w})[0];
  const auto uv = u.detach().cpu().to_vector<double>(), xv = x.detach().cpu().to_vector<double>();
  const auto got = d2u.cpu().to_vector<double>();
  double want_dw = 0;
  const double wv = w.detach().cpu().item();  // 1.7 as f32 (tensor() stores floats), widened
  for (std::size_t i = 0; i < 3; ++i) {
    const double t = uv[i], s = 1 - t * t;
    EXPECT_NEAR(got[i], -2 * wv * wv * t * s, 1e-12);
    // d/dw of -2 w^2 t (1 - t^2), with dt/dw = x (1 - t^2)
    want_dw += -4 * wv * t * s - 2 * wv * wv * (1 - 3 * t * t) * xv[i] * s;
  }
  EXPECT_NEAR(dw.cpu().item(), want_dw, 1e-10);
  autograd::clear_tape();
}

// A Hessian-vector product through a small tanh MLP against central differences of its gradient.
TEST(AutogradGrad, HessianVectorProductMatchesFiniteDifferences) {
  Generator gen(3);
  Tensor w1 = randn({4, 3}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor w2 = randn({1, 4}, {.dtype = DType::f64}, &gen);
  Tensor x = randn({5, 3}, {.dtype = DType::f64}, &gen);
  Tensor v = randn({4, 3}, {.dtype = DType::f64}, &gen);
  auto loss = [&](const Tensor& w) { return sum(square(linear(tanh(linear(x, w)), w2))); };
  Tensor g = autograd::grad({loss(w1)}, {w1}, {.create_graph = true})[0];
  Tensor hv = autograd::grad({sum(mul(g, v))}, {w1})[0];
  const double eps = 1e-6;
  NoGradGuard none;
  auto grad_at = [&](double t) {
    Tensor w = add(w1.detach(), mul(v, t)).requires_grad_();
    set_grad_enabled(true);
    Tensor gw = autograd::grad({loss(w)}, {w})[0];
    set_grad_enabled(false);
    return gw;
  };
  const auto numeric = div(sub(grad_at(eps), grad_at(-eps)), 2 * eps).to_vector<double>();
  const auto got = hv.to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], numeric[i], 1e-6 * (1 + std::abs(numeric[i])));
}

// An op whose backward is a fused kernel only refuses under create_graph, naming itself.
TEST(AutogradGrad, CreateGraphNamesAnOpWithoutADifferentiableBackward) {
  // A checkpoint's backward (a recomputation and an inner pass) is such an op.
  Tensor x = randn({1, 1, 4, 4}).requires_grad_();
  Tensor y = sum(autograd::checkpoint([](const Tensor& t) { return conv2d(t, ones({1, 1, 3, 3})); }, x));
  EXPECT_EQ(autograd::grad({y}, {x}, {.retain_graph = true})[0].shape(), x.shape());  // first order is unaffected
  expect_error<AutogradError>([&] { autograd::grad({y}, {x}, {.create_graph = true}); },
                              "autograd::grad: checkpoint has no differentiable backward yet");
}

}  // namespace
