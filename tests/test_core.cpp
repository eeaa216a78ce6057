// Tensor core: dtypes, creation, views sharing storage, copies, printing.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <rumus/rumus.hpp>

#include "devices.hpp"
#include "expect_error.hpp"

using namespace rumus;
using rumus::testing::expect_error;

namespace {

TEST(DType, HalfAndBFloat16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(float(Half(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(float(Half(1e6f))));
  EXPECT_TRUE(std::isnan(float(Half(NAN))));
  EXPECT_EQ(float(Half(1.0009765625f + 0.0004f)), 1.0009765625f);  // round to nearest
  for (float f : {0.0f, 1.0f, -3.0f, 256.0f, 1.5f}) EXPECT_EQ(float(BFloat16(f)), f);
  EXPECT_NEAR(float(BFloat16(3.14159f)), 3.14159f, 0.01f);
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
}

TEST(DType, CastsBetweenAllTypes) {
  Tensor x = tensor({-2.0, 0.0, 1.5, 100.0});
  for (DType dt : {DType::f64, DType::f16, DType::bf16, DType::f32}) {
    auto v = x.to(dt).to_vector<double>();
    EXPECT_EQ(v, (std::vector<double>{-2, 0, 1.5, 100})) << dtype_name(dt);
  }
  EXPECT_EQ(x.to(DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{-2, 0, 1, 100}));
  EXPECT_EQ(x.to(DType::i64).to(DType::f32).to_vector<float>(), (std::vector<float>{-2, 0, 1, 100}));
  EXPECT_EQ(tensor({3.0, 200.0}).to(DType::u8).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{3, 200}));
}

// Out-of-range float -> int is undefined in C++ (PyTorch's result depends on
// the platform); rumus saturates to the target's range and maps NaN to 0.
TEST(DType, FloatToIntCastsSaturateAndNanIsZero) {
  const double inf = INFINITY;
  for (DType from : {DType::f32, DType::f64}) {
    Tensor x = tensor({1e20, -1e20, inf, -inf, NAN, -3.75, 300.5}).to(from);
    EXPECT_EQ(x.to(DType::i32).to_vector<std::int32_t>(),
              (std::vector<std::int32_t>{INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0, -3, 300}));
    EXPECT_EQ(x.to(DType::i64).to_vector<std::int64_t>(),
              (std::vector<std::int64_t>{INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 0, -3, 300}));
    EXPECT_EQ(x.to(DType::u8).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{255, 0, 255, 0, 0, 0, 255}));
  }
  // Just past the ends of i32 and i64, in the arithmetic type.
  EXPECT_EQ(tensor({2147483648.0, -2147483904.0}, {.dtype = DType::f64}).to(DType::i32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{INT32_MAX, INT32_MIN}));
  EXPECT_EQ(tensor({0x1p63, -0x1p63}, {.dtype = DType::f64}).to(DType::i64).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{INT64_MAX, INT64_MIN}));
  EXPECT_EQ(full({2}, 1e20, {.dtype = DType::i32}).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{INT32_MAX, INT32_MAX}));
  EXPECT_EQ(full({1}, NAN, {.dtype = DType::u8}).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0}));
  EXPECT_EQ(arange(1e20, 1.5e20, 0.25e20, {.dtype = DType::i64}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>(2, INT64_MAX)));
  EXPECT_EQ(arange(-1e20, -0.5e20, 0.25e20, {.dtype = DType::i32}).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>(2, INT32_MIN)));
  EXPECT_EQ(scalar_tensor(1e20).item<std::int64_t>(), INT64_MAX);
  EXPECT_EQ(scalar_tensor(-1e20).item<int>(), INT32_MIN);
  EXPECT_EQ(scalar_tensor(NAN).item<std::int64_t>(), 0);
  EXPECT_EQ(scalar_tensor(inf).item<std::uint8_t>(), 255);
  EXPECT_EQ(scalar_tensor(-2.5).item<int>(), -2);
}

// What FSDP frees between a unit's forward and backward: the bytes go, the
// handles stay, and reading is an Error until bytes are put back.
TEST(Storage, ReleasedBytesRaiseUntilTakenBack) {
  Tensor t = tensor(std::vector<float>{0, 1, 2, 3, 4, 5}).reshape({2, 3});
  Tensor view = t.narrow(1, 1, 2);
  const std::uint64_t version = t.storage().version();
  const std::size_t before = device_stats(Device::cpu()).bytes_in_use;
  t.storage().release_bytes();
  EXPECT_TRUE(t.storage().released());
  EXPECT_LT(device_stats(Device::cpu()).bytes_in_use, before);
  expect_error<Error>([&] { (void)t.sum().item<float>(); }, "tensor memory of 24 bytes on cpu is released");
  expect_error<Error>([&] { (void)view.contiguous(); }, "is released by its owner");
  t.storage().release_bytes();  // idempotent
  Tensor fresh = tensor(std::vector<float>{0, 1, 2, 3, 4, 5});
  t.storage().take_bytes(fresh.storage());
  EXPECT_FALSE(t.storage().released());
  EXPECT_TRUE(fresh.storage().released());
  EXPECT_EQ(t.storage().version(), version);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(view.contiguous().to_vector<float>(), (std::vector<float>{1, 2, 4, 5}));
  Tensor other = zeros({5});
  expect_error<Error>([&] { t.storage().take_bytes(other.storage()); },
                      "Storage::take_bytes: expected 24 bytes on cpu that are not released, got 20 bytes on cpu");
  expect_error<Error>([&] { other.storage().take_bytes(fresh.storage()); }, "got 24 bytes on cpu (released)");
}

TEST(Creation, FactoriesAndShapes) {
  EXPECT_EQ(zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0));
  EXPECT_EQ(ones({2}).to_vector<float>(), std::vector<float>(2, 1));
  EXPECT_EQ(full({2}, 7, {.dtype = DType::i64}).to_vector<std::int64_t>(), (std::vector<std::int64_t>{7, 7}));
  EXPECT_EQ(arange(2, 8, 2).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(arange(3, {.dtype = DType::i64}).dtype(), DType::i64);
  EXPECT_EQ(scalar_tensor(4).dim(), 0);
  EXPECT_EQ(tensor({{1, 2}, {3, 4}}).shape(), (Shape{2, 2}));
  double raw[3] = {1, 2, 3};
  Tensor b = from_blob(raw, {3}, DType::f64);
  raw[0] = 9;  // from_blob copies
  EXPECT_EQ(b.to_vector<double>()[0], 1.0);
  EXPECT_THROW(tensor(std::vector<float>{1, 2, 3}, Shape{2, 2}), ShapeError);
  EXPECT_THROW(tensor({{1.0, 2.0}, {3.0}}), ShapeError);
}

// Empty shapes: random factories fill nothing (their layout counts as
// contiguous whatever the strides), and views of them stay empty.
TEST(Creation, EmptyShapesFromEveryFactory) {
  for (const Shape& shape : {Shape{2, 0, 3}, Shape{0}, Shape{4, 5, 0}}) {
    for (const Tensor& t : {randn(shape), rand(shape), zeros(shape), randint(0, 5, shape, {.dtype = DType::i64})}) {
      EXPECT_EQ(t.shape(), shape);
      EXPECT_EQ(t.numel(), 0);
      EXPECT_TRUE(t.is_contiguous());
    }
  }
  EXPECT_EQ(randn({3, 0}).transpose(0, 1).contiguous().shape(), (Shape{0, 3}));
}

TEST(Creation, RandomIsSeededAndDistributed) {
  manual_seed(42);
  Tensor a = rand({1000});
  Tensor n = randn({20000}, {.dtype = DType::f64});
  manual_seed(42);
  EXPECT_EQ(rand({1000}).to_vector<float>(), a.to_vector<float>());
  auto av = a.to_vector<float>();
  for (float v : av) ASSERT_TRUE(v >= 0 && v < 1);
  EXPECT_NEAR(mean(n).item(), 0.0, 0.03);
  EXPECT_NEAR(mean(square(n)).item(), 1.0, 0.05);
  Generator gen(7), gen2(7);
  EXPECT_EQ(randint(0, 10, {50}, {.dtype = DType::i64}, &gen).to_vector<std::int64_t>(),
            randint(0, 10, {50}, {.dtype = DType::i64}, &gen2).to_vector<std::int64_t>());
  auto r = randint(3, 6, {500}, {.dtype = DType::i64}, &gen).to_vector<std::int64_t>();
  for (auto v : r) ASSERT_TRUE(v >= 3 && v < 6);
  // Successive draws differ.
  EXPECT_NE(rand({8}, {}, &gen).to_vector<float>(), rand({8}, {}, &gen).to_vector<float>());
}

// The f32 Bernoulli kernel (compiled per instruction set, the widest the CPU
// runs chosen at run time) draws exactly what the generic path draws for f64,
// across several of its parallel chunks.
TEST(Creation, BernoulliF32KernelMatchesTheGenericDraws) {
  Generator a(11), b(11);
  const std::int64_t n = 3 * 16384 + 5;
  std::vector<float> f = bernoulli({n}, 0.3, {}, &a).to_vector<float>();
  std::vector<double> d = bernoulli({n}, 0.3, {.dtype = DType::f64}, &b).to_vector<double>();
  ASSERT_EQ(f.size(), d.size());
  std::int64_t ones = 0;
  for (std::size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(double(f[i]), d[i]) << "element " << i;
    ones += f[i] == 1.0f;
  }
  EXPECT_NEAR(double(ones) / double(n), 0.3, 0.01);
}

// manual_seed on one thread while another reads the state: every read sees a
// whole state (ThreadSanitizer reported the unlocked reads as a data race).
TEST(Creation, GeneratorStateReadsWhileSeeding) {
  Generator gen(1);
  constexpr std::uint64_t kSeeds = 2000;
  std::thread seeder([&] {
    for (std::uint64_t s = 1; s <= kSeeds; ++s) {
      gen.manual_seed(s);
      gen.advance(3);
    }
  });
  std::uint64_t last_seed = 0;
  for (std::uint64_t seen = 0; seen < kSeeds;) {
    const std::uint64_t s = gen.seed(), o = gen.offset();
    ASSERT_GE(s, last_seed);  // seeds only grow
    ASSERT_LE(s, kSeeds);
    ASSERT_LE(o, 3u);
    last_seed = seen = s;
  }
  seeder.join();
  EXPECT_EQ(gen.seed(), kSeeds);
  EXPECT_EQ(gen.offset(), 3u);
}

TEST(Views, ShareStorageAndNeverCopy) {
  Tensor x = arange(24).reshape({2, 3, 4});
  auto same = [&](const Tensor& v) { return v.storage_ptr() == x.storage_ptr(); };
  EXPECT_TRUE(same(x.view({6, 4})));
  EXPECT_TRUE(same(x.transpose(0, 2)));
  EXPECT_TRUE(same(x.permute({1, 2, 0})));
  EXPECT_TRUE(same(x.slice(2, 0, 4, 2)));
  EXPECT_TRUE(same(x.select(1, 2)));
  EXPECT_TRUE(same(x.narrow(0, 1, 1)));
  EXPECT_TRUE(same(x.unsqueeze(0).expand({5, 2, 3, 4})));
  EXPECT_TRUE(same(x.unsqueeze(1).squeeze(1)));
  EXPECT_TRUE(same(x.flatten()));
  EXPECT_TRUE(same(x.transpose(0, 1).reshape({3, 2, 4})));  // still viewable
  EXPECT_FALSE(same(x.transpose(1, 2).reshape({24})));     // must copy

  EXPECT_EQ(x.select(1, 2).to_vector<float>(), (std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(x.slice(2, 1, 4, 2).select(0, 1).to_vector<float>(), (std::vector<float>{13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(x.transpose(0, 2).contiguous().to_vector<float>()[1], 12.0f);
  EXPECT_EQ(x.permute({2, 0, 1}).shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(x.slice(1, -2, 3).shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(x.view({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(zeros({1, 3, 1}).squeeze().shape(), (Shape{3}));
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_FALSE(x.transpose(0, 1).is_contiguous());
}

TEST(Views, WritesThroughViewsAndVersions) {
  Tensor x = zeros({3, 4});
  Tensor row = x.select(0, 1);
  auto v0 = x.storage().version();
  row.fill_(5);
  EXPECT_GT(x.storage().version(), v0);
  EXPECT_EQ(sum(x).item(), 20.0);
  x.slice(1, 0, 4, 2).add_(1.0);
  EXPECT_EQ(sum(x).item(), 26.0);
  x.t().copy_(ones({4, 3}));
  EXPECT_EQ(sum(x).item(), 12.0);
  x.mul_(tensor({1.0, 2.0, 3.0, 4.0}));  // broadcast source
  EXPECT_EQ(sum(x).item(), 30.0);
  x.zero_();
  EXPECT_EQ(sum(x).item(), 0.0);
  EXPECT_THROW(x.copy_(zeros({5})), ShapeError);
}

TEST(Copies, CloneDetachContiguous) {
  Tensor x = arange(6).reshape({2, 3});
  Tensor c = x.clone();
  EXPECT_NE(c.storage_ptr(), x.storage_ptr());
  c.fill_(0);
  EXPECT_EQ(sum(x).item(), 15.0);
  Tensor d = x.detach();
  EXPECT_EQ(d.storage_ptr(), x.storage_ptr());
  EXPECT_NE(d.grad_id(), x.grad_id());
  EXPECT_EQ(x.contiguous().storage_ptr(), x.storage_ptr());
  EXPECT_TRUE(x.t().contiguous().is_contiguous());
  EXPECT_EQ(x.t().contiguous().to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Printing, FmtAndStream) {
  Tensor x = tensor({{1.0, 2.0}, {3.0, 4.0}});
  std::string s = fmt::format("{}", x);
  EXPECT_NE(s.find("[[1.0000, 2.0000],"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 2], dtype=f32, device=cpu"), std::string::npos) << s;
  std::ostringstream os;
  os << arange(3, {.dtype = DType::i64});
  EXPECT_NE(os.str().find("[0, 1, 2]"), std::string::npos) << os.str();
  EXPECT_NE(to_string(zeros({100, 100})).find("..."), std::string::npos);
  EXPECT_EQ(fmt::format("{}", DType::bf16), "bf16");
}

// As libtorch: std::cout << torch::kFloat, << t.sizes(), and
// torch::arange(0, 3, torch::kLong).
TEST(Printing, DTypesShapesAndSizes) {
  std::ostringstream os;
  os << DType::f32 << " " << DType::i64 << " " << DType::u8;
  EXPECT_EQ(os.str(), "f32 i64 u8");
  Tensor t = zeros({2, 3, 4});
  os.str("");
  os << t.sizes() << " " << Shape{} << " " << t.select(0, 1).shape();
  EXPECT_EQ(os.str(), "[2, 3, 4] [] [3, 4]");
  EXPECT_EQ(t.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(&t.sizes(), &t.shape());
}

TEST(Creation, ArangeWithADType) {
  Tensor a = arange(0, 3, DType::i64);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(arange(4, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 2, 3}));
  Tensor b = arange(1, 2, 0.25, DType::f64);
  EXPECT_EQ(b.dtype(), DType::f64);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(5, 0, -2, DType::u8).to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{5, 3, 1}));
}

TEST(DeviceValues, ParseAndCompare) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("vulkan:1"), Device::vulkan(1));
  EXPECT_EQ(Device::vulkan(2).str(), "vulkan:2");
  EXPECT_THROW(Device::parse("cuda"), DeviceError);
}

TEST(ShapeOverflow, FactoriesRejectShapesPastInt64) {
  const std::int64_t big = std::int64_t(1) << 32;
  expect_error<ShapeError>([&] { zeros({big, big}); }, "[4294967296, 4294967296]");
  expect_error<ShapeError>([] { zeros({std::int64_t(1) << 62, 3}); }, "[4611686018427387904, 3]");
  expect_error<ShapeError>([] { zeros({std::int64_t(1) << 62}); }, "[4611686018427387904]");  // bytes overflow
  expect_error<ShapeError>([&] { zeros({0, big, big}); }, "[0, 4294967296, 4294967296]");     // strides overflow
}

TEST(ShapeOverflow, ReshapeAndExpandRejectOverflowAndNegativeDims) {
  const std::int64_t big = std::int64_t(1) << 32;
  expect_error<ShapeError>([&] { zeros({0}).reshape({big, big}); }, "reshape: shape [4294967296, 4294967296]");
  expect_error<ShapeError>([&] { zeros({0}).reshape({big, big, -1}); }, "reshape: shape [4294967296, 4294967296, -1]");
  expect_error<ShapeError>([] { zeros({3}).expand({-5, 3}); }, "expand: invalid dim -5 in [-5, 3]");
  expect_error<ShapeError>([] { zeros({1, 3}).expand({-5, 3}); }, "expand: invalid dim -5 in [-5, 3]");
  expect_error<ShapeError>([&] { zeros({1, 1}).expand({big, big}); }, "expand: shape [4294967296, 4294967296]");
  EXPECT_EQ(zeros({3}).expand({2, -1}).shape(), (Shape{2, 3}));
}

}  // namespace

// ---- threads ----

TEST(Parallel, SetNumThreadsChecksAndApplies) {
  const int before = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
  EXPECT_EQ(num_threads(), before);
  rumus::testing::expect_error<Error>([] { set_num_threads(0); }, "set_num_threads: expected at least 1 thread, got 0");
}

// ctest also runs this with OMP_DISPLAY_ENV=true, with and without the user's
// OMP_WAIT_POLICY, and checks the policy libgomp reports (tests/CMakeLists.txt).
TEST(Parallel, WaitPolicyIsTheUsersWhenSet) {
  // The default rumus sets is removed again once the CPU backend has started.
  EXPECT_EQ(zeros({2}).sum().item(), 0.0);
  if (std::getenv("OMP_WAIT_POLICY")) EXPECT_FALSE(idle_threads_sleep_by_rumus());
  if (idle_threads_sleep_by_rumus()) EXPECT_EQ(std::getenv("OMP_WAIT_POLICY"), nullptr);
}

RUMUS_DEVICE_SUITE(CreationOnEveryDevice);

TEST_P(CreationOnEveryDevice, LinspaceLogspaceAndEye) {
  const Device dev = GetParam();
  Tensor l = linspace(-1, 1, 5, {.dtype = DType::f64, .device = dev});
  EXPECT_EQ(l.device(), dev);
  EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(linspace(0, 0.7, 8, {.dtype = DType::f64}).to_vector<double>().back(), 0.7);  // the end, exactly
  EXPECT_EQ(linspace(2, 5, 1).to_vector<float>(), (std::vector<float>{2}));
  EXPECT_EQ(linspace(2, 5, 0).numel(), 0);
  EXPECT_EQ(linspace(0, 10, 6, {.dtype = DType::i64}).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(logspace(0, 3, 4, 10.0, {.dtype = DType::f64, .device = dev}).to_vector<double>(),
            (std::vector<double>{1, 10, 100, 1000}));
  EXPECT_EQ(logspace(0, 3, 4, 2.0).to_vector<float>(), (std::vector<float>{1, 2, 4, 8}));
  Tensor e = eye(2, 3, {.device = dev});
  EXPECT_EQ(e.shape(), (Shape{2, 3}));
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(3, {.dtype = DType::i32}).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_TRUE(eye(3, {.requires_grad = true}).requires_grad());
}

TEST(Creation, LinspaceLogspaceAndEyeRefuseNegativeSizes) {
  expect_error<ValueError>([] { linspace(0, 1, -1); }, "linspace: expected steps >= 0, got -1");
  expect_error<ValueError>([] { logspace(0, 1, -2); }, "logspace: expected steps >= 0, got -2");
  expect_error<ValueError>([] { eye(2, -1); }, "eye: expected n >= 0 and m >= 0, got n = 2, m = -1");
}

// The same seed gives the CPU's permutation on every device.
TEST_P(CreationOnEveryDevice, RandpermIsTheCpusSeededPermutation) {
  const Device dev = GetParam();
  manual_seed(5);
  Tensor p = randperm(10, {.dtype = DType::i64, .device = dev});
  EXPECT_EQ(p.device(), dev);
  std::vector<std::int64_t> v = p.to_vector<std::int64_t>();
  manual_seed(5);
  EXPECT_EQ(v, randperm(10, {.dtype = DType::i64}).to_vector<std::int64_t>());
  std::sort(v.begin(), v.end());
  EXPECT_EQ(v, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(Creation, RandpermFollowsTheSeedAndRefusesNegativeSizes) {
  manual_seed(5);
  const std::vector<std::int64_t> first = randperm(10).to_vector<std::int64_t>();
  manual_seed(6);
  EXPECT_NE(randperm(10).to_vector<std::int64_t>(), first);
  EXPECT_EQ(randperm(0).numel(), 0);
  EXPECT_EQ(randperm(4, {.dtype = DType::i32}).dtype(), DType::i32);
  expect_error<ValueError>([] { randperm(-3); }, "randperm: expected n >= 0, got -3");
}

TEST_P(CreationOnEveryDevice, MultinomialDrawsTheCpusNumbers) {
  const Device dev = GetParam();
  manual_seed(2);
  Tensor d = multinomial(tensor({0.2, 0.8}, {.device = dev}), 6, true);
  EXPECT_EQ(d.device(), dev);
  manual_seed(2);
  EXPECT_EQ(d.to_vector<std::int64_t>(), multinomial(tensor({0.2, 0.8}), 6, true).to_vector<std::int64_t>());
}

TEST(Creation, MultinomialFrequenciesAndWithoutReplacement) {
  manual_seed(1);
  Tensor probs = tensor({{1.0, 0.0, 3.0}, {0.0, 2.0, 2.0}});  // unnormalised weights
  Tensor draws = multinomial(probs, 4000, true);
  ASSERT_EQ(draws.shape(), (Shape{2, 4000}));
  EXPECT_EQ(draws.dtype(), DType::i64);
  auto v = draws.to_vector<std::int64_t>();
  std::array<std::array<int, 3>, 2> counts{};
  for (std::size_t i = 0; i < v.size(); ++i) ++counts[i / 4000][std::size_t(v[i])];
  EXPECT_EQ(counts[0][1], 0);  // zero weight: never drawn
  EXPECT_EQ(counts[1][0], 0);
  EXPECT_NEAR(counts[0][2] / 4000.0, 0.75, 0.03);
  EXPECT_NEAR(counts[1][1] / 4000.0, 0.5, 0.03);
  // Without replacement every index appears at most once.
  for (int trial = 0; trial < 20; ++trial) {
    auto row = multinomial(tensor({0.1, 0.2, 0.3, 0.4}), 4, false).to_vector<std::int64_t>();
    std::sort(row.begin(), row.end());
    EXPECT_EQ(row, (std::vector<std::int64_t>{0, 1, 2, 3}));
  }
  expect_error<ValueError>([] { multinomial(tensor({0.5, 0.5}), 3, false); },
                           "multinomial: cannot draw 3 samples without replacement from 2 categories");
  expect_error<ValueError>([] { multinomial(tensor({0.5, 0.0, 0.0}), 2, false); },
                           "multinomial: row 0 has 1 non-zero categories, fewer than the 2 samples");
  expect_error<ValueError>([] { multinomial(tensor({0.5, -0.5}), 1, true); },
                           "multinomial: expected finite non-negative probabilities, got -0.5 in row 0");
  expect_error<ValueError>([] { multinomial(tensor({0.0, 0.0}), 1, true); },
                           "multinomial: expected a positive sum of probabilities in row 0");
  expect_error<ShapeError>([] { multinomial(zeros({2, 2, 2}), 1, true); },
                           "multinomial: expected probs of 1 or 2 dims, got shape [2, 2, 2]");
  expect_error<ValueError>([] { multinomial(tensor({1.0}), 0, true); }, "multinomial: expected num_samples > 0, got 0");
}

TEST_P(CreationOnEveryDevice, LikeFactoriesAndInPlaceDraws) {
  const Device dev = GetParam();
  Tensor t = zeros({3, 4}, {.dtype = DType::f64, .device = dev});
  for (Tensor r : {rand_like(t), randn_like(t)}) {
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.dtype(), DType::f64);
    EXPECT_EQ(r.device(), dev);
  }
  Tensor ri = randint_like(zeros({50}, {.dtype = DType::i32, .device = dev}), 3, 6);
  EXPECT_EQ(ri.dtype(), DType::i32);
  for (auto x : ri.to_vector<std::int32_t>()) {
    EXPECT_GE(x, 3);
    EXPECT_LT(x, 6);
  }
  // In place draws take the same numbers as the factories with the same seed.
  manual_seed(9);
  Tensor want = normal({3, 4}, 2.0, 0.5, {.dtype = DType::f64, .device = dev});
  manual_seed(9);
  Tensor x = empty({3, 4}, {.dtype = DType::f64, .device = dev});
  EXPECT_EQ(&x.normal_(2.0, 0.5), &x);
  EXPECT_EQ(x.to_vector<double>(), want.to_vector<double>());
  manual_seed(9);
  want = uniform({3, 4}, -2.0, 1.0, {.dtype = DType::f64, .device = dev});
  manual_seed(9);
  x.uniform_(-2.0, 1.0);
  EXPECT_EQ(x.to_vector<double>(), want.to_vector<double>());
}

TEST(Creation, InPlaceDrawsOfLargeTensors) {
  manual_seed(3);
  Tensor big = zeros({20000});
  big.normal_(1.0, 2.0);
  EXPECT_NEAR(mean(big).item(), 1.0, 0.05);
  EXPECT_NEAR(std::sqrt(mean(square(sub(big, 1.0))).item()), 2.0, 0.05);
  Tensor ints = zeros({2}, {.dtype = DType::i64});
  expect_error<DTypeError>([&] { ints.normal_(); }, "Tensor.normal_: expected a floating dtype, got i64");
  expect_error<ValueError>([&] { big.uniform_(1.0, 0.0); }, "Tensor.uniform_: expected from <= to, got [1, 0)");
}

// full and fill_ write every dtype's value, an i64 one with all 64 bits.
TEST_P(CreationOnEveryDevice, FillAndFullEveryDtype) {
  const Device dev = GetParam();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::i8,
                  DType::i16}) {
    Tensor got = full({3, 5}, 7, {.dtype = t, .device = dev});
    EXPECT_EQ(got.dtype(), t);
    EXPECT_EQ(got.to(DType::f64).to_vector<double>(), std::vector<double>(15, 7.0)) << dtype_name(t);
    got.narrow(1, 1, 2).fill_(3);  // a strided view
    EXPECT_EQ(got.select(0, 2).to(DType::f64).to_vector<double>(), (std::vector<double>{7, 3, 3, 7, 7})) << dtype_name(t);
  }
  Tensor big = full({2}, 9007199254740993.0, {.dtype = DType::i64, .device = dev});  // needs all 64 bits
  EXPECT_EQ(big.to_vector<std::int64_t>()[1], std::int64_t(9007199254740992));
}
