#pragma once
// Central finite differences in f64 against the autograd engine.
#include <gtest/gtest.h>

#include <rumus/rumus.hpp>

#include "op_table.hpp"

namespace rumus::testing {

// Checks d sum(fn(views) * w) / d base for every input, w a fixed random weight,
// with the inputs (and so the op's kernels, forward and backward) on `device`.
inline void gradcheck(const OpCase& op, Layouting how, std::uint64_t seed = 1, Device device = Device::cpu()) {
  autograd::clear_tape();  // an earlier failing case may have thrown mid-forward
  std::vector<Input> inputs;
  std::vector<Tensor> views;
  for (std::size_t i = 0; i < op.shapes.size(); ++i) {
    auto values = sample_values(op.shapes[i], op.low, op.high, seed + i);
    inputs.push_back(make_input(values, op.shapes[i], how, DType::f64, device));
    views.push_back(inputs.back().view);
  }
  Tensor out = op.fn(views);
  Tensor w = tensor(sample_values(out.shape(), -1, 1, seed + 100), out.shape()).to(DType::f64).to(device);
  GradientStore grads = backward(sum(mul(out, w)));
  ASSERT_EQ(autograd::tape_size(), 0u) << "backward left entries on the tape";

  const double eps = 1e-6;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor base = inputs[i].base;
    Tensor analytic = grads.get(base);
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>()
                                               : std::vector<double>(std::size_t(base.numel()), 0.0);
    ASSERT_EQ(std::int64_t(a.size()), base.numel());
    NoGradGuard no_grad;
    auto loss = [&] { return sum(mul(op.fn(views), w)).item(); };
    // Element j of the (contiguous) base set in place: through the host
    // pointer on the CPU, by a one-element fill elsewhere.
    const std::vector<double> values = base.to_vector<double>();
    Tensor flat = base.detach().reshape({base.numel()});
    auto set = [&](std::int64_t j, double v) {
      if (device.is_cpu()) static_cast<double*>(base.storage().data())[base.offset() + j] = v;
      else flat.slice(0, j, j + 1).fill_(v);
    };
    for (std::int64_t j = 0; j < base.numel(); ++j) {
      double saved = values[std::size_t(j)];
      set(j, saved + eps);
      double up = loss();
      set(j, saved - eps);
      double down = loss();
      set(j, saved);
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(a[j], numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << op.name << " (" << layouting_name(how) << "): input " << i << ", element " << j;
    }
  }
}

// Second derivatives: with g(x) = d sum(fn(x) * v) / dx from a create_graph
// pass and S(x) = sum_i sum(g_i(x) * w_i), checks dS/dx (a second backward
// through the recorded first one) against central differences of S, each S
// from a plain first-order pass. Returns false, checking nothing, when an op
// on the way has no differentiable backward (the AutogradError names it in
// `refusal`).
inline bool gradgradcheck(const OpCase& op, Layouting how, std::string* refusal = nullptr, std::uint64_t seed = 1,
                          Device device = Device::cpu()) {
  autograd::clear_tape();
  std::vector<Input> inputs;
  std::vector<Tensor> views, bases;
  for (std::size_t i = 0; i < op.shapes.size(); ++i) {
    auto values = sample_values(op.shapes[i], op.low, op.high, seed + i);
    inputs.push_back(make_input(values, op.shapes[i], how, DType::f64, device));
    views.push_back(inputs.back().view);
    bases.push_back(inputs.back().base);
  }
  Tensor out = op.fn(views);
  Tensor v = tensor(sample_values(out.shape(), -1, 1, seed + 100), out.shape()).to(DType::f64).to(device);
  std::vector<Tensor> w;
  for (std::size_t i = 0; i < bases.size(); ++i)
    w.push_back(tensor(sample_values(bases[i].shape(), -1, 1, seed + 200 + i), bases[i].shape()).to(DType::f64).to(device));
  // S from the gradients g: a tensor that may or may not be on the tape.
  auto s_of = [&](const std::vector<Tensor>& g) {
    Tensor s = zeros({}, {.dtype = DType::f64, .device = device});
    for (std::size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) s = add(s, sum(mul(g[i], w[i])));
    return s;
  };
  std::vector<Tensor> g;
  try {
    g = autograd::grad({sum(mul(out, v))}, bases, {.create_graph = true, .allow_unused = true});
  } catch (const AutogradError& e) {
    autograd::clear_tape();
    if (refusal) *refusal = e.what();
    return false;
  }
  Tensor s = s_of(g);
  std::vector<Tensor> analytic(bases.size());
  if (s.requires_grad()) analytic = autograd::grad({s}, bases, {.retain_graph = true, .allow_unused = true});

  // S by a plain first-order pass. The graph is kept: the views of the bases
  // (broadcast, sliced) were recorded once, by make_input.
  auto s_at = [&] {
    Tensor o = op.fn(views);
    std::vector<Tensor> first =
        autograd::grad({sum(mul(o, v))}, bases, {.retain_graph = true, .allow_unused = true});
    NoGradGuard no_grad;
    return s_of(first).item();
  };
  const double eps = 1e-5;
  for (std::size_t i = 0; i < bases.size(); ++i) {
    Tensor base = bases[i];
    std::vector<double> a = analytic[i].defined() ? analytic[i].to_vector<double>()
                                                  : std::vector<double>(std::size_t(base.numel()), 0.0);
    const std::vector<double> values = base.to_vector<double>();
    Tensor flat = base.detach().reshape({base.numel()});
    auto set = [&](std::int64_t j, double x) {
      if (device.is_cpu()) static_cast<double*>(base.storage().data())[base.offset() + j] = x;
      else flat.slice(0, j, j + 1).fill_(x);
    };
    for (std::int64_t j = 0; j < base.numel(); ++j) {
      const double saved = values[std::size_t(j)];
      set(j, saved + eps);
      const double up = s_at();
      set(j, saved - eps);
      const double down = s_at();
      set(j, saved);
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(a[std::size_t(j)], numeric, 1e-5 + 1e-4 * std::abs(numeric))
          << op.name << " (" << layouting_name(how) << "): second derivative, input " << i << ", element " << j;
    }
  }
  autograd::clear_tape();
  return true;
}

}  // namespace rumus::testing
