// Op table gradchecks (f64, finite differences) and the ops' error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.hpp"

#include "gradcheck.hpp"

using namespace rumus;
using namespace rumus::testing;

namespace {

class GradCheck : public ::testing::TestWithParam<std::tuple<std::size_t, Layouting>> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  auto [index, how] = GetParam();
  const OpCase& op = op_table()[index];
  for (const auto& s : op.shapes)
    if (s.empty() || (how == Layouting::transposed && s.size() < 2)) GTEST_SKIP() << "layout needs more dims";
  gradcheck(op, how);
}

INSTANTIATE_TEST_SUITE_P(
    OpTable, GradCheck,
    ::testing::Combine(::testing::Range<std::size_t>(0, op_table().size()),
                       ::testing::Values(Layouting::contiguous, Layouting::transposed, Layouting::sliced,
                                         Layouting::broadcast)),
    [](const auto& info) {
      return op_table()[std::get<0>(info.param)].name + "_" + layouting_name(std::get<1>(info.param));
    });


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
  expect_error<DTypeError>([] { where(zeros({2}), zeros({2}), zeros({2})); }, "where: expected a u8 condition");
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
  EXPECT_EQ(max(x, 1).to_vector<float>(), (std::vector<float>{5, 6}));
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

TEST(OpValues, TypePromotion) {
  Tensor i = tensor(std::vector<std::int64_t>{1, 2, 3});
  Tensor f = tensor({0.5, 0.5, 0.5});
  Tensor r = add(i, f);
  EXPECT_EQ(r.dtype(), DType::f32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{1.5, 2.5, 3.5}));
  EXPECT_EQ(add(i, 1.0).dtype(), DType::i64);
  EXPECT_EQ(add(f, f.to(DType::f64)).dtype(), DType::f64);
}

TEST(OpErrors, IntegerDivisionByZeroThrows) {
  for (DType dt : {DType::i32, DType::i64, DType::u8}) {
    Tensor x = full({3}, 7, {.dtype = dt});
    Tensor z = tensor(std::vector<double>{1, 0, 2}).to(dt);
    expect_error<ValueError>([&] { div(x, z); }, "div: integer division by zero");
    expect_error<ValueError>([&] { div(x, zeros({}, {.dtype = dt})); }, "div: integer division by zero");
    expect_error<ValueError>([&] { div(x, 0.0); }, "div: integer division by zero");
  }
  // Floats keep IEEE results.
  EXPECT_TRUE(std::isinf(div(ones({1}), 0.0).item()));
}

TEST(OpValues, IntegerDivisionWrapsAtTheMinimum) {
  Tensor a = tensor(std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), 7, -7});
  Tensor b = tensor(std::vector<std::int32_t>{-1, -2, 2});
  EXPECT_EQ(div(a, b).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min(), -3, -3}));
  Tensor c = tensor(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
  EXPECT_EQ(div(c, -1.0).item<std::int64_t>(), std::numeric_limits<std::int64_t>::min());
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
