// Reordering, indexing, scans and sorts: error cases, and what each device
// computes against loops written here (values against PyTorch are in
// test_torch_reference, gradients in the op table).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "devices.hpp"
#include "expect_error.hpp"

using namespace rumus;
using rumus::testing::expect_error;
using rumus::testing::test_devices;

namespace {

Tensor i64(std::vector<std::int64_t> v, Shape s = {}) {
  if (s.empty()) s = {std::int64_t(v.size())};
  return tensor(v, s);
}

// ---- errors ----

TEST(ShapeOpErrors, Reordering) {
  expect_error<ShapeError>([] { flip(zeros({2, 3}), {1, -1}); }, "flip: dim 1 appears more than once in [1, -1]");
  expect_error<ShapeError>([] { roll(zeros({2, 3}), {1, 2}); }, "roll: expected one shift without dims, got [1, 2]");
  expect_error<ShapeError>([] { roll(zeros({2, 3}), {1}, {0, 1}); },
                           "roll: expected as many shifts as dims, got shifts [1] and dims [0, 1]");
  expect_error<ShapeError>([] { repeat(zeros({2, 3}), {2}); },
                           "repeat: expected at least 2 repeats for shape [2, 3], got [2]");
  expect_error<ShapeError>([] { repeat(zeros({2}), {-1}); }, "repeat: expected repeats of at least 0, got [-1]");
  expect_error<ShapeError>([] { repeat_interleave(zeros({2}), -2); },
                           "repeat_interleave: expected repeats of at least 0, got -2");
  expect_error<ShapeError>([] { repeat_interleave(zeros({3}), i64({1, 2}), 0); },
                           "repeat_interleave: expected 3 repeats (one per element along dim), got 2");
  expect_error<DTypeError>([] { repeat_interleave(zeros({2}), zeros({2}), 0); },
                           "repeat_interleave: expected i64 or i32 repeats, got f32");
  expect_error<ShapeError>([] { movedim(zeros({2, 3, 4}), {0, 1}, {2}); },
                           "movedim: expected as many source as destination dims, got [0, 1] and [2]");
  expect_error<ShapeError>([] { movedim(zeros({2, 3, 4}), {0, 0}, {1, 2}); }, "movedim: dim 0 appears more than once");
  expect_error<ShapeError>([] { tril(zeros({3})); }, "tril: expected a tensor of at least 2 dims, got shape [3]");
  expect_error<ShapeError>([] { triu(zeros({})); }, "triu: expected a tensor of at least 2 dims, got shape []");
  expect_error<ShapeError>([] { diagonal(zeros({3, 3}), 0, 1, -1); }, "diagonal: expected two different dims, got 1 and 1");
  expect_error<ShapeError>([] { diagonal(zeros({3})); }, "diagonal: expected a tensor of at least 2 dims, got shape [3]");
  expect_error<ShapeError>([] { as_strided(zeros({3, 4}), {2, 3}, {4, 2}, 5); },
                           "as_strided: size [2, 3], stride [4, 2] and storage offset 5 reach element 13, past the "
                           "storage's 12 elements");
  expect_error<ShapeError>([] { as_strided(zeros({3, 4}), {2, 3}, {1}); },
                           "as_strided: expected as many strides as sizes, got size [2, 3] and stride [1]");
  expect_error<ShapeError>([] { as_strided(zeros({3, 4}), {2}, {-1}); }, "as_strided: expected sizes and strides of at least 0");
}

TEST(ShapeOpErrors, Indexing) {
  expect_error<ShapeError>([] { index_select(zeros({4, 3}), 0, i64({1, 4})); },
                           "index_select: index 4 is out of range for a dim of size 4");
  expect_error<ShapeError>([] { index_select(zeros({4, 3}), 1, i64({-1})); },
                           "index_select: index -1 is out of range for a dim of size 3");
  expect_error<DTypeError>([] { index_select(zeros({4, 3}), 0, zeros({2})); },
                           "index_select: expected an i64 or i32 index, got f32");
  expect_error<ShapeError>([] { index_select(zeros({4, 3}), 0, i64({0, 1}, {1, 2})); },
                           "index_select: expected a 1-D index, got shape [1, 2]");
  expect_error<ShapeError>([] { scatter(zeros({3, 4}), 1, i64({0, 7}, {1, 2}), ones({1, 2})); },
                           "scatter: index 7 is out of range for a dim of size 4");
  expect_error<ShapeError>([] { scatter(zeros({3, 4}), 1, i64({0, 1}, {2}), 1.0); },
                           "scatter: expected an index of 2 dims as self [3, 4], got [2]");
  expect_error<ShapeError>([] { scatter(zeros({3, 4}), 1, i64({0, 1, 2}, {1, 3}), ones({1, 2})); },
                           "scatter: index [1, 3] is larger than src [1, 2] in dim 1");
  expect_error<DTypeError>([] { scatter(zeros({3, 4}), 1, i64({0}, {1, 1}), ones({1, 1}, {.dtype = DType::f64})); },
                           "scatter: expected src of self's dtype f32, got f64");
  expect_error<ShapeError>([] { index_add(zeros({4, 3}), 0, i64({0, 4}), ones({2, 3})); },
                           "index_add: index 4 is out of range for a dim of size 4");
  expect_error<ShapeError>([] { index_add(zeros({4, 3}), 0, i64({0, 1}), ones({2, 2})); },
                           "index_add: expected source of shape [2, 3] (self [4, 3] with the index's length 2 at dim 0), got [2, 2]");
  expect_error<ShapeError>([] { index_copy(zeros({4, 3}), 1, i64({0, 3}), ones({4, 2})); },
                           "index_copy: index 3 is out of range for a dim of size 3");
  expect_error<ShapeError>([] { index_copy(zeros({4, 3}), 0, i64({0, 1}), ones({2, 2})); },
                           "index_copy: expected source of shape [2, 3] (self [4, 3] with the index's length 2 at dim 0), got [2, 2]");
  expect_error<DTypeError>([] { index_copy(zeros({4, 3}), 0, i64({0}), ones({1, 3}, {.dtype = DType::f64})); },
                           "index_copy: expected source of self's dtype f32, got f64");
  expect_error<DTypeError>([] { index_fill(zeros({4, 3}), 0, zeros({1}), 1.0); },
                           "index_fill: expected an i64 or i32 index, got f32");
  expect_error<ShapeError>([] { index_fill(zeros({4, 3}), 2, i64({0}), 1.0); }, "index_fill");
  expect_error<ShapeError>([] { index_fill(zeros({4, 3}), 0, i64({0, 1}, {1, 2}), 1.0); },
                           "index_fill: expected a 1-D index, got shape [1, 2]");
  expect_error<DTypeError>([] { masked_select(zeros({2, 3}), zeros({2, 3})); },
                           "masked_select: expected a bool mask (as comparisons return; u8 is read as bool too), got f32");
  expect_error<ShapeError>([] { masked_select(zeros({2, 3}), ones({4}).to(DType::u8)); }, "masked_select");
  expect_error<ShapeError>([] { take_along_dim(zeros({2, 3}), i64({3}, {1, 1}), 1); },
                           "take_along_dim: index 3 is out of range for a dim of size 3");
  expect_error<ShapeError>([] { take_along_dim(zeros({2, 3}), i64({6})); },
                           "take_along_dim: index 6 is out of range for a dim of size 6");
  expect_error<ShapeError>([] { take_along_dim(zeros({2, 3}), i64({0}), 1); },
                           "take_along_dim: expected indices of input's 2 dims, got shape [1] for input [2, 3]");
  expect_error<DTypeError>([] { take_along_dim(zeros({2, 3}), zeros({2, 3}), 1); },
                           "take_along_dim: expected i64 indices, got f32");
}

// On a GPU the gather kernels check the indices and the error comes at the
// next wait, naming the kernel and the bad index (docs/ARCHITECTURE.md).
TEST(ShapeOpErrors, IndexOutOfRangeOnVulkan) {
  REQUIRE_VULKAN();
  const Device gpu = rumus::testing::kGpu;
  expect_error<ShapeError>([&] { index_select(zeros({4, 3}, {.device = gpu}), 0, i64({1, 7}).to(gpu)).cpu(); },
                           "gather: index 7 is out of range for a dim of size 4");
  expect_error<ShapeError>([&] { take_along_dim(zeros({2, 3}, {.device = gpu}), i64({0, 5}, {1, 2}).to(gpu), 1).cpu(); },
                           "gather: index 5 is out of range for a dim of size 3");
  expect_error<ShapeError>([&] { scatter(zeros({2, 3}, {.device = gpu}), 1, i64({-1}, {1, 1}).to(gpu), 1.0).cpu(); },
                           "scatter_add: index -1 is out of range for a dim of size 3");
}

TEST(ShapeOpErrors, SortsAndScans) {
  expect_error<ShapeError>([] { topk(zeros({2, 3}), 4); }, "topk: k (4) is out of range for dim 1 of size 3");
  expect_error<ShapeError>([] { topk(zeros({2, 3}), -1, 0); }, "topk: k (-1) is out of range for dim 0 of size 2");
  expect_error<ShapeError>([] { kthvalue(zeros({2, 3}), 0); },
                           "kthvalue: k (0) is out of range for dim 1 of size 3 (k counts from 1)");
  expect_error<ShapeError>([] { sort(zeros({2, 3}), 2); }, "sort");
  expect_error<ShapeError>([] { cumsum(zeros({2, 3}), -3); }, "cumsum");
  expect_error<ShapeError>([] { cumprod(zeros({2, 3}), 2); }, "cumprod");
}

// ---- semantics, on every device ----

// Values drawn from a few numbers, so rows have many ties, with some NaN.
std::vector<float> tied_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> v(n);
  for (auto& x : v) {
    const int p = pick(rng);
    x = p == 9 ? std::numeric_limits<float>::quiet_NaN() : float(p - 4) * 0.5f;
  }
  return v;
}

// A stable sort of one row by value with NaN the largest: the order PyTorch's stable sort gives.
std::vector<std::int64_t> stable_order(const float* row, std::int64_t n, bool descending) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
    if (na || nb) return descending ? na && !nb : nb && !na;
    return descending ? row[a] > row[b] : row[a] < row[b];
  });
  return order;
}

// Rows within one shared-memory block, longer than one, and longer than two
// (global passes too), none a power of two, with ties and NaN.
void expect_stable_sort(std::int64_t rows, std::int64_t n, Device dev, bool descending) {
  const std::vector<float> v = tied_values(std::size_t(rows * n), std::uint64_t(5 + n));
  // Sorted along dim 0 of the transposed view: the same rows, moved last and back.
  Tensor x = tensor(v, {rows, n}).to(dev).t();
  auto [values, indices] = sort(x, 0, descending);
  ASSERT_EQ(indices.shape(), (Shape{n, rows}));
  const std::vector<float> got_v = values.t().contiguous().to_vector<float>();
  const std::vector<std::int64_t> got_i = indices.t().contiguous().to_vector<std::int64_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::vector<std::int64_t> want = stable_order(v.data() + r * n, n, descending);
    for (std::int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(got_i[std::size_t(r * n + j)], want[std::size_t(j)]) << dev.str() << " row " << r << " at " << j;
      const float w = v[std::size_t(r * n + want[std::size_t(j)])], g = got_v[std::size_t(r * n + j)];
      ASSERT_TRUE(std::isnan(w) ? std::isnan(g) : g == w) << dev.str() << " row " << r << " at " << j;
    }
  }
  Tensor order = argsort(x, 0, descending);
  EXPECT_EQ(order.to_vector<std::int64_t>(), indices.to_vector<std::int64_t>()) << dev.str();
}

RUMUS_DEVICE_SUITE(SortOnEveryDevice);

TEST_P(SortOnEveryDevice, StableWithTiesAndNaN) {
  const Device dev = GetParam();
  for (bool descending : {false, true}) {
    expect_stable_sort(4, 37, dev, descending);
    expect_stable_sort(3, 1000, dev, descending);
    expect_stable_sort(2, 2500, dev, descending);
  }
}

// Rows long enough for the CPU's radix sort, in every dtype, with -0 and +0
// (equal, so kept in order), both infinities, NaN and negatives of several
// magnitudes: the order of a stable comparison sort of the stored values.
TEST_P(SortOnEveryDevice, LongRowsOfEveryDTypeSortStably) {
  std::mt19937_64 rng(33);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> special = {-0.0, 0.0, inf, -inf, nan, -1e-30, 1e-30, -3e5, 3e5, -1.5, 1.5};
  std::uniform_int_distribution<std::size_t> pick(0, special.size() + 2);
  std::uniform_int_distribution<int> small(-100, 100);
  constexpr std::int64_t rows = 2, n = 1500;
  std::vector<double> v(std::size_t(rows * n));
  for (double& x : v) {
    const std::size_t p = pick(rng);
    x = p < special.size() ? special[p] : double(small(rng));
  }
  const Device dev = GetParam();
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::i8,
                   DType::i16, DType::boolean})
    for (bool descending : {false, true}) {
      // The wide integers' case above covers GPUs; the narrow ones and bool run here.
      if ((dt == DType::i32 || dt == DType::i64 || dt == DType::u8) && !dev.is_cpu()) continue;
      // Integers take the small values only (u8 their absolute values).
      std::vector<double> w = v;
      if (!is_floating(dt))
        for (double& x : w) x = std::isfinite(x) && std::abs(x) <= 100 ? std::trunc(dt == DType::u8 ? std::abs(x) : x) : 7;
      Tensor x = tensor(w, {rows, n}).to(dt);
      const std::vector<double> stored = x.to(DType::f64).to_vector<double>();
      const std::vector<std::int64_t> got = std::get<1>(sort(x.to(dev), 1, descending)).to_vector<std::int64_t>();
      for (std::int64_t r = 0; r < rows; ++r) {
        std::vector<float> row(stored.begin() + r * n, stored.begin() + (r + 1) * n);
        const std::vector<std::int64_t> want = stable_order(row.data(), n, descending);
        for (std::int64_t j = 0; j < n; ++j)
          ASSERT_EQ(got[std::size_t(r * n + j)], want[std::size_t(j)])
              << dev.str() << " " << dtype_name(dt) << (descending ? " descending" : "") << " row " << r << " at " << j;
      }
    }
}

TEST_P(SortOnEveryDevice, TopkAndKthvalue) {
  const std::vector<float> v = tied_values(2 * 37, 9);
  const Device dev = GetParam();
  Tensor x = tensor(v, {2, 37}).to(dev);
  auto [top, top_i] = topk(x, 5, 1);
  auto [low, low_i] = topk(x, 4, 1, false);
  auto [kth, kth_i] = kthvalue(x, 7, 1);
  for (std::int64_t r = 0; r < 2; ++r) {
    const std::vector<std::int64_t> down = stable_order(v.data() + r * 37, 37, true);
    const std::vector<std::int64_t> up = stable_order(v.data() + r * 37, 37, false);
    for (std::int64_t j = 0; j < 5; ++j) EXPECT_EQ(top_i.select(0, r).select(0, j).item<std::int64_t>(), down[std::size_t(j)]) << dev.str();
    for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(low_i.select(0, r).select(0, j).item<std::int64_t>(), up[std::size_t(j)]) << dev.str();
    EXPECT_EQ(kth_i.select(0, r).item<std::int64_t>(), up[6]) << dev.str();
  }
  EXPECT_EQ(top.shape(), (Shape{2, 5}));
  EXPECT_EQ(kth.shape(), (Shape{2}));
}

// Rows long enough for the CPU's selection to split them into chunks: the
// first k under ties and NaN across chunk borders, in several dtypes, along
// a first dim too, are the stable sort's first k.
TEST(Sort, TopkOfLongRowsIsTheSortsFirstK) {
  const std::int64_t n = 3 * 65536 + 7, k = 60;
  std::vector<float> smooth(std::size_t(2 * n));
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (float& v : smooth) v = normal(rng);
  for (const std::vector<float>& v : {tied_values(std::size_t(2 * n), 4), smooth})
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32})
      for (bool largest : {true, false})
        for (std::int64_t dim : {0, 1}) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + (largest ? " largest" : " smallest") + " dim " +
                       std::to_string(dim));
          Tensor x = tensor(v, {2, n}).to(dt);
          if (dim == 0) x = x.t();
          auto [top, top_i] = topk(x, k, dim, largest);
          auto [all, order] = sort(x, dim, largest);
          const Tensor first = all.narrow(dim, 0, k).to(DType::f64), got = top.to(DType::f64);
          EXPECT_EQ(sum(ne(top_i, order.narrow(dim, 0, k))).item(), 0.0);
          EXPECT_EQ(sum(ne(isnan(got), isnan(first))).item(), 0.0);
          EXPECT_EQ(sum(ne(where(isnan(got), 0.0, got), where(isnan(first), 0.0, first))).item(), 0.0);
        }
}

RUMUS_DEVICE_SUITE(ScanOnEveryDevice);

// Columns longer than the Vulkan kernel's 512-element chunks, along a middle dim.
TEST_P(ScanOnEveryDevice, CumsumAndCumprod) {
  const std::int64_t outer = 2, n = 1300, inner = 3;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> sum_dist(-1.0, 1.0), prod_dist(0.998, 1.002);
  std::vector<double> a(std::size_t(outer * n * inner)), b(a.size());
  for (auto& x : a) x = sum_dist(rng);
  for (auto& x : b) x = prod_dist(rng);
  std::vector<double> want_sum(a.size()), want_prod(a.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < inner; ++k) {
      double s = 0.0, p = 1.0;
      for (std::int64_t j = 0; j < n; ++j) {
        const std::size_t at = std::size_t((o * n + j) * inner + k);
        want_sum[at] = s += a[at];
        want_prod[at] = p *= b[at];
      }
    }
  const Device dev = GetParam();
  const std::vector<float> s = cumsum(tensor(a, {outer, n, inner}).to(dev), 1).to_vector<float>();
  const std::vector<float> p = cumprod(tensor(b, {outer, n, inner}).to(dev), -2).to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(s[i], want_sum[i], 1e-4) << dev.str() << " cumsum at " << i;
    ASSERT_NEAR(p[i], want_prod[i], 1e-4) << dev.str() << " cumprod at " << i;
  }
}

namespace {
// The gradient of sum(w * cumprod(x)) as the sum of products it is:
// d/dx[k] = sum over j >= k of w[j] * prod(x[i], i <= j, i != k).
std::vector<double> weighted_cumprod_gradient(const std::vector<double>& x, const std::vector<double>& w) {
  const std::size_t n = x.size();
  std::vector<double> g(n, 0.0);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t j = k; j < n; ++j) {
      double p = w[j];
      for (std::size_t i = 0; i <= j; ++i)
        if (i != k) p *= x[i];
      g[k] += p;
    }
  return g;
}
const std::vector<double> kCumprodAtZeros = {0.7, 1.3, 0.0, 0.9, 0.0, 1.1}, kCumprodWeights = {0.3, -0.5, 0.8, 0.2, -0.4, 0.6};
}  // namespace

// cumprod's gradient where the input holds zeros, against the sum of products
// it is, on every device (f32).
TEST_P(ScanOnEveryDevice, CumprodGradientAtZeros) {
  const Device dev = GetParam();
  const std::vector<double>& xs = kCumprodAtZeros;
  const std::int64_t n = std::int64_t(xs.size());
  Tensor x = tensor(xs, {n}).to(dev).requires_grad_();
  Tensor g = autograd::grad({sum(cumprod(x, 0) * tensor(kCumprodWeights, {n}).to(dev))}, {x})[0];
  const std::vector<float> got = g.to_vector<float>();
  const std::vector<double> want = weighted_cumprod_gradient(xs, kCumprodWeights);
  for (std::size_t k = 0; k < xs.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << "element " << k;
}

// ... and in f64 on the CPU, its second derivative against central
// differences of the first, in the elements that are not the zero (the
// gradient past the first zero is held at 0, as PyTorch's).
TEST(Scan, CumprodSecondDerivativeAtZeros) {
  const std::vector<double>& xs = kCumprodAtZeros;
  const std::vector<double> v = {0.9, -0.2, 0.4, 0.7, -0.6, 0.5};
  const std::size_t n = xs.size();
  auto exact_grad = [](const std::vector<double>& x) { return weighted_cumprod_gradient(x, kCumprodWeights); };
  Tensor x = tensor(xs, {std::int64_t(n)}, {.dtype = DType::f64}).requires_grad_();
  Tensor weights = tensor(kCumprodWeights, {std::int64_t(n)}, {.dtype = DType::f64});
  Tensor g = autograd::grad({sum(cumprod(x, 0) * weights)}, {x}, {.create_graph = true})[0];
  const std::vector<double> got = g.to_vector<double>(), want = exact_grad(xs);
  for (std::size_t k = 0; k < n; ++k) EXPECT_NEAR(got[k], want[k], 1e-12) << "element " << k;
  Tensor probe = tensor(v, {std::int64_t(n)}, {.dtype = DType::f64});
  const std::vector<double> second = autograd::grad({sum(g * probe)}, {x})[0].to_vector<double>();
  for (std::size_t j = 0; j < n; ++j) {
    if (xs[j] == 0.0) continue;
    const double eps = 1e-6;
    std::vector<double> up = xs, down = xs;
    up[j] += eps;
    down[j] -= eps;
    const std::vector<double> gu = exact_grad(up), gd = exact_grad(down);
    double fd = 0.0;
    for (std::size_t k = 0; k < n; ++k) fd += v[k] * (gu[k] - gd[k]) / (2 * eps);
    EXPECT_NEAR(second[j], fd, 1e-7) << "element " << j;
  }
}

// Running maxima and minima over columns longer than a chunk, with ties and
// NaN, against the loop PyTorch's CPU kernel runs (a later equal value and
// every NaN take over).
TEST_P(ScanOnEveryDevice, CummaxCummin) {
  const std::int64_t outer = 2, n = 1100, inner = 2;
  const std::vector<float> v = tied_values(std::size_t(outer * n * inner), 13);
  const Device dev = GetParam();
  for (bool is_max : {true, false}) {
    Tensor x = tensor(v, {outer, n, inner}).to(dev);
    auto [values, indices] = is_max ? cummax(x, 1) : cummin(x, -2);
    const std::vector<float> got_v = values.to_vector<float>();
    const std::vector<std::int64_t> got_i = indices.to_vector<std::int64_t>();
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t k = 0; k < inner; ++k) {
        float best = v[std::size_t(o * n * inner + k)];
        std::int64_t best_j = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const std::size_t at = std::size_t((o * n + j) * inner + k);
          const float e = v[at];
          if (std::isnan(e) || (!std::isnan(best) && (is_max ? e >= best : e <= best))) {
            best = e;
            best_j = j;
          }
          ASSERT_EQ(got_i[at], best_j) << dev.str() << (is_max ? " cummax" : " cummin") << " at " << at;
          ASSERT_TRUE(std::isnan(best) ? std::isnan(got_v[at]) : got_v[at] == best) << dev.str() << " at " << at;
        }
      }
  }
}

TEST(Scan, IntegersGiveI64AndDtypeCasts) {
  Tensor c = cumsum(i64({1, 2, 3}).to(DType::i32), 0);
  EXPECT_EQ(c.dtype(), DType::i64);
  EXPECT_EQ(c.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 3, 6}));
  EXPECT_EQ(cumprod(ones({2}), 0, DType::f64).dtype(), DType::f64);
  EXPECT_EQ(cumsum(scalar_tensor(2.5), 0).shape(), Shape{});
}

// Integer tensors sort and scan on every device (in double arithmetic on Vulkan).
TEST_P(ScanOnEveryDevice, Integers) {
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> pick(-1000, 1000);
  std::vector<std::int64_t> v(600);
  for (auto& x : v) x = pick(rng);
  std::vector<std::int64_t> want_sum(v.size());
  std::partial_sum(v.begin(), v.end(), want_sum.begin());
  const Device dev = GetParam();
  Tensor x = tensor(v, {std::int64_t(v.size())}).to(DType::i32).to(dev);
  EXPECT_EQ(cumsum(x, 0).to_vector<std::int64_t>(), want_sum) << dev.str();
  const std::vector<std::int64_t> order = argsort(x, 0, true).to_vector<std::int64_t>();
  for (std::size_t j = 1; j < order.size(); ++j) {
    const std::int64_t a = v[std::size_t(order[j - 1])], b = v[std::size_t(order[j])];
    ASSERT_TRUE(a > b || (a == b && order[j - 1] < order[j])) << dev.str() << " at " << j;
  }
  const std::vector<std::int64_t> running = std::get<0>(cummax(x, 0)).to_vector<std::int64_t>();
  EXPECT_EQ(running.back(), *std::max_element(v.begin(), v.end())) << dev.str();
}

RUMUS_DEVICE_SUITE(GatherOnEveryDevice);

// Rows wide enough for the CPU to split the columns among threads, one and
// several outer slices, repeated indices and per-column indices: a walk here.
TEST_P(GatherOnEveryDevice, ScatterAddOfWideRowsMatchesAWalk) {
  const Device dev = GetParam();
  std::mt19937_64 rng(41);
  for (std::int64_t outer : {1, 3})
    for (std::int64_t inner : {64, 100}) {
      constexpr std::int64_t n = 50, m = 400;
      std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
      std::vector<std::int64_t> ix(std::size_t(outer * m * inner));
      for (std::int64_t& i : ix) i = pick(rng);
      std::vector<double> src(ix.size()), self(std::size_t(outer * n * inner));
      for (std::size_t i = 0; i < src.size(); ++i) src[i] = double(i % 17) - 8;
      for (std::size_t i = 0; i < self.size(); ++i) self[i] = double(i % 5);
      std::vector<double> want = self;
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < m; ++j)
          for (std::int64_t k = 0; k < inner; ++k) {
            const std::size_t at = std::size_t((o * m + j) * inner + k);
            want[std::size_t((o * n + ix[at]) * inner + k)] += src[at];
          }
      Tensor out = scatter_add(tensor(self, {outer, n, inner}).to(dev), 1, tensor(ix, {outer, m, inner}).to(dev),
                               tensor(src, {outer, m, inner}).to(dev));
      EXPECT_EQ(out.to_vector<double>(), want) << dev.str() << " outer " << outer << " inner " << inner;
    }
}

RUMUS_DEVICE_SUITE(DiagonalOnEveryDevice);

TEST_P(DiagonalOnEveryDevice, IsAViewThatWritesThrough) {
  const Device dev = GetParam();
  Tensor x = zeros({3, 4}, {.device = dev});
  Tensor d = diagonal(x, 1);
  EXPECT_EQ(d.storage_ptr(), x.storage_ptr());
  EXPECT_EQ(d.shape(), Shape{3});
  d.fill_(1.0);
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(x.select(0, r).select(0, c).item(), c == r + 1 ? 1.0 : 0.0) << dev.str();
  EXPECT_EQ(diagonal(x, 5).shape(), Shape{0});
}

RUMUS_DEVICE_SUITE(NonzeroOnEveryDevice);

TEST_P(NonzeroOnEveryDevice, CoordinatesInRowMajorOrder) {
  std::vector<double> v = {0.0, 1.5, 0.0, -2.0, 0.0, 0.0, std::nan(""), 3.0};
  const Device dev = GetParam();
  Tensor nz = nonzero(tensor(v, {2, 2, 2}).to(dev));
  std::vector<std::int64_t> want;
  for (std::int64_t i = 0; i < 8; ++i)
    if (v[std::size_t(i)] != 0.0) want.insert(want.end(), {i / 4, (i / 2) % 2, i % 2});
  EXPECT_EQ(nz.shape(), (Shape{std::int64_t(want.size() / 3), 3})) << dev.str();
  EXPECT_EQ(nz.device(), dev);
  EXPECT_EQ(nz.to_vector<std::int64_t>(), want) << dev.str();
  // As a tuple (nonzero_numpy, where(condition)): one index tensor per dim, which index the nonzero elements.
  const Tensor x = tensor(v, {2, 2, 2}).to(dev);
  for (const std::vector<Tensor>& per_dim : {nonzero_numpy(x), where(ne(x, 0.0))}) {
    ASSERT_EQ(per_dim.size(), 3u);
    for (std::int64_t d = 0; d < 3; ++d) {
      EXPECT_EQ(per_dim[std::size_t(d)].device(), dev);
      EXPECT_EQ(per_dim[std::size_t(d)].to_vector<std::int64_t>(), nz.select(1, d).to_vector<std::int64_t>());
    }
    const Tensor picked = x.index({per_dim[0], per_dim[1], per_dim[2]});
    rumus::testing::expect_matches(picked, masked_select(x, ne(x, 0.0)), 0, "indexed by nonzero_numpy");
  }
  const std::vector<Tensor> scalar = nonzero_numpy(full({}, 2.0, {.device = dev}));
  ASSERT_EQ(scalar.size(), 1u);
  EXPECT_EQ(scalar[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(nonzero_numpy(zeros({}, {.device = dev}))[0].numel(), 0);
}

// The methods call the free functions: the same results.
TEST(MethodForms, AgreeWithTheFreeFunctions) {
  Tensor x = tensor(std::vector<double>{0.5, -1.0, 2.0, 0.25, -0.5, 1.5}, {2, 3}).to(DType::f32);
  auto same = [](const Tensor& a, const Tensor& b) { EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()); };
  same(x.flip({1}), flip(x, {1}));
  same(x.roll({1}, {1}), roll(x, {1}, {1}));
  same(x.repeat({2, 1}), repeat(x, {2, 1}));
  same(x.tile({2}), tile(x, {2}));
  same(x.repeat_interleave(2, 0), repeat_interleave(x, 2, 0));
  same(x.movedim(0, 1), movedim(x, 0, 1));
  same(x.diagonal(1), diagonal(x, 1));
  same(x.tril(), tril(x));
  same(x.triu(1), triu(x, 1));
  same(x.as_strided({2}, {2}, 1), as_strided(x, {2}, {2}, 1));
  Tensor index = i64({2, 0});
  same(x.index_select(1, index), index_select(x, 1, index));
  same(x.gather(1, index.reshape({1, 2})), gather(x, 1, index.reshape({1, 2})));
  same(x.scatter(1, index.reshape({1, 2}), 9.0), scatter(x, 1, index.reshape({1, 2}), 9.0));
  same(x.index_add(1, index, ones({2, 2}, {.dtype = DType::f32})), index_add(x, 1, index, ones({2, 2})));
  same(x.masked_select(gt(x, 0.0)), masked_select(x, gt(x, 0.0)));
  same(x.nonzero(), nonzero(x));
  same(x.take_along_dim(index.reshape({1, 2}), 1), take_along_dim(x, index.reshape({1, 2}), 1));
  same(std::get<1>(x.sort(1, true)), std::get<1>(sort(x, 1, true)));
  same(x.argsort(0), argsort(x, 0));
  same(std::get<0>(x.topk(2)), std::get<0>(topk(x, 2)));
  same(std::get<1>(x.kthvalue(2, 0)), std::get<1>(kthvalue(x, 2, 0)));
  same(std::get<0>(x.median(1)), std::get<0>(median(x, 1)));
  same(x.median(), median(x));
  same(x.cumsum(1), cumsum(x, 1));
  same(x.cumprod(0), cumprod(x, 0));
  same(std::get<1>(x.cummax(1)), std::get<1>(cummax(x, 1)));
  same(std::get<0>(x.cummin(0)), std::get<0>(cummin(x, 0)));
}

TEST(RepeatInterleave, OfCountsAlone) {
  EXPECT_EQ(repeat_interleave(i64({2, 0, 3})).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0, 2, 2, 2}));
}

}  // namespace

// ---- libtorch's tensor indexing: x.index({...}) and x.index_put_({...}, v) ----

namespace {
using namespace rumus::indexing;
// x[i, j, k] = 100 i + 10 j + k over [2, 3, 4]: every element names its position.
Tensor positions(Device dev) {
  return add(add(mul(arange(2.0).reshape({2, 1, 1}), 100.0), mul(arange(3.0).reshape({1, 3, 1}), 10.0)),
             arange(4.0).reshape({1, 1, 4}))
      .to(dev);
}
std::vector<float> values(const Tensor& t) { return t.contiguous().cpu().to_vector<float>(); }
Tensor ints(std::vector<std::int64_t> v, Shape s = {}) {
  if (s.empty()) s = {std::int64_t(v.size())};
  return tensor(v).reshape(s);
}
}  // namespace

RUMUS_DEVICE_SUITE(TensorIndexingOnEveryDevice);

TEST_P(TensorIndexingOnEveryDevice, BasicIndicesAreViews) {
  const Device dev = GetParam();
  const Tensor x = positions(dev);
  Tensor a = x.index({1, Slice(None, None, 2), -1});  // x[1, ::2, -1]
  EXPECT_EQ(a.shape(), (Shape{2}));
  EXPECT_EQ(values(a), (std::vector<float>{103, 123})) << dev.str();
  EXPECT_EQ(a.storage_ptr(), x.storage_ptr()) << "a view";
  Tensor b = x.index({Slice(1), None, Ellipsis, Slice(-2, None)});  // x[1:, None, ..., -2:]
  EXPECT_EQ(b.shape(), (Shape{1, 1, 3, 2}));
  EXPECT_EQ(values(b), (std::vector<float>{102, 103, 112, 113, 122, 123}));
  EXPECT_EQ(x.index({"...", 0}).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.index({true}).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(x.index({Slice(), false}).shape(), (Shape{2, 0, 3, 4}));
  EXPECT_EQ(x.index({Slice(5, 1)}).shape(), (Shape{0, 3, 4})) << "an empty slice, as Python's";
}

TEST_P(TensorIndexingOnEveryDevice, TensorIndicesGatherAsPyTorch) {
  const Device dev = GetParam();
  const Tensor x = positions(dev);
  // One index tensor: its shape replaces the dim.
  Tensor a = x.index({Slice(), ints({2, 0, 2, 1}, {2, 2})});  // x[:, [[2, 0], [2, 1]]]
  EXPECT_EQ(a.shape(), (Shape{2, 2, 2, 4}));
  EXPECT_EQ(values(a.index({1, 0, 1})), (std::vector<float>{100, 101, 102, 103}));
  // Adjacent indices broadcast together and stay in place.
  Tensor b = x.index({Slice(), ints({0, 2}), ints({-1})});  // x[:, [0, 2], [-1]]
  EXPECT_EQ(b.shape(), (Shape{2, 2}));
  EXPECT_EQ(values(b), (std::vector<float>{3, 23, 103, 123}));
  // Separated indices put the broadcast dims first.
  Tensor c = x.index({ints({1, 0}), Slice(), ints({3, 1})});  // x[[1, 0], :, [3, 1]]
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(c), (std::vector<float>{103, 113, 123, 1, 11, 21}));
  // A mask over two dims: the set positions, in row-major order.
  Tensor mask = tensor(std::vector<std::uint8_t>{0, 1, 0, 1, 0, 0}).reshape({2, 3});
  Tensor d = x.index({mask.to(dev)});
  EXPECT_EQ(d.shape(), (Shape{2, 4}));
  EXPECT_EQ(values(d), (std::vector<float>{10, 11, 12, 13, 100, 101, 102, 103}));
}

TEST_P(TensorIndexingOnEveryDevice, GradientsFlowToTheIndexedElements) {
  const Device dev = GetParam();
  Tensor x = positions(dev).requires_grad_();
  Tensor y = x.index({Slice(), ints({0, 2, 0}), 1});
  GradientStore g = backward(sum(y));
  std::vector<float> want(24, 0.0f);
  for (int i = 0; i < 2; ++i) {
    want[std::size_t(i * 12 + 0 * 4 + 1)] = 2;  // row 0 taken twice
    want[std::size_t(i * 12 + 2 * 4 + 1)] = 1;
  }
  EXPECT_EQ(values(g.at(x)), want) << dev.str();
}

TEST_P(TensorIndexingOnEveryDevice, IndexPutWritesThroughBasicAndTensorIndices) {
  const Device dev = GetParam();
  Tensor x = positions(dev);
  x.index_put_({0, Slice(1, None), Slice(None, 2)}, -1.0);  // x[0, 1:, :2] = -1
  EXPECT_EQ(values(x.index({0})),
            (std::vector<float>{0, 1, 2, 3, -1, -1, 12, 13, -1, -1, 22, 23}));
  Tensor y = positions(dev);
  y.index_put_({Slice(), ints({2, 0}), ints({3})}, tensor({-5.0, -6.0}).to(dev));  // y[:, [2, 0], [3]] = [-5, -6]
  EXPECT_EQ(values(y.index({Slice(), Slice(), 3})), (std::vector<float>{-6, 13, -5, -6, 113, -5})) << dev.str();
  Tensor z = positions(dev);
  z.index_put_({gt(z, 110.0)}, 0.0);  // z[z > 110] = 0
  EXPECT_EQ(max(z).item(), 110.0);
  EXPECT_EQ(sum(eq(z, 0.0)).item(), 8.0);  // 111..113, 120..123 and the 0 at [0, 0, 0]
}

TEST(TensorIndexing, BadIndicesNameTheProblem) {
  const Tensor x = positions(Device::cpu());
  expect_error<ShapeError>([&] { x.index({0, 0, 0, 0}); }, "index: too many indices for a tensor of 3 dims: 4 given");
  expect_error<ShapeError>([&] { x.index({Slice(), 3}); }, "index: index 3 is out of bounds for dim 1 of size 3");
  expect_error<ShapeError>([&] { x.index({ints({0, -3})}); }, "index: index -3 is out of bounds for an indexed dim of size 2");
  expect_error<ValueError>([&] { x.index({Ellipsis, Ellipsis}); }, "index: an index can only have a single ellipsis, got 2");
  expect_error<ValueError>([&] { x.index({Slice(None, None, -1)}); }, "index: expected a slice step > 0, got -1");
  expect_error<DTypeError>([&] { x.index({tensor({0.0, 1.0})}); },
                           "index: tensors used as indices must be integer, or bool or u8 (a mask), got f32");
  expect_error<ShapeError>([&] { x.index({tensor(std::vector<std::uint8_t>{1, 0, 1})}); },
                           "index: the mask of shape [3] does not match the indexed shape [2, 3, 4] at dim 0");
  expect_error<ValueError>([] { TensorIndex("..x"); }, "index: expected \"...\" (Ellipsis) as a text index, got \"..x\"");
  Tensor y = positions(Device::cpu());
  expect_error<ShapeError>([&] { y.index_put_({ints({5})}, 1.0); },
                           "index_put_: index 5 is out of bounds for an indexed dim of size 2");
}
