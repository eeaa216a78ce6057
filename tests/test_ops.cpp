// The op table on every device (f64 gradchecks against finite differences,
// agreement with the CPU) and the ops' error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <limits>
#include <random>
#include <set>
#include <string>

#include "devices.hpp"
#include "expect_error.hpp"

#include "backend/attention.hpp"  // whether a device has f64 attention kernels
#include "backend/backend.hpp"
#include "gradcheck.hpp"

using namespace rumus;
using namespace rumus::testing;

namespace {

// The op table on every device of the build. On the CPU and on each other
// device, with every kernel there: f64 gradcheck in four layouts, and
// gradgradcheck. On each device beside the CPU, also the forward and backward
// against the CPU's, in f32 and in f64.
using TableCase = std::tuple<Device, std::size_t, Layouting>;

std::string table_case_name(const ::testing::TestParamInfo<TableCase>& info) {
  const auto& [device, row, how] = info.param;
  return device_test_name({device, 0}) + "_" + op_table()[row].name + "_" + layouting_name(how);
}

std::string table_row_name(const ::testing::TestParamInfo<std::tuple<Device, std::size_t>>& info) {
  return device_test_name({std::get<0>(info.param), 0}) + "_" + op_table()[std::get<1>(info.param)].name;
}

std::vector<Device> devices_beside_the_cpu() {
  std::vector<Device> d = device_suite_devices();
  d.erase(d.begin());
  return d;
}

const auto kLayoutings = ::testing::Values(Layouting::contiguous, Layouting::transposed, Layouting::sliced,
                                           Layouting::broadcast);

// The fused attention kernels of a device without them in f64 refuse an f64
// call with the op, the kernel and the dtype named.
bool lacks_f64_attention(const OpCase& op, Device device) {
  return op.name.rfind("sdpa", 0) == 0 && !supports<AttentionForwardKernel>(backend(device), DType::f64);
}

// The op an attention case of the table calls, as its errors name it.
std::string attention_op(const OpCase& op) {
  return op.name.rfind("sdpa_packed", 0) == 0 ? "packed_self_attention" : "scaled_dot_product_attention";
}

std::string f64_attention_refusal(const OpCase& op, Device device) {
  return attention_op(op) + ": device " + device.str() + " has no attention_forward kernel for f64 tensors";
}

class GradCheck : public ::testing::TestWithParam<TableCase> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  const auto& [device, index, how] = GetParam();
  const OpCase& op = op_table()[index];
  for (const auto& s : op.shapes)
    if (s.empty() || (how == Layouting::transposed && s.size() < 2)) GTEST_SKIP() << "layout needs more dims";
  if (lacks_f64_attention(op, device)) {
    // Finite differences run the forward without gradients: the fused kernel, refused in f64.
    NoGradGuard no_grad;
    std::vector<Tensor> views;
    for (const auto& s : op.shapes)
      views.push_back(tensor(sample_values(s, op.low, op.high, 1), s).to(DType::f64).to(device));
    expect_error<DeviceError>([&] { op.fn(views); }, f64_attention_refusal(op, device));
    return;
  }
  gradcheck(op, how, 1, device);
}

INSTANTIATE_TEST_SUITE_P(OpTable, GradCheck,
                         ::testing::Combine(::testing::ValuesIn(device_suite_devices()),
                                            ::testing::Range<std::size_t>(0, op_table().size()), kLayoutings),
                         table_case_name);

// Second derivatives of every op in the table (f64, against finite
// differences of the first), or the op's refusal under create_graph.
// Ops whose backward is not yet written with ops; create_graph names them.
const std::set<std::string>& refusing_double_backward() {
  static const std::set<std::string> ops = {};
  return ops;
}

// A Hessian-vector product by double backward, in `dtype` on `device`.
std::vector<Tensor> hessian_vector_products(const OpCase& op, Device device, DType dtype) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < op.shapes.size(); ++i)
    xs.push_back(tensor(sample_values(op.shapes[i], op.low, op.high, 1 + i), op.shapes[i]).to(dtype).to(device)
                     .requires_grad_());
  Tensor out = op.fn(xs);
  Tensor v = tensor(sample_values(out.shape(), -1, 1, 101), out.shape()).to(dtype).to(device);
  std::vector<Tensor> g = autograd::grad({sum(mul(out, v))}, xs, {.create_graph = true, .allow_unused = true});
  Tensor s = zeros({}, {.dtype = dtype, .device = device});
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i].defined())
      s = add(s, sum(mul(g[i], tensor(sample_values(xs[i].shape(), -1, 1, 201 + i), xs[i].shape()).to(dtype).to(device))));
  std::vector<Tensor> h = autograd::grad({s}, xs, {.allow_unused = true});
  autograd::clear_tape();
  return h;
}

class GradGradCheck : public ::testing::TestWithParam<TableCase> {};

TEST_P(GradGradCheck, MatchesFiniteDifferencesOfTheGradient) {
  const auto& [device, index, how] = GetParam();
  const OpCase& op = op_table()[index];
  for (const auto& s : op.shapes)
    if (s.empty() && how != Layouting::contiguous) GTEST_SKIP() << "layout needs more dims";
  if (lacks_f64_attention(op, device)) {
    // No f64 kernels to difference: the device's Hessian-vector product
    // against the CPU's in f32 (the dropout rows check that the composed
    // formula of create_graph redraws the kernel's mask).
    const std::vector<Tensor> cpu = hessian_vector_products(op, Device::cpu(), DType::f32);
    const std::vector<Tensor> got = hessian_vector_products(op, device, DType::f32);
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(cpu[i].defined(), got[i].defined()) << op.name << " input " << i;
      if (cpu[i].defined()) expect_matches(got[i], cpu[i], 1e-3, op.name + " second derivative " + std::to_string(i));
    }
    return;
  }
  std::string refusal;
  const bool checked = gradgradcheck(op, how, &refusal, 1, device);
  if (refusing_double_backward().count(op.name)) {
    EXPECT_FALSE(checked) << op.name << " now has a differentiable backward: take it off the refusing list";
    EXPECT_NE(refusal.find("has no differentiable backward yet"), std::string::npos) << refusal;
    if (!checked) GTEST_SKIP() << refusal;
  } else {
    EXPECT_TRUE(checked) << refusal;
  }
}

// Contiguous and broadcast inputs on the CPU; contiguous on the other devices,
// where a software driver (CI's lavapipe) spends seconds per case.
std::vector<TableCase> gradgrad_cases() {
  std::vector<TableCase> cases;
  for (const Device& d : device_suite_devices())
    for (std::size_t row = 0; row < op_table().size(); ++row)
      for (Layouting how : {Layouting::contiguous, Layouting::broadcast})
        if (d.is_cpu() || how == Layouting::contiguous) cases.emplace_back(d, row, how);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(OpTable, GradGradCheck, ::testing::ValuesIn(gradgrad_cases()), table_case_name);

struct OpRun {
  Tensor out;
  std::vector<Tensor> grads;
};

// One op on one device: forward, then backward with a fixed seed gradient.
OpRun run_op(const OpCase& op, Layouting how, Device device, DType dtype) {
  std::vector<Input> inputs;
  std::vector<Tensor> views;
  for (std::size_t i = 0; i < op.shapes.size(); ++i) {
    auto values = sample_values(op.shapes[i], op.low, op.high, 100 + i);
    inputs.push_back(make_input(values, op.shapes[i], how, dtype, device));
    views.push_back(inputs.back().view);
  }
  OpRun r;
  r.out = op.fn(views);
  auto seed_values = sample_values(r.out.shape(), -1.0, 1.0, 7);
  Tensor seed = tensor(seed_values, r.out.shape()).to(dtype).to(device);
  GradientStore grads = backward(r.out, seed);
  for (auto& in : inputs) r.grads.push_back(grads.get(in.base));
  return r;
}

// The device's forward and backward against the CPU's, in every layouting.
void expect_matches_cpu(const OpCase& op, Device device, DType dtype, double tol) {
  for (Layouting how : {Layouting::contiguous, Layouting::transposed, Layouting::sliced, Layouting::broadcast}) {
    const std::string what = op.name + " (" + layouting_name(how) + ")";
    OpRun cpu = run_op(op, how, Device::cpu(), dtype);
    OpRun got = run_op(op, how, device, dtype);
    ASSERT_EQ(got.out.device(), device) << what;
    ASSERT_EQ(got.out.dtype(), cpu.out.dtype()) << what;
    expect_matches(got.out, cpu.out, tol, what + " output");
    for (std::size_t i = 0; i < cpu.grads.size(); ++i) {
      ASSERT_EQ(cpu.grads[i].defined(), got.grads[i].defined()) << what;
      if (!cpu.grads[i].defined()) continue;
      EXPECT_EQ(got.grads[i].device(), device) << what;
      EXPECT_EQ(got.grads[i].dtype(), dtype) << what;
      expect_matches(got.grads[i], cpu.grads[i], tol, what + " gradient " + std::to_string(i));
    }
  }
}

class MatchesCpu : public ::testing::TestWithParam<std::tuple<Device, std::size_t>> {};

TEST_P(MatchesCpu, ForwardAndBackwardInF32) {
  const auto& [device, index] = GetParam();
  const OpCase& op = op_table()[index];
  expect_matches_cpu(op, device, DType::f32, std::max(op.tolerance, 1e-4) * 10);
}

// The kernels' double variants agree with the CPU to near the last bits.
// Fused attention stays f32-only where the device lacks its f64 variant: in
// f64 it refuses (the cases whose mask needs a gradient compose it instead).
TEST_P(MatchesCpu, ForwardAndBackwardInF64) {
  const auto& [device, index] = GetParam();
  const OpCase& op = op_table()[index];
  if (lacks_f64_attention(op, device)) {
    try {
      run_op(op, Layouting::contiguous, device, DType::f64);
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(f64_attention_refusal(op, device)), std::string::npos) << e.what();
      return;
    }
  }
  expect_matches_cpu(op, device, DType::f64, 1e-10);
}

INSTANTIATE_TEST_SUITE_P(OpTable, MatchesCpu,
                         ::testing::Combine(::testing::ValuesIn(devices_beside_the_cpu()),
                                            ::testing::Range<std::size_t>(0, op_table().size())),
                         table_row_name);
// A build or machine with the CPU alone has no case here.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MatchesCpu);

TEST(OpErrors, MatmulInnerDims) {
  expect_error<ShapeError>([] { matmul(zeros({64, 784}), zeros({512, 10})); },
                           "matmul: inner dimensions differ: [64, 784] x [512, 10]");
}

TEST(OpErrors, BroadcastMismatch) {
  expect_error<ShapeError>([] { add(zeros({3, 4}), zeros({5})); }, "add: shapes [3, 4] and [5] do not broadcast");
  expect_error<ShapeError>([] { mul(zeros({2, 3}), zeros({3, 2})); }, "mul: shapes [2, 3] and [3, 2]");
}

TEST(OpErrors, DTypeMismatch) {
  expect_error<DTypeError>([] { matmul(zeros({2, 2}), zeros({2, 2}, {.dtype = DType::f64})); },
                           "matmul: dtypes differ: f32 and f64");
  expect_error<DTypeError>([] { exp(zeros({2}, {.dtype = DType::i64})); },
                           "exp: expected a floating-point tensor, got i64");
  expect_error<DTypeError>([] { zeros({2}, {.dtype = DType::i32}).requires_grad_(); }, "requires_grad_");
}

TEST(OpErrors, DeviceMismatch) {
  // A second device may not exist here; a device the build cannot provide is its own error.
  expect_error<DeviceError>([] { zeros({2}, {.device = Device::vulkan(99)}); }, "vulkan:99");
}

TEST(OpErrors, ShapeOps) {
  expect_error<ShapeError>([] { zeros({2, 3}).view({4, 2}); }, "view: shape [4, 2] is invalid for 6 elements");
  expect_error<ShapeError>([] { zeros({2, 3}).t().view({6}); }, "without a copy");
  expect_error<ShapeError>([] { zeros({2, 3}).transpose(0, 2); }, "transpose: dim 2 out of range");
  expect_error<ShapeError>([] { zeros({2, 3}).expand({4, 3}); }, "expand: cannot expand [2, 3] to [4, 3]");
  expect_error<ShapeError>([] { zeros({2, 3}).select(1, 3); }, "select: index 3 out of range");
  expect_error<ShapeError>([] { zeros({2, 3}).narrow(1, 2, 2); }, "narrow: range [2, 4) out of bounds");
  expect_error<ShapeError>([] { zeros({2, 3}).permute({0, 0}); }, "permute: dim 0 repeated");
  expect_error<ShapeError>([] { sum(zeros({2, 3}), {0, 0}); }, "sum: dim listed twice");
  expect_error<ShapeError>([] { mse_loss(zeros({2, 3}), zeros({3, 2})); }, "mse_loss: input shape [2, 3]");
  expect_error<ShapeError>([] { bmm(zeros({2, 3, 4}), zeros({3, 4, 2})); }, "bmm: expected [B, M, K] x [B, K, N]");
  expect_error<ShapeError>([] { zeros({2, 3}).item(); }, "item: expected a tensor with 1 element");
}

TEST(OpErrors, BadArguments) {
  expect_error<Error>([] { clamp(zeros({2}), 1.0, 0.0); }, "clamp: expected min <= max");
  expect_error<Error>([] { gelu(zeros({2}), "fast"); }, "gelu: approximate must be");
  expect_error<DTypeError>([] { where(zeros({2}), zeros({2}), zeros({2})); }, "where: expected a bool condition");
  expect_error<Error>([] { randint(5, 5, {2}); }, "randint: expected low < high");
}

// Forward values against hand-computed results.
TEST(OpValues, MatmulShapes) {
  Tensor a = arange(6).reshape({2, 3});
  Tensor b = arange(6).reshape({3, 2});
  EXPECT_EQ(matmul(a, b).to_vector<float>(), (std::vector<float>{10, 13, 28, 40}));
  EXPECT_EQ(matmul(arange(3), arange(3)).item(), 5.0);
  EXPECT_EQ(matmul(zeros({5, 1, 2, 3}), zeros({4, 3, 7})).shape(), (Shape{5, 4, 2, 7}));
  EXPECT_EQ(matmul(zeros({3}), zeros({2, 3, 4})).shape(), (Shape{2, 4}));
}

TEST(OpValues, ReductionsAndComparisons) {
  Tensor x = tensor({{1.0, 5.0, 3.0}, {4.0, 2.0, 6.0}});
  EXPECT_EQ(sum(x, {1}).to_vector<float>(), (std::vector<float>{9, 12}));
  EXPECT_EQ(mean(x, {0}, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(std::get<0>(max(x, 1)).to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(min(x).item(), 1.0);
  EXPECT_EQ(argmax(x, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(argmax(x).item(), 5.0);
  EXPECT_EQ(argmax(x, 0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(gt(x, 3.0).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 1, 0, 1, 0, 1}));
  Tensor labels = tensor(std::vector<std::int64_t>{1, 0});
  EXPECT_EQ(eq(argmax(x, 1), labels).to(DType::f32).sum().item(), 1.0);
  EXPECT_EQ(where(gt(x, 3.0), x, zeros({})).to_vector<float>(), (std::vector<float>{0, 5, 0, 4, 0, 6}));
}

TEST(OpValues, LargeParallelReductionsMatchSerial) {
  // Sizes above the parallel threshold exercise the OpenMP paths.
  Tensor x = rand({300, 500}, {.dtype = DType::f64});
  std::vector<double> v = x.to_vector<double>();
  double total = 0;
  for (double e : v) total += e;
  EXPECT_NEAR(sum(x).item(), total, 1e-9 * total);
  Tensor col = sum(x.t(), {1});
  EXPECT_NEAR(col.to_vector<double>()[7], [&] { double s = 0; for (int i = 0; i < 300; ++i) s += v[i * 500 + 7]; return s; }(), 1e-9);
  Tensor y = add(x, x.t().contiguous().t());
  EXPECT_EQ(y.to_vector<double>()[1234], 2 * v[1234]);
}

TEST(OpValues, MaxAndMinOfLongRowsMatchAScalarWalk) {
  // Rows long enough for the CPU's vector lanes, with and without NaN and
  // infinities, some rows' lengths not a multiple of the lanes, in floating
  // and integer dtypes; amax/amin over dim 1 against a walk here.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t n : {128, 300, 1000}) {
    constexpr std::int64_t rows = 6;
    std::mt19937 rng{std::uint32_t(n)};
    std::uniform_int_distribution<int> pick(-100, 100);
    std::vector<double> v(std::size_t(rows * n));
    for (double& e : v) e = pick(rng);
    v[std::size_t(1 * n + n - 1)] = nan;  // last of its row, past the lanes when n is not a multiple
    v[std::size_t(2 * n + 3)] = inf;
    v[std::size_t(3 * n + 70)] = -inf;
    v[std::size_t(4 * n + 5)] = nan;
    v[std::size_t(4 * n + 6)] = inf;
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
      std::vector<double> w = v;
      if (!is_floating(dt))
        for (double& e : w) e = std::isfinite(e) ? e : 7;
      Tensor x = tensor(w, {rows, n}).to(dt);
      const std::vector<double> got_max = amax(x, {1}).to(DType::f64).to_vector<double>();
      const std::vector<double> got_min = amin(x, {1}).to(DType::f64).to_vector<double>();
      const std::vector<double> stored = x.to(DType::f64).to_vector<double>();
      for (std::int64_t r = 0; r < rows; ++r) {
        double hi = stored[std::size_t(r * n)], lo = hi;
        bool has_nan = false;
        for (std::int64_t j = 0; j < n; ++j) {
          const double e = stored[std::size_t(r * n + j)];
          has_nan = has_nan || std::isnan(e);
          hi = std::max(hi, e);
          lo = std::min(lo, e);
        }
        const std::string where = std::string(dtype_name(dt)) + " n " + std::to_string(n) + " row " + std::to_string(r);
        if (has_nan) {
          EXPECT_TRUE(std::isnan(got_max[std::size_t(r)])) << where;
          EXPECT_TRUE(std::isnan(got_min[std::size_t(r)])) << where;
        } else {
          EXPECT_EQ(got_max[std::size_t(r)], hi) << where;
          EXPECT_EQ(got_min[std::size_t(r)], lo) << where;
        }
      }
    }
  }
}

TEST(OpValues, ColumnSumsOfContiguousRowsMatchPerColumnSums) {
  // Sums over leading dims of a contiguous input take the row-accumulating
  // path: many columns (blocks of columns per thread), few columns (partial
  // rows per thread), tiny inputs (serial), and a reduced middle dim (the
  // general walk), each against sums taken column by column here.
  struct Case {
    Shape shape;
    std::vector<std::int64_t> dims;
  };
  const Case cases[] = {{{700, 1000}, {0}},  {{40000, 3}, {0}},  {{7, 5}, {0}},
                        {{6, 50, 70}, {0, 1}}, {{9, 1, 4000}, {0}}, {{30, 40, 50}, {1}}};
  for (const Case& c : cases) {
    for (DType dt : {DType::f64, DType::f32, DType::i64}) {
      Tensor x = dt == DType::i64 ? randint(-50, 50, c.shape, {.dtype = DType::i64})
                                  : rand(c.shape, {.dtype = DType::f64}).to(dt);
      Tensor s = sum(x, c.dims), m = dt == DType::i64 ? Tensor() : mean(x, c.dims);
      std::vector<double> v = x.to(DType::f64).to_vector<double>();
      // out[o] gathers every input element whose kept coordinates are o's.
      std::vector<double> want(std::size_t(s.numel()), 0.0);
      std::vector<std::int64_t> count(want.size(), 0);
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        std::int64_t rest = i, o = 0, mul = 1;
        for (std::size_t d = c.shape.size(); d-- > 0;) {
          const std::int64_t idx = rest % c.shape[d];
          rest /= c.shape[d];
          if (std::find(c.dims.begin(), c.dims.end(), std::int64_t(d)) != c.dims.end()) continue;
          o += idx * mul;
          mul *= c.shape[d];
        }
        want[std::size_t(o)] += v[std::size_t(i)];
        ++count[std::size_t(o)];
      }
      std::vector<double> got = s.to(DType::f64).to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      const double tol = dt == DType::f32 ? 1e-4 : 1e-9;
      for (std::size_t o = 0; o < want.size(); ++o) {
        ASSERT_NEAR(got[o], want[o], tol * std::max(1.0, std::abs(want[o])))
            << shape_str(c.shape) << " sum, out " << o;
        if (m.defined())
          ASSERT_NEAR(m.to(DType::f64).to_vector<double>()[o], want[o] / double(count[o]), tol)
              << shape_str(c.shape) << " mean, out " << o;
      }
    }
  }
}

TEST(OpValues, FloatMathStaysWithinUlpsOfDouble) {
  // f32 exp, log, tanh and GELU (forward and gradient) over wide sweeps, long
  // enough for the vectorised loops, against the same ops in f64.
  const std::int64_t n = 4099;
  std::vector<double> wide(n), positive(n);
  for (std::int64_t i = 0; i < n; ++i) {
    wide[std::size_t(i)] = -30.0 + 60.0 * double(i) / double(n - 1);
    positive[std::size_t(i)] = std::pow(10.0, -30.0 + 60.0 * double(i) / double(n - 1));
  }
  auto check = [&](const char* what, const std::vector<double>& in, auto&& op, double rel, double abs_per_x) {
    Tensor x64 = tensor(in, {n}), x32 = x64.to(DType::f32);
    std::vector<double> xs = x32.to(DType::f64).to_vector<double>();  // the inputs f32 holds
    std::vector<double> want = op(x32.to(DType::f64)).template to_vector<double>();
    std::vector<double> got = op(x32).to(DType::f64).template to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = double(float(want[i]));
      const double tol = rel * std::abs(w) + abs_per_x * std::max(1.0, std::abs(xs[i])) + 1e-37;
      ASSERT_NEAR(got[i], w, tol) << what << " at x = " << xs[i];
    }
  };
  const double ulps4 = 4.0 / 8388608.0;
  check("exp", wide, [](const Tensor& t) { return exp(t); }, ulps4, 0.0);
  check("log", positive, [](const Tensor& t) { return log(t); }, ulps4, 0.0);
  check("tanh", wide, [](const Tensor& t) { return tanh(t); }, ulps4, 0.0);
  // GELU's 1 + erf(x / sqrt 2) cancels for negative x in any f32 arithmetic: bound it absolutely.
  check("gelu", wide, [](const Tensor& t) { return gelu(t); }, ulps4, 1e-6);
  check("gelu gradient", wide, [](const Tensor& t) {
    Tensor x = t.detach().requires_grad_(true);
    return backward(sum(gelu(x))).get(x);
  }, ulps4, 1e-6);
}

TEST(OpValues, TypePromotion) {
  Tensor i = tensor(std::vector<std::int64_t>{1, 2, 3});
  Tensor f = tensor({0.5, 0.5, 0.5});
  Tensor r = add(i, f);
  EXPECT_EQ(r.dtype(), DType::f32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1.5, 2.5, 3.5}));
  EXPECT_EQ(add(i, 1).dtype(), DType::i64);
  EXPECT_EQ(add(i, 1.0).dtype(), DType::f32);  // as torch.tensor([1]) + 1.0
  EXPECT_EQ(add(f, f.to(DType::f64)).dtype(), DType::f64);
}

TEST(OpErrors, IntegerDivisionByZeroThrows) {
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    Tensor x = full({3}, 7, {.dtype = dt});
    Tensor z = tensor(std::vector<double>{1, 0, 2}).to(dt);
    for (const char* mode : {"trunc", "floor"}) {
      expect_error<ValueError>([&] { div(x, z, mode); }, "div: integer division by zero");
      expect_error<ValueError>([&] { div(x, zeros({}, {.dtype = dt}), mode); }, "div: integer division by zero");
    }
    // True division divides as f32, with IEEE results.
    EXPECT_EQ(div(x, z).dtype(), DType::f32);
    EXPECT_TRUE(std::isinf(div(x, z).to_vector<float>()[1]));
    EXPECT_TRUE(std::isinf(div(x, 0.0).to_vector<float>()[0]));
  }
  expect_error<ValueError>([] { div(ones({1}), ones({1}), "round"); },
                           "div: expected rounding_mode \"trunc\" or \"floor\", got \"round\"");
  // Floats keep IEEE results.
  EXPECT_TRUE(std::isinf(div(ones({1}), 0.0).item()));
}

RUMUS_DEVICE_SUITE(OpValuesOnEveryDevice);

// torch.div's three modes and the rounding functions, on every device (values from PyTorch).
TEST_P(OpValuesOnEveryDevice, DivisionModesAndRounding) {
  const Device dev = GetParam();
  Tensor a = tensor(std::vector<std::int64_t>{-7, 7, -7, 7, 6}).to(dev);
  Tensor b = tensor(std::vector<std::int64_t>{2, 2, -2, -2, 3}).to(dev);
  EXPECT_EQ(div(a, b).to_vector<float>(), (std::vector<float>{-3.5f, 3.5f, 3.5f, -3.5f, 2}));
  EXPECT_EQ(div(a, b, "trunc").to_vector<std::int64_t>(), (std::vector<std::int64_t>{-3, 3, 3, -3, 2}));
  EXPECT_EQ(div(a, b, "floor").to_vector<std::int64_t>(), (std::vector<std::int64_t>{-4, 3, 3, -4, 2}));
  EXPECT_EQ(floor_divide(a, b).dtype(), DType::i64);
  Tensor u = tensor(std::vector<std::int64_t>{7, 201}).to(DType::u8).to(dev);
  EXPECT_EQ(div(u, tensor(std::vector<std::int64_t>{2, 3}).to(DType::u8).to(dev)).to_vector<float>(),
            (std::vector<float>{3.5f, 67}));
  Tensor x = tensor({-7.5, 7.5, -0.5, 2.5, 1.5}).to(dev);
  EXPECT_EQ(div(x, 2.0).to_vector<float>(), (std::vector<float>{-3.75f, 3.75f, -0.25f, 1.25f, 0.75f}));
  EXPECT_EQ(div(x, full({}, 2.0).to(dev), "floor").to_vector<float>(), (std::vector<float>{-4, 3, -1, 1, 0}));
  EXPECT_EQ(div(x, full({}, 2.0).to(dev), "trunc").to_vector<float>(), (std::vector<float>{-3, 3, -0.0f, 1, 0}));
  EXPECT_EQ(floor(x).to_vector<float>(), (std::vector<float>{-8, 7, -1, 2, 1}));
  EXPECT_EQ(ceil(x).to_vector<float>(), (std::vector<float>{-7, 8, -0.0f, 3, 2}));
  EXPECT_EQ(trunc(x).to_vector<float>(), (std::vector<float>{-7, 7, -0.0f, 2, 1}));
  EXPECT_EQ(round(x).to_vector<float>(), (std::vector<float>{-8, 8, -0.0f, 2, 2}));  // half to even
  EXPECT_EQ(round(a).to_vector<std::int64_t>(), a.cpu().to_vector<std::int64_t>());
  EXPECT_EQ(floor(x.to(DType::f64)).to_vector<double>(), (std::vector<double>{-8, 7, -1, 2, 1}));
}

// As torch.neg: unsigned values wrap around, signed ones negate, the dtype is kept.
TEST_P(OpValuesOnEveryDevice, IntegerNegWraps) {
  const Device dev = GetParam();
  Tensor u = tensor(std::vector<double>{1, 0, 200, 255}).to(DType::u8).to(dev);
  Tensor nu = neg(u);
  EXPECT_EQ(nu.dtype(), DType::u8);
  EXPECT_EQ(nu.device(), dev);
  EXPECT_EQ(nu.to(Device::cpu()).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{255, 0, 56, 1}));
  EXPECT_EQ(u.neg().to(Device::cpu()).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{255, 0, 56, 1}));
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor n = neg(tensor(std::vector<double>{5, -7, 0}).to(dt).to(dev));
    EXPECT_EQ(n.dtype(), dt);
    EXPECT_EQ(n.to(Device::cpu()).to(DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-5, 7, 0}));
  }
}

// A number keeps an integer tensor integer when it is an integer, and gives
// f32 when it is floating, as PyTorch: torch.tensor([1, 2, 3], dtype=torch.int32)
// + 2 is int32 [3, 4, 5], + 2.5 is float32 [3.5, 4.5, 5.5].
TEST_P(OpValuesOnEveryDevice, NumbersPromoteIntegerTensorsAsInPyTorch) {
  const Device dev = GetParam();
  Tensor i = tensor(std::vector<std::int32_t>{1, 2, 3}).to(dev);
  auto ints = [](const Tensor& t) { return t.cpu().to(DType::i64).to_vector<std::int64_t>(); };
  auto floats = [](const Tensor& t) { return t.cpu().to_vector<float>(); };
  for (const Tensor& t : {add(i, 2), i + 2, i.add(full({}, 2, {.dtype = DType::i32, .device = dev}))}) {
    EXPECT_EQ(t.dtype(), DType::i32);
    EXPECT_EQ(ints(t), (std::vector<std::int64_t>{3, 4, 5}));
  }
  EXPECT_EQ(add(i, 2.5).dtype(), DType::f32);
  EXPECT_EQ(floats(add(i, 2.5)), (std::vector<float>{3.5f, 4.5f, 5.5f}));
  EXPECT_EQ(floats(i * 2.5), (std::vector<float>{2.5f, 5.0f, 7.5f}));
  EXPECT_EQ(floats(i - 0.5), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(floats(1.5 - i), (std::vector<float>{0.5f, -0.5f, -1.5f}));
  EXPECT_EQ((10 - i).dtype(), DType::i32);
  EXPECT_EQ(ints(10 - i), (std::vector<std::int64_t>{9, 8, 7}));
  EXPECT_EQ(ints(mul(i, std::int64_t(3))), (std::vector<std::int64_t>{3, 6, 9}));
  EXPECT_EQ(floats(i / 2), (std::vector<float>{0.5f, 1.0f, 1.5f}));  // true division
  Tensor u = tensor(std::vector<double>{255, 1}).to(DType::u8).to(dev);
  EXPECT_EQ((u + 2).dtype(), DType::u8);
  EXPECT_EQ((u + 2).cpu().to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 3}));  // wraps
}

TEST(OpValues, IntegerDivisionWrapsAtTheMinimum) {
  Tensor a = tensor(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 7, -7});
  Tensor b = tensor(std::vector<std::int32_t>{-1, -2, 2});
  EXPECT_EQ(div(a, b, "trunc").to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -3, -3}));
  EXPECT_EQ(div(a, b, "floor").to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -4, -4}));
  Tensor c = tensor(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
  EXPECT_EQ(div(c, tensor(std::vector<std::int64_t>{-1}), "trunc").item<std::int64_t>(),
            std::numeric_limits<std::int64_t>::min());
}

TEST(OpValues, IntegerSumAccumulatesInInt64) {
  Tensor s = sum(ones({300}, {.dtype = DType::u8}));
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item<std::int64_t>(), 300);
  Tensor big = full({2, 3}, 2e9, {.dtype = DType::i32});
  EXPECT_EQ(sum(big).item<std::int64_t>(), 12000000000);
  EXPECT_EQ(sum(big, {1}).to_vector<std::int64_t>(), (std::vector<std::int64_t>{6000000000, 6000000000}));
  EXPECT_EQ(big.sum().dtype(), DType::i64);
  // Past 2^53 a double accumulator would round; the sum is exact.
  Tensor huge = tensor(std::vector<std::int64_t>{(std::int64_t(1) << 60) + 1, 1});
  EXPECT_EQ(sum(huge).to_vector<std::int64_t>()[0], (std::int64_t(1) << 60) + 2);
}

TEST(OpErrors, BadRanges) {
  const auto max = std::numeric_limits<std::int64_t>::max();
  expect_error<ShapeError>([&] { zeros({4}).narrow(0, 1, max); }, "narrow: range [1, 1 + 9223372036854775807)");
  expect_error<ShapeError>([&] { zeros({4}).narrow(0, max, 1); }, "narrow: range");
  expect_error<ValueError>([] { arange(0, INFINITY); }, "arange: expected finite start, end and step, got 0, inf");
  expect_error<ValueError>([] { arange(0, NAN); }, "arange: expected finite start, end and step, got 0, nan");
  expect_error<ValueError>([] { arange(0, 1, NAN); }, "arange: expected finite");
  expect_error<ShapeError>([] { arange(0, 1e18); }, "arange: 1000000000000000000 elements");
  expect_error<ShapeError>([] { arange(0, 1e300); }, "arange: ");
  EXPECT_EQ(arange(0, 3).numel(), 3);
}

// Sanitizer allocators abort on such requests instead of failing them.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(OpErrors, OutOfMemoryNamesTheOpShapeAndDtype) {
  if (kSanitized) GTEST_SKIP() << "sanitizer allocators abort on petabyte requests";
  // A stride-0 view of 2^48 elements costs nothing; its results need a petabyte.
  Tensor big = zeros({1}).expand({std::int64_t(1) << 24, std::int64_t(1) << 24});
  expect_error<OutOfMemoryError>([&] { add(big, big); },
                                 "add: out of memory allocating a f32 tensor of shape [16777216, 16777216] "
                                 "(1125899906842624 bytes) on cpu");
  expect_error<OutOfMemoryError>([&] { relu(big); }, "relu: out of memory allocating a f32 tensor of shape [16777216, 16777216]");
  expect_error<OutOfMemoryError>([&] { mul(big, 2.0); }, "mul: out of memory allocating a f32 tensor");
  expect_error<OutOfMemoryError>([&] { big.contiguous(); }, "clone: out of memory allocating a f32 tensor");
  expect_error<OutOfMemoryError>([&] { zeros({std::int64_t(1) << 25, std::int64_t(1) << 25}, {.dtype = DType::f64}); },
                                 "out of memory allocating a f64 tensor of shape [33554432, 33554432]");
}

}  // namespace

// PyTorch's result_type: dimensioned tensors decide unless a 0-d operand is of
// a higher category (integer < floating).
TEST(OpValues, ZeroDimTensorsPromoteOnlyAcrossCategories) {
  const Tensor f32 = ones({3}), i32 = ones({3}, {.dtype = DType::i32}), u8 = ones({3}, {.dtype = DType::u8});
  EXPECT_EQ((f32 * scalar_tensor(2.0, {.dtype = DType::f64})).dtype(), DType::f32);
  EXPECT_EQ((scalar_tensor(2.0, {.dtype = DType::f64}) * f32).dtype(), DType::f32);
  EXPECT_EQ(add(i32, scalar_tensor(1.5)).dtype(), DType::f32);
  EXPECT_EQ(add(i32, scalar_tensor(1.5)).to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  EXPECT_EQ(add(i32, scalar_tensor(1.5, {.dtype = DType::f64})).dtype(), DType::f64);
  EXPECT_EQ(add(i32, scalar_tensor(7, {.dtype = DType::i64})).dtype(), DType::i32);
  EXPECT_EQ(sub(u8, scalar_tensor(1, {.dtype = DType::i32})).dtype(), DType::u8);
  EXPECT_EQ(maximum(f32.to(DType::f16), scalar_tensor(0.5)).dtype(), DType::f16);
  // Both 0-d, or both dimensioned: the ordinary promotion.
  EXPECT_EQ(mul(scalar_tensor(1.0), scalar_tensor(2.0, {.dtype = DType::f64})).dtype(), DType::f64);
  EXPECT_EQ(mul(f32, ones({1}, {.dtype = DType::f64})).dtype(), DType::f64);
  EXPECT_EQ(where(gt(f32, 0.0), f32, scalar_tensor(0.0, {.dtype = DType::f64})).dtype(), DType::f32);
  EXPECT_EQ(lt(i32, scalar_tensor(1.5)).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 1, 1}));
  // The gradient comes back in each input's own dtype.
  Tensor x = ones({3}).requires_grad_(), s = scalar_tensor(2.0, {.dtype = DType::f64}).requires_grad_();
  GradientStore g = backward(sum(mul(x, s)));
  EXPECT_EQ(g.get(x).dtype(), DType::f32);
  EXPECT_EQ(g.get(s).dtype(), DType::f64);
  EXPECT_DOUBLE_EQ(g.get(s).item(), 3.0);
}

TEST(OpValues, MaximumAndMinimumSplitTiesEvenly) {
  Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_(), b = tensor({1.0, 5.0, 3.0}).requires_grad_();
  GradientStore gmax = backward(sum(maximum(a, b)));
  EXPECT_EQ(gmax.get(a).to_vector<float>(), (std::vector<float>{0.5f, 0.0f, 0.5f}));
  EXPECT_EQ(gmax.get(b).to_vector<float>(), (std::vector<float>{0.5f, 1.0f, 0.5f}));
  GradientStore gmin = backward(sum(minimum(a, b)));
  EXPECT_EQ(gmin.get(a).to_vector<float>(), (std::vector<float>{0.5f, 1.0f, 0.5f}));
  EXPECT_EQ(gmin.get(b).to_vector<float>(), (std::vector<float>{0.5f, 0.0f, 0.5f}));
  // Broadcast: a 0-d b tied with two elements gets both halves.
  Tensor c = scalar_tensor(1.0).requires_grad_();
  GradientStore gb = backward(sum(maximum(a, c)));
  EXPECT_EQ(gb.get(c).item(), 0.5);
}

TEST(OpValues, ScalarComparisonsAndWhere) {
  Tensor x = tensor({1.0, 2.0, 3.0});
  using B = std::vector<std::uint8_t>;
  EXPECT_EQ(eq(x, 2.0).to_vector<std::uint8_t>(), (B{0, 1, 0}));
  EXPECT_EQ(ne(x, 2.0).to_vector<std::uint8_t>(), (B{1, 0, 1}));
  EXPECT_EQ(lt(x, 2.0).to_vector<std::uint8_t>(), (B{1, 0, 0}));
  EXPECT_EQ(le(x, 2.0).to_vector<std::uint8_t>(), (B{1, 1, 0}));
  EXPECT_EQ(gt(x, 2.0).to_vector<std::uint8_t>(), (B{0, 0, 1}));
  EXPECT_EQ(ge(x, 2.0).to_vector<std::uint8_t>(), (B{0, 1, 1}));
  // A fractional number is not truncated to an integer tensor's dtype.
  Tensor i = tensor(std::vector<std::int32_t>{1, 2, 3});
  EXPECT_EQ(lt(i, 2.5).to_vector<std::uint8_t>(), (B{1, 1, 0}));
  EXPECT_EQ(eq(i, 2.5).to_vector<std::uint8_t>(), (B{0, 0, 0}));
  Tensor cond = tensor(std::vector<std::uint8_t>{1, 0, 1});
  EXPECT_EQ(where(cond, x, -1.0).to_vector<float>(), (std::vector<float>{1, -1, 3}));
  EXPECT_EQ(where(cond, -1.0, x).to_vector<float>(), (std::vector<float>{-1, 2, -1}));
  EXPECT_EQ(where(cond, x, -1.0).dtype(), DType::f32);
  EXPECT_EQ(where(cond, i, 0.5).dtype(), DType::f32);  // a fractional number beside an integer tensor
  expect_error<DTypeError>([&] { where(x, x, 0.0); }, "where: expected a bool condition");
}

TEST(OpValues, MaskedFillAndNonFiniteTests) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor({1.0, -2.0, 3.0, -4.0}).reshape({2, 2}).requires_grad_();
  Tensor filled = masked_fill(x, lt(x, 0.0), 0.0);
  EXPECT_EQ(filled.to_vector<float>(), (std::vector<float>{1, 0, 3, 0}));
  EXPECT_EQ(x.masked_fill(tensor(std::vector<std::uint8_t>{1, 0}), 9.0).to_vector<float>(),
            (std::vector<float>{9, -2, 9, -4}));
  GradientStore g = backward(sum(filled));
  EXPECT_EQ(g.get(x).to_vector<float>(), (std::vector<float>{1, 0, 1, 0}));
  expect_error<DTypeError>([&] { masked_fill(x, x, 0.0); }, "masked_fill: expected a bool mask");
  expect_error<ShapeError>([&] { masked_fill(x, ones({3}, {.dtype = DType::u8}), 0.0); }, "masked_fill:");
  expect_error<ShapeError>([&] { masked_fill(ones({2}), ones({2, 2}, {.dtype = DType::u8}), 0.0); },
                           "masked_fill: mask of shape [2, 2] must broadcast to the input's shape [2]");

  Tensor v = tensor({1.0, inf, -inf, nan}).to(DType::f64);
  using B = std::vector<std::uint8_t>;
  EXPECT_EQ(isnan(v).to_vector<std::uint8_t>(), (B{0, 0, 0, 1}));
  EXPECT_EQ(isinf(v).to_vector<std::uint8_t>(), (B{0, 1, 1, 0}));
  EXPECT_EQ(isfinite(v).to_vector<std::uint8_t>(), (B{1, 0, 0, 0}));
  EXPECT_EQ(v.isnan().to_vector<std::uint8_t>(), (B{0, 0, 0, 1}));
  Tensor i = tensor(std::vector<std::int64_t>{1, 2});
  EXPECT_EQ(isnan(i).to_vector<std::uint8_t>(), (B{0, 0}));
  EXPECT_EQ(isinf(i).to_vector<std::uint8_t>(), (B{0, 0}));
  EXPECT_EQ(isfinite(i).to_vector<std::uint8_t>(), (B{1, 1}));
}

TEST(OpValues, MaxMinOverADimGiveValuesAndIndices) {
  Tensor x = tensor({{1.0, 5.0, 5.0}, {4.0, 2.0, 6.0}}).requires_grad_();
  auto [values, indices] = max(x, 1);
  EXPECT_EQ(values.to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(indices.dtype(), DType::i64);
  EXPECT_EQ(indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2}));
  // The gradient goes to the element the index names, the first of a tie.
  GradientStore g = backward(sum(values));
  EXPECT_EQ(g.get(x).to_vector<float>(), (std::vector<float>{0, 1, 0, 0, 0, 1}));
  auto [mv, mi] = x.min(0, true);
  EXPECT_EQ(mv.shape(), (Shape{1, 3}));
  EXPECT_EQ(mv.to_vector<float>(), (std::vector<float>{1, 2, 5}));
  EXPECT_EQ(mi.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 0}));
  EXPECT_EQ(std::get<1>(max(x, -2)).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0, 1}));
  autograd::clear_tape();
  expect_error<ShapeError>([] { max(zeros({2, 0}), 1); }, "max: cannot reduce over dim 1 of size 0");
  expect_error<ShapeError>([] { min(zeros({2, 3}), 2); }, "min:");
}

TEST(OpValues, MethodFormsMatchTheFreeFunctions) {
  Tensor x = tensor({{0.5, -1.0, 2.0}, {1.5, 0.25, -0.5}});
  auto same = [](const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    EXPECT_EQ(a.dtype(), b.dtype());
    EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
  };
  same(x.sum({1}, true), sum(x, {1}, true));
  same(x.mean({0}), mean(x, {0}));
  same(x.softmax(1), softmax(x, 1));
  same(x.log_softmax(0), log_softmax(x, 0));
  same(x.eq(x.relu()), eq(x, relu(x)));
  same(x.lt(0.5), lt(x, 0.5));
  same(x.exp(), exp(x));
  same(x.abs().log(), log(abs(x)));
  same(x.abs().sqrt(), sqrt(abs(x)));
  same(x.pow(2.0), pow(x, 2.0));
  same(x.matmul(x.t()), matmul(x, x.t()));
  same(x.max(), max(x));
  same(x.min(), min(x));
  same(x.argmax(), argmax(x));
  same(x.argmin(1), argmin(x, 1));
  same(x.clamp(-0.5, 0.5), clamp(x, -0.5, 0.5));
  same(x.tanh(), tanh(x));
}

TEST(OpValues, NumberOnTheLeft) {
  Tensor x = tensor({1.0, 2.0, 4.0}).requires_grad_();
  EXPECT_EQ(sub(1.0, x).to_vector<float>(), (std::vector<float>{0, -1, -3}));
  EXPECT_EQ((1.0 - x).to_vector<float>(), (std::vector<float>{0, -1, -3}));
  EXPECT_EQ(div(2.0, x).to_vector<float>(), (std::vector<float>{2, 1, 0.5}));
  EXPECT_EQ((2.0 / x).to_vector<float>(), (std::vector<float>{2, 1, 0.5}));
  GradientStore g = backward(sum(div(2.0, x)));
  EXPECT_EQ(g.get(x).to_vector<float>(), (std::vector<float>{-2, -0.5, -0.125}));
  Tensor i = tensor(std::vector<std::int32_t>{1, 2, 3});
  EXPECT_EQ(sub(10, i).to_vector<std::int32_t>(), (std::vector<std::int32_t>{9, 8, 7}));
  EXPECT_EQ(sub(10, i).dtype(), DType::i32);
  EXPECT_EQ(sub(10.0, i).dtype(), DType::f32);  // as 10.0 - torch.tensor([1, 2, 3], dtype=torch.int32)
  EXPECT_EQ(div(7.0, i).dtype(), DType::f32);
  EXPECT_EQ(div(6.0, i * 2).to_vector<float>(), (std::vector<float>{3, 1.5f, 1}));
  EXPECT_TRUE(std::isinf(div(1.0, tensor(std::vector<std::int32_t>{0})).item()));
}

TEST(OpValues, SplitChunkUnbindAreViews) {
  Tensor x = arange(10.0).reshape({5, 2}).requires_grad_();
  auto parts = split(x, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(parts[1].to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(parts[1].storage_ptr(), x.storage_ptr());  // a view, no copy
  auto cols = x.split(1, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(cols[1].to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9}));
  // torch.chunk: pieces of ceil(5 / 3) = 2, so three; ceil(5 / 4) = 2 also gives three.
  EXPECT_EQ(chunk(x, 3).size(), 3u);
  EXPECT_EQ(chunk(x, 4).size(), 3u);
  EXPECT_EQ(chunk(x, 5).size(), 5u);
  EXPECT_EQ(chunk(x, 9).size(), 5u);
  auto rows = unbind(x);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[3].shape(), (Shape{2}));
  EXPECT_EQ(rows[3].to_vector<float>(), (std::vector<float>{6, 7}));
  EXPECT_EQ(x.unbind(1)[0].to_vector<float>(), (std::vector<float>{0, 2, 4, 6, 8}));
  GradientStore g = backward(sum(mul(parts[0], 2.0)) + sum(rows[4]));
  EXPECT_EQ(g.get(x).to_vector<float>(), (std::vector<float>{2, 2, 2, 2, 0, 0, 0, 0, 1, 1}));
  expect_error<ValueError>([&] { split(x, 0); }, "split: expected split_size >= 1, got 0");
  expect_error<ValueError>([&] { chunk(x, 0); }, "chunk: expected chunks >= 1, got 0");
  expect_error<ShapeError>([&] { unbind(x, 2); }, "unbind:");
  expect_error<ShapeError>([] { split(scalar_tensor(1.0), 1); }, "split: expected a tensor with at least one dim");
}

// Pointwise math: the C library's values (PyTorch's own are in test_torch_reference), its
// special points, PyTorch's promotion of integers and the errors.
TEST(PointwiseMath, MatchesTheCLibraryInDouble) {
  const std::vector<double> v = {-0.75, -0.3, 0.0, 1e-9, 0.4, 0.9};
  Tensor x = tensor(v).to(DType::f64);
  auto check = [&](const char* name, const Tensor& got, double (*f)(double)) {
    ASSERT_EQ(got.dtype(), DType::f64) << name;
    auto g = got.to_vector<double>();
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_DOUBLE_EQ(g[i], f(v[i])) << name << "(" << v[i] << ")";
  };
  check("sin", sin(x), [](double a) { return std::sin(a); });
  check("cos", cos(x), [](double a) { return std::cos(a); });
  check("tan", tan(x), [](double a) { return std::tan(a); });
  check("asin", asin(x), [](double a) { return std::asin(a); });
  check("acos", acos(x), [](double a) { return std::acos(a); });
  check("atan", atan(x), [](double a) { return std::atan(a); });
  check("sinh", sinh(x), [](double a) { return std::sinh(a); });
  check("cosh", cosh(x), [](double a) { return std::cosh(a); });
  check("asinh", asinh(x), [](double a) { return std::asinh(a); });
  check("atanh", atanh(x), [](double a) { return std::atanh(a); });
  check("erf", erf(x), [](double a) { return std::erf(a); });
  check("erfc", erfc(x), [](double a) { return std::erfc(a); });
  check("erfinv", erf(erfinv(x)), [](double a) { return a; });
  check("log1p", log1p(x), [](double a) { return std::log1p(a); });
  check("expm1", expm1(x), [](double a) { return std::expm1(a); });
  check("exp2", exp2(x), [](double a) { return std::exp2(a); });
  check("acosh", acosh(add(x, 2.0)), [](double a) { return std::acosh(a + 2.0); });
  check("log2", log2(add(x, 2.0)), [](double a) { return std::log2(a + 2.0); });
  check("log10", log10(add(x, 2.0)), [](double a) { return std::log10(a + 2.0); });
  check("frac", frac(mul(x, 3.0)), [](double a) { return 3.0 * a - std::trunc(3.0 * a); });
}

TEST(PointwiseMath, SpecialPointsPromotionAndErrors) {
  const double inf = std::numeric_limits<double>::infinity();
  auto e = erfinv(tensor(std::vector<double>{-1.0, 1.0, 1.5, 0.0})).to_vector<float>();
  EXPECT_EQ(e[0], -inf);
  EXPECT_EQ(e[1], inf);
  EXPECT_TRUE(std::isnan(e[2]));
  EXPECT_EQ(e[3], 0.0f);
  // Integers compute in f32; sign keeps integers integer.
  Tensor i = tensor(std::vector<std::int64_t>{-3, 0, 4});
  EXPECT_EQ(sin(i).dtype(), DType::f32);
  EXPECT_EQ(reciprocal(i).dtype(), DType::f32);
  EXPECT_EQ(sign(i).dtype(), DType::i64);
  EXPECT_EQ(sign(i).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-1, 0, 1}));
  EXPECT_EQ(sign(tensor(std::vector<float>{-2.5f, 0.0f, 0.1f})).to_vector<float>(), (std::vector<float>{-1, 0, 1}));
  // logit with eps clamps first: logit(0, eps) = log(eps / (1 - eps)).
  auto l = logit(tensor(std::vector<float>{0.0f, 0.5f, 1.0f}), 0.1).to_vector<float>();
  EXPECT_FLOAT_EQ(l[0], std::log(0.1f / 0.9f));
  EXPECT_FLOAT_EQ(l[1], 0.0f);
  EXPECT_FLOAT_EQ(l[2], std::log(0.9f / 0.1f));
  expect_error<DTypeError>([&] { frac(i); }, "frac: expected a floating-point tensor, got i64");
  expect_error<Error>([] { sin(Tensor()); }, "sin:");
}

// Reductions of the math library: PyTorch's edge cases (values of PyTorch's are in test_torch_reference).
TEST(ReductionMath, EdgeCasesAsPyTorch) {
  const double inf = std::numeric_limits<double>::infinity();
  // One element with correction 1: 0 / 0.
  EXPECT_TRUE(std::isnan(var(tensor(std::vector<float>{2.0f})).item()));
  // The norm's and std's gradient at zero is 0, not NaN.
  Tensor z = zeros({3}).requires_grad_();
  EXPECT_EQ(backward(norm(z)).get(z).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  Tensor c = full({4}, 1.5).requires_grad_();
  EXPECT_EQ(backward(rumus::std(c)).get(c).to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  // logsumexp: rows of -inf stay -inf, +inf gives +inf, an empty dim gives -inf.
  auto l = logsumexp(tensor(std::vector<double>{-inf, -inf, 1.0, inf}, {2, 2}), {1}).to_vector<float>();
  EXPECT_EQ(l[0], -inf);
  EXPECT_EQ(l[1], inf);
  EXPECT_EQ(logsumexp(zeros({0, 2}), {0}).to_vector<float>(), (std::vector<float>{float(-inf), float(-inf)}));
  // prod: the gradient with one zero is the product of the others; with two zeros, 0.
  Tensor p = tensor(std::vector<float>{2, 0, 3, 0.5f}).requires_grad_();
  EXPECT_EQ(backward(prod(p)).get(p).to_vector<float>(), (std::vector<float>{0, 3, 0, 0}));
  Tensor q = tensor(std::vector<float>{2, 0, 3, 0}).requires_grad_();
  EXPECT_EQ(backward(prod(q)).get(q).to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(prod(tensor(std::vector<std::int32_t>{3, -2, 5})).dtype(), DType::i64);
  EXPECT_EQ(prod(zeros({2, 0}), 1).to_vector<float>(), (std::vector<float>{1, 1}));
  // any / all: bool, NaN counts as non-zero, empty any is false and empty all is true.
  Tensor b = tensor(std::vector<double>{0, std::nan(""), 0, 0}, {2, 2});
  EXPECT_EQ(any(b, 1).dtype(), DType::boolean);
  EXPECT_EQ(any(b, 1).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 0}));
  EXPECT_EQ(all(b, 0, true).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 0}));
  EXPECT_EQ(all(ones({2, 2})).item(), 1.0);
  EXPECT_EQ(any(zeros({0})).item(), 0.0);
  EXPECT_EQ(all(zeros({0})).item(), 1.0);
  // nansum / nanmean skip NaN; its gradient there is 0.
  Tensor n = tensor(std::vector<float>{1, NAN, 3}).requires_grad_();
  EXPECT_EQ(nansum(n).item(), 4.0);
  EXPECT_EQ(nanmean(n).item(), 2.0);
  EXPECT_EQ(backward(nansum(n)).get(n).to_vector<float>(), (std::vector<float>{1, 0, 1}));
  // Empty tensors and shapes: the variance of nothing is NaN, its norm 0.
  EXPECT_TRUE(std::isnan(var(zeros({0})).item()));
  EXPECT_EQ(norm(zeros({0})).item(), 0.0);
  EXPECT_EQ(norm(zeros({2, 0}), 2, {1}).shape(), (Shape{2}));
  EXPECT_EQ(var(ones({3, 4}), {-1}, 1, true).shape(), (Shape{3, 1}));
  EXPECT_EQ(logsumexp(ones({2, 3, 4}), {-1, 0}).shape(), (Shape{3}));
  EXPECT_EQ(nansum(zeros({0})).item(), 0.0);
  // The errors name the op, what it expected and what it got.
  expect_error<DTypeError>([] { var(tensor(std::vector<std::int64_t>{1, 2})); }, "var: expected a floating-point tensor, got i64");
  expect_error<ValueError>([] { norm(ones({2}), -1.0); }, "norm: expected p >= 0 or infinity, got p = -1");
  expect_error<ValueError>([] { norm(ones({2, 2}), "nuc"); }, "norm: expected p = \"fro\" or a number, got \"nuc\"");
  expect_error<ShapeError>([&] { norm(zeros({0}), inf); }, "norm: the infinity norm of an empty tensor");
  expect_error<ShapeError>([] { logsumexp(ones({2, 3}), {2}); }, "logsumexp:");
  expect_error<ShapeError>([] { prod(ones({2, 3}), -3); }, "prod:");
  expect_error<ShapeError>([] { rumus::std(ones({2, 3}), {1, -1}); }, "var: dim listed twice");
}

// Binary math: the C library's values where it has the function, PyTorch's special points, errors.
TEST(BinaryMath, ValuesSpecialPointsAndErrors) {
  const std::vector<double> av = {-2.5, -0.75, 0.0, 0.3, 1.75, 4.0}, bv = {0.7, -1.5, -2.0, 0.0, 0.4, -0.3};
  Tensor a = tensor(av).to(DType::f64), b = tensor(bv).to(DType::f64);
  auto check = [&](const char* name, const Tensor& got, double (*f)(double, double), std::size_t skip = 99) {
    auto g = got.to_vector<double>();
    for (std::size_t i = 0; i < av.size(); ++i)
      if (i != skip) EXPECT_NEAR(g[i], f(av[i], bv[i]), 1e-15) << name << "(" << av[i] << ", " << bv[i] << ")";
  };
  check("atan2", atan2(a, b), [](double y, double x) { return std::atan2(y, x); });
  check("hypot", hypot(a, b), [](double x, double y) { return std::hypot(x, y); });
  check("copysign", copysign(a, b), [](double x, double y) { return std::copysign(x, y); });
  check("fmod", fmod(a, b), [](double x, double y) { return std::fmod(x, y); }, 3);  // 0.3 / 0: NaN
  check("remainder", remainder(a, b),
        [](double x, double y) { return x - std::floor(x / y) * y; }, 3);
  EXPECT_EQ(atan2(zeros({1}), zeros({1})).item(), 0.0);
  EXPECT_EQ(copysign(ones({1}), tensor(std::vector<float>{-0.0f})).item(), -1.0);
  // Integers stay integers in fmod / remainder; the signs of C and Python.
  Tensor i = tensor(std::vector<std::int64_t>{-7, 7}), j = tensor(std::vector<std::int64_t>{3, -3});
  EXPECT_EQ(fmod(i, j).to_vector<std::int64_t>(), (std::vector<std::int64_t>{-1, 1}));
  EXPECT_EQ(remainder(i, j).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, -2}));
  EXPECT_EQ(remainder(i, 3.0).dtype(), DType::i64);
  EXPECT_EQ(remainder(i, 2.5).dtype(), DType::f32);
  // xlogy: 0 where x = 0, even at y = 0, unless y is NaN; x's gradient there is xlogy(0, y), as PyTorch's.
  Tensor x = tensor(std::vector<float>{0, 0, 2}).requires_grad_();
  Tensor y = tensor(std::vector<float>{0, NAN, 0.5f}).requires_grad_();
  auto v = xlogy(x, y).to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_FLOAT_EQ(v[2], 2 * std::log(0.5f));
  GradientStore g = backward(sum(xlogy(x, y).slice(0, 0, 1)));
  auto gx = g.get(x).to_vector<float>();
  EXPECT_EQ(gx[0], 0.0f);
  EXPECT_TRUE(std::isnan(gx[1]));
  EXPECT_EQ(gx[2], 0.0f);
  // clamp with min > max gives max; lerp reaches its end exactly.
  EXPECT_EQ(clamp(tensor(std::vector<float>{0.0f}), full({1}, 2.0), full({1}, 1.0)).item(), 1.0);
  EXPECT_EQ(lerp(full({1}, 0.1), full({1}, 0.7), 1.0).item(), full({1}, 0.7).item());
  expect_error<ValueError>([] { clamp(ones({2}), std::nullopt, std::nullopt); },
                           "clamp: expected at least one of min and max, got neither");
  expect_error<ValueError>([&] { fmod(i, zeros({2}, {.dtype = DType::i64})); }, "fmod: div: integer division by zero");
  expect_error<ShapeError>([] { atan2(ones({2}), ones({3})); }, "shapes [2] and [3]");
  // The method forms are the functions.
  EXPECT_EQ(a.atan2(b).to_vector<double>(), atan2(a, b).to_vector<double>());
  EXPECT_EQ(a.lerp(b, 0.25).to_vector<double>(), lerp(a, b, 0.25).to_vector<double>());
  EXPECT_EQ(a.clamp(b, std::nullopt).to_vector<double>(), clamp(a, b, std::nullopt).to_vector<double>());
  EXPECT_EQ(a.sin().to_vector<double>(), sin(a).to_vector<double>());
  EXPECT_EQ(a.var().item(), var(a).item());
}

// Integer sums are exact in i64 past f32's integers; integer division by zero is an error.
TEST_P(OpValuesOnEveryDevice, IntegerSumsAreExactInt64AndDivisionByZeroThrows) {
  const Device dev = GetParam();
  Tensor x = tensor(std::vector<std::int32_t>{16777217, 16777217, 3}).to(dev);  // past f32's exact integers
  Tensor s = sum(x);
  EXPECT_EQ(s.device(), dev);
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.item<std::int64_t>(), 33554437);
  EXPECT_EQ(sum(ones({300}, {.dtype = DType::u8, .device = dev})).item<std::int64_t>(), 300);
  expect_error<ValueError>([&] { div(x, zeros({}, {.dtype = DType::i32, .device = dev}), "trunc"); },
                           "div: integer division by zero");
}

// PyTorch habits on every device: ties split evenly, a 0-d f64 does not turn
// an f32 tensor into f64 (as in PyTorch), a fully ignored
// batch gives zero gradients, and the scalar forms run on the device's kernels.
TEST_P(OpValuesOnEveryDevice, TiesPromotionIgnoredTargetsAndScalarForms) {
  const Device dev = GetParam();
  Tensor a = tensor({1.0, 2.0, 3.0}).to(dev).requires_grad_(), b = tensor({1.0, 5.0, 3.0}).to(dev).requires_grad_();
  GradientStore g = backward(sum(maximum(a, b)) + sum(minimum(a, b)));
  EXPECT_TRUE(g.get(a).device() == dev);
  EXPECT_EQ(g.get(a).cpu().to_vector<float>(), (std::vector<float>{1.0f, 1.0f, 1.0f}));
  g = backward(sum(maximum(a, b)));
  EXPECT_EQ(g.get(a).cpu().to_vector<float>(), (std::vector<float>{0.5f, 0.0f, 0.5f}));
  EXPECT_EQ(g.get(b).cpu().to_vector<float>(), (std::vector<float>{0.5f, 1.0f, 0.5f}));

  Tensor scaled = ones({3}, {.device = dev}) * scalar_tensor(2.0, {.dtype = DType::f64, .device = dev});
  EXPECT_EQ(scaled.dtype(), DType::f32);
  EXPECT_TRUE(scaled.device() == dev);
  EXPECT_EQ(scaled.cpu().to_vector<float>(), (std::vector<float>{2, 2, 2}));

  Tensor logits = rand({3, 4}).to(dev).requires_grad_();
  Tensor loss = cross_entropy(logits, tensor(std::vector<std::int64_t>{-100, -100, -100}).to(dev));
  EXPECT_TRUE(std::isnan(loss.item()));
  g = backward(loss);
  EXPECT_EQ(g.get(logits).cpu().to_vector<float>(), std::vector<float>(12, 0.0f));

  Tensor x = tensor({1.0, -2.0, std::numeric_limits<double>::infinity(), 4.0}).to(dev);
  using B = std::vector<std::uint8_t>;
  EXPECT_EQ(le(x, 1.0).cpu().to_vector<std::uint8_t>(), (B{1, 1, 0, 0}));
  EXPECT_EQ(isinf(x).cpu().to_vector<std::uint8_t>(), (B{0, 0, 1, 0}));
  EXPECT_EQ(isfinite(x).cpu().to_vector<std::uint8_t>(), (B{1, 1, 0, 1}));
  EXPECT_EQ(masked_fill(x, isinf(x), 0.0).cpu().to_vector<float>(), (std::vector<float>{1, -2, 0, 4}));
  EXPECT_EQ(where(gt(x, 0.0), x, 0.5).device(), dev);
  auto [values, indices] = max(x.reshape({2, 2}), 1);
  EXPECT_EQ(indices.cpu().to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(values.cpu().to_vector<float>(), (std::vector<float>{1, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(unbind(x)[3].device(), dev);
}

RUMUS_DEVICE_SUITE(MatmulOnEveryDevice);

// Products against f64 on the CPU: shapes that are multiples of the GPU's
// tiles and ragged ones; {8, 2048, 8} and {5, 1500, 7} take its split-K path,
// {320, 8192, 320} its 16 slices for a long K; the long thin ones its 64 x 128
// and 128 x 64 tiles. Transposed operands are read in place.
TEST_P(MatmulOnEveryDevice, LargerShapesAndTransposes) {
  const Device dev = GetParam();
  for (auto [m, k, n] : {std::array<std::int64_t, 3>{64, 32, 64}, {128, 64, 128}, {33, 17, 65}, {1, 70, 3},
                         {8, 2048, 8}, {5, 1500, 7}, {320, 8192, 320}, {64, 8, 33800}, {33800, 8, 64}}) {
    const std::string what = "matmul " + std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n);
    Generator gen(5);
    Tensor a = rand({m, k}, {}, &gen), b = rand({k, n}, {}, &gen);
    Tensor want = matmul(a.to(DType::f64), b.to(DType::f64));
    expect_matches(matmul(a.to(dev), b.to(dev)), want, 1e-4, what);
    Tensor at = a.transpose(0, 1).contiguous().to(dev).transpose(0, 1);
    Tensor bt = b.transpose(0, 1).contiguous().to(dev).transpose(0, 1);
    expect_matches(matmul(at, bt), want, 1e-4, what + " of transposed operands");
  }
}

// The CPU GEMM's three ways to thread a product (src/backend/cpu/gemm.cpp):
// below 4 MFLOP on the calling thread alone (the team's thread count comes
// back afterwards), A B^T split by columns across the team (oneDNN threads
// it badly), the rest threaded by oneDNN. Each against f64, ragged shapes too.
TEST(CpuGemm, EachThreadingOfAProductMatchesF64AndKeepsTheTeam) {
  const int threads = num_threads();
  Generator gen(8);
  for (auto [m, k, n] : {std::array<std::int64_t, 3>{64, 512, 10}, {64, 784, 512}, {70, 300, 250}, {200, 96, 130},
                         {3, 5000, 700}}) {
    const std::string what = std::to_string(m) + " x " + std::to_string(k) + " x " + std::to_string(n);
    Tensor a = rand({m, k}, {}, &gen), b = rand({n, k}, {}, &gen);
    // B transposed (a linear layer's forward), and B dense.
    expect_matches(matmul(a, b.t()), matmul(a.to(DType::f64), b.t().to(DType::f64)), 1e-4, what + ", B transposed");
    EXPECT_EQ(num_threads(), threads) << what;
    Tensor bd = b.t().contiguous();
    expect_matches(matmul(a, bd), matmul(a.to(DType::f64), bd.to(DType::f64)), 1e-4, what);
    EXPECT_EQ(num_threads(), threads) << what;
  }
}

// linear's bias (in the GPU's GEMM epilogue) against f64 on the CPU: tiles
// that divide the shape (16-byte bias loads) and ragged ones, a bias at an odd
// offset, a strided bias (copied into C instead), f16, a batched input, the
// split-K path (bias added after the slices' sum), an empty K, and the gradients.
TEST_P(MatmulOnEveryDevice, LinearBiasMatchesTheF64Linear) {
  const Device dev = GetParam();
  Generator gen(7);
  struct Case {
    std::int64_t rows, in, out;
    int bias_kind;  // 0 dense, 1 at an odd offset, 2 strided
    DType dtype;
  };
  const Case cases[] = {{256, 64, 128, 0, DType::f32}, {37, 19, 45, 0, DType::f32}, {128, 64, 128, 1, DType::f32},
                        {70, 33, 50, 2, DType::f32},   {64, 32, 64, 0, DType::f16}, {6, 3000, 9, 0, DType::f32},
                        {12, 0, 20, 0, DType::f32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.in << " -> " << c.out << " bias " << c.bias_kind << " "
                                      << dtype_name(c.dtype));
    Tensor x0 = randn({c.rows / 2 > 0 ? 2 : 1, c.rows / 2, c.in}, {}, &gen), w0 = randn({c.out, c.in}, {}, &gen);
    Tensor store = randn({2 * c.out + 1}, {}, &gen), seed = randn({c.rows / 2 > 0 ? 2 : 1, c.rows / 2, c.out}, {}, &gen);
    auto bias_of = [&](const Tensor& t) {
      return c.bias_kind == 0 ? t.narrow(0, 0, c.out) : c.bias_kind == 1 ? t.narrow(0, 1, c.out)
                                                                         : t.narrow(0, 0, 2 * c.out).view({c.out, 2}).select(1, 0);
    };
    // The reference takes the inputs rounded to the case's dtype, in f64.
    auto run = [&](Device where, DType dt) {
      auto leaf = [&](const Tensor& t) { return t.to(c.dtype).to(dt).to(where).detach().requires_grad_(); };
      Tensor x = leaf(x0), w = leaf(w0), s = leaf(store);
      Tensor y = linear(x, w, bias_of(s));
      GradientStore g = backward(y, seed.to(c.dtype).to(dt).to(where));
      std::vector<Tensor> r;
      for (const Tensor& t : {y, g.get(x), g.get(w), g.get(s)}) r.push_back(t.cpu().to(DType::f64));
      return r;
    };
    const std::vector<Tensor> got = run(dev, c.dtype), want = run(Device::cpu(), DType::f64);
    const double tol = c.dtype == DType::f16 ? 5e-2 : 1e-3;
    const char* names[] = {"out", "grad x", "grad weight", "grad bias"};
    for (int i = 0; i < 4; ++i)
      if (want[std::size_t(i)].numel() > 0) expect_matches(got[std::size_t(i)], want[std::size_t(i)], tol, names[i]);
  }
}

RUMUS_DEVICE_SUITE(InPlaceOnEveryDevice);

// Each in-place form writes what its out-of-place op returns into the tensor
// it is called on, a strided view included, and returns that tensor.
TEST_P(InPlaceOnEveryDevice, FormsWriteTheOutOfPlaceResult) {
  const Device dev = GetParam();
  Generator gen(3);
  const Tensor any = (rand({4, 6}, {}, &gen) * 4.0 - 2.0).to(dev), pos = (rand({4, 6}, {}, &gen) + 0.5).to(dev);
  const Tensor row = (rand({6}, {}, &gen) + 0.5).to(dev), mask = gt(rand({4, 6}, {}, &gen), 0.5).to(dev);
  using InPlace = std::function<Tensor&(Tensor&)>;
  using OutOfPlace = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    Tensor x;
    InPlace in_place;
    OutOfPlace out_of_place;
  };
  const Case cases[] = {
      {"sub_", any, [&](Tensor& t) -> Tensor& { return t.sub_(row, 0.5); }, [&](const Tensor& t) { return add(t, row, -0.5); }},
      {"sub_ scalar", any, [](Tensor& t) -> Tensor& { return t.sub_(1.5); }, [](const Tensor& t) { return sub(t, 1.5); }},
      {"div_", any, [&](Tensor& t) -> Tensor& { return t.div_(row); }, [&](const Tensor& t) { return div(t, row); }},
      {"div_ scalar", any, [](Tensor& t) -> Tensor& { return t.div_(4.0); }, [](const Tensor& t) { return div(t, 4.0); }},
      {"pow_", pos, [](Tensor& t) -> Tensor& { return t.pow_(1.5); }, [](const Tensor& t) { return pow(t, 1.5); }},
      {"pow_ tensor", pos, [&](Tensor& t) -> Tensor& { return t.pow_(row); }, [&](const Tensor& t) { return pow(t, row); }},
      {"clamp_", any, [](Tensor& t) -> Tensor& { return t.clamp_(-0.5, 1.0); }, [](const Tensor& t) { return clamp(t, -0.5, 1.0); }},
      {"clamp_min_", any, [](Tensor& t) -> Tensor& { return t.clamp_min_(0.25); }, [](const Tensor& t) { return maximum(t, full({}, 0.25, {.device = t.device()})); }},
      {"clamp_max_", any, [](Tensor& t) -> Tensor& { return t.clamp_max_(0.25); }, [](const Tensor& t) { return minimum(t, full({}, 0.25, {.device = t.device()})); }},
      {"masked_fill_", any, [&](Tensor& t) -> Tensor& { return t.masked_fill_(mask, -7.0); }, [&](const Tensor& t) { return masked_fill(t, mask, -7.0); }},
      {"lerp_", any, [&](Tensor& t) -> Tensor& { return t.lerp_(row, 0.25); }, [&](const Tensor& t) { return lerp(t, row, 0.25); }},
      {"lerp_ tensor", any, [&](Tensor& t) -> Tensor& { return t.lerp_(row, pos); }, [&](const Tensor& t) { return lerp(t, row, pos); }},
      {"neg_", any, [](Tensor& t) -> Tensor& { return t.neg_(); }, [](const Tensor& t) { return neg(t); }},
      {"abs_", any, [](Tensor& t) -> Tensor& { return t.abs_(); }, [](const Tensor& t) { return abs(t); }},
      {"exp_", any, [](Tensor& t) -> Tensor& { return t.exp_(); }, [](const Tensor& t) { return exp(t); }},
      {"log_", pos, [](Tensor& t) -> Tensor& { return t.log_(); }, [](const Tensor& t) { return log(t); }},
      {"sqrt_", pos, [](Tensor& t) -> Tensor& { return t.sqrt_(); }, [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt_", pos, [](Tensor& t) -> Tensor& { return t.rsqrt_(); }, [](const Tensor& t) { return rsqrt(t); }},
      {"reciprocal_", pos, [](Tensor& t) -> Tensor& { return t.reciprocal_(); }, [](const Tensor& t) { return reciprocal(t); }},
      {"floor_", any, [](Tensor& t) -> Tensor& { return t.floor_(); }, [](const Tensor& t) { return floor(t); }},
      {"ceil_", any, [](Tensor& t) -> Tensor& { return t.ceil_(); }, [](const Tensor& t) { return ceil(t); }},
      {"round_", any, [](Tensor& t) -> Tensor& { return t.round_(); }, [](const Tensor& t) { return round(t); }},
      {"trunc_", any, [](Tensor& t) -> Tensor& { return t.trunc_(); }, [](const Tensor& t) { return trunc(t); }},
      {"relu_", any, [](Tensor& t) -> Tensor& { return t.relu_(); }, [](const Tensor& t) { return relu(t); }},
      {"sigmoid_", any, [](Tensor& t) -> Tensor& { return t.sigmoid_(); }, [](const Tensor& t) { return sigmoid(t); }},
      {"tanh_", any, [](Tensor& t) -> Tensor& { return t.tanh_(); }, [](const Tensor& t) { return tanh(t); }},
  };
  for (const Case& c : cases) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (strided ? " on a transposed view" : ""));
      // The same layout on both sides: strided views may take another loop than contiguous tensors.
      auto fresh = [&] { return strided ? c.x.t().contiguous().t() : c.x.clone(); };
      Tensor t = fresh();
      const auto storage = t.storage_ptr();
      Tensor& r = c.in_place(t);
      EXPECT_EQ(&r, &t);
      EXPECT_EQ(t.storage_ptr(), storage);
      EXPECT_EQ(t.to_vector<double>(), c.out_of_place(fresh()).to_vector<double>());
    }
  }
  // Integers keep their dtype where the result is an integer too.
  Tensor i = tensor(std::vector<std::int64_t>{-3, 5, 2}).to(dev);
  i.neg_().masked_fill_(tensor(std::vector<std::uint8_t>{0, 1, 0}).to(dev), 7);
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 7, -2}));
}

TEST(InPlace, FormsNameTheirErrors) {
  Tensor i = tensor(std::vector<std::int64_t>{1, 2});
  expect_error<DTypeError>([&] { i.div_(2.0); },
                           "div_: the result is f32, which cannot be written into a i64 tensor in place");
  expect_error<ShapeError>([] { zeros({3}).sub_(ones({2, 3})); },
                           "sub_: the result's shape [2, 3] (operands broadcast) differs from the destination's [3]");
  Tensor p = ones({2}).requires_grad_();
  expect_error<AutogradError>([&] { p.relu_(); }, "relu_: in-place write to a tensor that requires grad while recording");
  {
    NoGradGuard no_grad;  // as an optimizer writes its parameters
    p.sub_(ones({2}), 0.5).sqrt_();
  }
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{std::sqrt(0.5f), std::sqrt(0.5f)}));
}

namespace {

// bool, i8 and i16 against PyTorch (tests/torch_reference/data/dtypes.txt, a
// line per case: name, dtype, values), on every device.
RUMUS_DEVICE_SUITE(DTypesOnEveryDevice);

using DTypeCase = std::function<Tensor(Device)>;

std::map<std::string, DTypeCase> dtype_cases() {
  auto on = [](std::vector<double> v, DType dt) {
    return [v, dt](Device d) { return tensor(v, {std::int64_t(v.size())}).to(dt).to(d); };
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto u8 = on({0, 1, 200, 255}, DType::u8), i8 = on({-128, -1, 100, 127}, DType::i8),
       i16 = on({-32768, -2, 300, 32767}, DType::i16), m = on({1, 0, 1, 0}, DType::boolean),
       m2 = on({1, 1, 0, 0}, DType::boolean), f = on({0.0, -1.5, nan, 2.0}, DType::f32);
  auto scalar = [](double v, DType dt, Device d) { return full({}, v, {.dtype = dt, .device = d}); };
  return {
      {"u8_add_i8", [=](Device d) { return u8(d) + i8(d); }},
      {"i8_add_i8", [=](Device d) { return i8(d) + i8(d); }},
      {"i16_mul_i16", [=](Device d) { return i16(d) * i16(d); }},
      {"i8_neg", [=](Device d) { return -i8(d); }},
      {"bool_add_i8", [=](Device d) { return m(d) + i8(d); }},
      {"bool_add_int", [=](Device d) { return m(d) + 2; }},
      {"bool_mul_float", [=](Device d) { return m(d) * 2.5; }},
      {"bool_add_bool", [=](Device d) { return m(d) + m2(d); }},
      {"bool_mul_bool", [=](Device d) { return m(d) * m2(d); }},
      {"bool_div_bool", [=](Device d) { return m(d) / m2(d); }},
      {"i16_add_f64_scalar", [=](Device d) { return i16(d) + scalar(0.5, DType::f64, d); }},
      {"i8_add_i64_scalar", [=](Device d) { return i8(d) + scalar(1, DType::i64, d); }},
      {"bool_add_i32_scalar", [=](Device d) { return m(d) + scalar(3, DType::i32, d); }},
      {"eq_i8", [=](Device d) { return eq(i8(d), -1.0); }},
      {"mask_eq_2", [=](Device d) { return eq(m(d), 2.0); }},
      {"lt_f", [=](Device d) { return lt(f(d), 1.0); }},
      {"logical_and_f_i16", [=](Device d) { return logical_and(f(d), i16(d)); }},
      {"logical_or_bool_f", [=](Device d) { return logical_or(m(d), f(d)); }},
      {"logical_xor", [=](Device d) { return logical_xor(m(d), m2(d)); }},
      {"logical_not_f", [=](Device d) { return logical_not(f(d)); }},
      {"and_op", [=](Device d) { return m(d) & m2(d); }},
      {"or_op", [=](Device d) { return m(d) | m2(d); }},
      {"xor_op", [=](Device d) { return m(d) ^ m2(d); }},
      {"not_op", [=](Device d) { return ~m(d); }},
      {"sum_bool", [=](Device d) { return sum(m(d)); }},
      {"sum_i8", [=](Device d) { return sum(i8(d)); }},
      {"any_u8", [=](Device d) { return any(u8(d)); }},
      {"all_f", [=](Device d) { return all(f(d)); }},
      {"any_bool_dim", [=](Device d) { return any(stack({m(d), m2(d)}), 0); }},
      {"cumsum_bool", [=](Device d) { return cumsum(m(d), 0); }},
      {"where_bool", [=](Device d) { return where(m(d), i8(d), i16(d)); }},
      {"masked_fill_bool", [=](Device d) { return masked_fill(i16(d), m(d), 7); }},
      {"masked_select_bool", [=](Device d) { return masked_select(i8(d), m(d)); }},
      {"cast_f_bool", [=](Device d) { return f(d).to(DType::boolean); }},
      {"cast_i16_i8", [=](Device d) { return i16(d).to(DType::i8); }},
      {"cast_bool_i16", [=](Device d) { return m(d).to(DType::i16); }},
      {"cast_i8_f32", [=](Device d) { return i8(d).to(DType::f32); }},
      {"maximum_i8", [=](Device d) { return maximum(i8(d), -i8(d)); }},
      {"isnan_i16", [=](Device d) { return isnan(i16(d)); }},
      {"abs_i8", [=](Device d) { return abs(i8(d)); }},
      {"clamp_i16", [=](Device d) { return clamp(i16(d), -5, 100); }},
      {"clamp_i8_fractional", [=](Device d) { return clamp(i8(d), -1.5, 2.5); }},
      {"clamp_min_u8", [=](Device d) { return clamp(u8(d), 3, std::numeric_limits<double>::infinity()); }},
  };
}

TEST_P(DTypesOnEveryDevice, PromoteWrapAndMaskAsPyTorch) {
  const Device dev = GetParam();
  const auto cases = dtype_cases();
  std::ifstream in(std::string(RUMUS_TORCH_REFERENCE_DIR) + "/dtypes.txt");
  ASSERT_TRUE(in) << "missing dtypes.txt";
  std::string line;
  std::size_t checked = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, dtype;
    fields >> name >> dtype;
    std::vector<double> want;
    for (std::string v; fields >> v;) want.push_back(std::strtod(v.c_str(), nullptr));
    const auto c = cases.find(name);
    ASSERT_NE(c, cases.end()) << "no rumus form of the case " << name;
    const Tensor got = c->second(dev);
    EXPECT_EQ(dtype_name(got.dtype()), dtype) << name;
    EXPECT_EQ(got.device(), dev) << name;
    ASSERT_EQ(got.numel(), std::int64_t(want.size())) << name;
    const std::vector<double> g = got.to_vector<double>();
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(g[i] == want[i] || (std::isnan(g[i]) && std::isnan(want[i])))
          << name << " element " << i << ": " << g[i] << " on " << dev.str() << ", PyTorch " << want[i];
    ++checked;
  }
  EXPECT_EQ(checked, cases.size()) << "cases without a PyTorch line";
}

// Conversions into the narrow integers saturate (NaN gives 0) where a value
// does not fit, as every float-to-integer conversion of rumus does; between
// integers they wrap, as in PyTorch. Into bool, nonzero (NaN too) is true.
TEST_P(DTypesOnEveryDevice, ConversionsSaturateFromFloatsAndWrapBetweenIntegers) {
  const Device dev = GetParam();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> wide = {1e9, -1e9, nan, 127.9, -128.9, 300, -40000, 0.5};
  for (DType from : {DType::f32, DType::f64}) {
    const Tensor x = tensor(wide, {8}).to(from).to(dev);
    EXPECT_EQ(x.to(DType::i8).to_vector<std::int8_t>(),
              (std::vector<std::int8_t>{127, -128, 0, 127, -128, 127, -128, 0}))
        << dtype_name(from);
    EXPECT_EQ(x.to(DType::i16).to_vector<std::int16_t>(),
              (std::vector<std::int16_t>{32767, -32768, 0, 127, -128, 300, -32768, 0}))
        << dtype_name(from);
    EXPECT_EQ(x.to(DType::boolean).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{1, 1, 1, 1, 1, 1, 1, 1}));
  }
  const Tensor ints = tensor(std::vector<std::int32_t>{200, 40000, -129, 65535}).to(dev);
  EXPECT_EQ(ints.to(DType::i8).to_vector<std::int8_t>(), (std::vector<std::int8_t>{-56, 64, 127, -1}));
  EXPECT_EQ(ints.to(DType::i16).to_vector<std::int16_t>(), (std::vector<std::int16_t>{200, -25536, -129, -1}));
  // A filled value is a value, not arithmetic: it saturates.
  EXPECT_EQ(full({2}, 300, {.dtype = DType::i8, .device = dev}).to_vector<std::int8_t>(),
            (std::vector<std::int8_t>{127, 127}));
  EXPECT_EQ(full({1}, -1e6, {.dtype = DType::i16, .device = dev}).item(), -32768);
  EXPECT_EQ(full({1}, 0.25, {.dtype = DType::boolean, .device = dev}).item(), 1);
  // Views and copies keep the dtypes: a transposed narrow integer copies exactly.
  const Tensor t = tensor(std::vector<double>{-3, 7, -128, 127, 0, 5}, {2, 3}).to(DType::i8).to(dev);
  EXPECT_EQ(t.transpose(0, 1).contiguous().to_vector<std::int8_t>(), (std::vector<std::int8_t>{-3, 127, 7, 0, -128, 5}));
}

TEST_P(DTypesOnEveryDevice, MasksOfBoolAndU8SelectAlike) {
  const Device dev = GetParam();
  const Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}).to(dev);
  const Tensor b = gt(x, 2.5), u = b.to(DType::u8);
  ASSERT_EQ(b.dtype(), DType::boolean);
  for (const Tensor& mask : {b, u}) {
    const std::string what = std::string(dtype_name(mask.dtype())) + " mask";
    expect_matches(where(mask, x, -x), tensor(std::vector<double>{-1, -2, 3, 4, 5, 6}, {2, 3}), 0, what);
    expect_matches(masked_fill(x, mask, 0), tensor(std::vector<double>{1, 2, 0, 0, 0, 0}, {2, 3}), 0, what);
    expect_matches(masked_select(x, mask), tensor(std::vector<double>{3, 4, 5, 6}), 0, what);
    expect_matches(x.index({mask}), tensor(std::vector<double>{3, 4, 5, 6}), 0, what);
  }
  EXPECT_EQ(sum(b).item(), 4);
  EXPECT_EQ(sum(b).dtype(), DType::i64);
}

TEST_P(DTypesOnEveryDevice, BoolArithmeticRefusesWhatPyTorchRefuses) {
  const Device dev = GetParam();
  const Tensor m = gt(tensor(std::vector<double>{1, -1}).to(dev), 0.0);
  const Tensor i = tensor(std::vector<std::int32_t>{1, 2}).to(dev);
  expect_error<DTypeError>([&] { sub(m, m); }, "sub: subtraction with a bool tensor is not supported");
  expect_error<DTypeError>([&] { sub(i, m); }, "sub: subtraction with a bool tensor is not supported");
  expect_error<DTypeError>([&] { sub(m, 1); }, "sub: subtraction with a bool tensor is not supported");
  expect_error<DTypeError>([&] { sub(1, m); }, "sub: subtraction with a bool tensor is not supported");
  expect_error<DTypeError>([&] { neg(m); }, "neg: negation of a bool tensor is not supported");
  expect_error<DTypeError>([&] { i & i; }, "bitwise_and: expected bool tensors (bitwise operations on integers "
                                           "are not implemented), got i32 and i32");
  expect_error<DTypeError>([&] { ~i; }, "bitwise_not: expected bool tensors");
  expect_error<DTypeError>([&] { where(i, i, i); },
                           "where: expected a bool condition (as comparisons return; u8 is read as bool too), got i32");
  expect_error<DTypeError>([&] { masked_fill(i.to(DType::f32), i.to(DType::i16), 0); },
                           "masked_fill: expected a bool mask");
}

TEST(DTypes, NamesItemsAndPrinting) {
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_size(DType::i8), 1u);
  EXPECT_EQ(dtype_size(DType::i16), 2u);
  const Tensor m = gt(tensor({1.0, -1.0}), 0.0);
  EXPECT_EQ(to_string(m), "tensor([True, False], shape=[2], dtype=bool, device=cpu)");
  EXPECT_EQ(m.slice(0, 0, 1).item(), 1.0);
  EXPECT_EQ(full({}, -7, {.dtype = DType::i8}).item(), -7.0);
  EXPECT_EQ(full({}, -300, {.dtype = DType::i16}).item(), -300.0);
  EXPECT_EQ(to_string(full({2}, -3, {.dtype = DType::i16})), "tensor([-3, -3], shape=[2], dtype=i16, device=cpu)");
}

}  // namespace
