// What only a Vulkan device has: its agreement with the CPU over shared random
// streams and kernel codes; its transfers, stream, memory, capture pins,
// index-fault records and errors; and its kernels' own variants (GEMM tiles,
// split-K and the tuner, cooperative matrices, the attention kernels chosen
// by device features, convolution and reduction tiles, f64 arithmetic in
// shaders). How an op behaves on every device is tested in its area's file,
// in a device suite (tests/devices.hpp); the op table, in tests/test_ops.cpp.
// Runs on any Vulkan device; CI uses Mesa's lavapipe. Skips without one.
#include <gtest/gtest.h>

#include <thread>

#include <filesystem>
#include <fstream>

#include <cmath>
#include <cstring>
#include <limits>
#include <cstdio>
#include <iostream>
#include <rumus/rumus.hpp>

#include "backend/vulkan/kernels.hpp"  // vulkan::gemm
#include "backend/vulkan/vulkan_backend.hpp"  // the tensor-core GEMM's choice, the GEMM tuner
#include "backend/vulkan/gemm_coopmat.hpp"  // which products run on the matrix units
#include "backend/vulkan/pipelines.hpp"  // the on-disk pipeline cache
#include "devices.hpp"
#include "expect_error.hpp"
#include "op_table.hpp"

using namespace rumus;
using namespace rumus::testing;

namespace {

// Each kernel of Ks is (want = true) or is not registered on `be` for `dtype`.
template <class... Ks>
void expect_supports(Backend& be, DType dtype, bool want) {
  for (auto [name, has] : {std::pair{Ks::name, supports<Ks>(be, dtype)}...})
    EXPECT_EQ(has, want) << name << " for " << dtype_name(dtype);
}

TensorArg arg_of(const Tensor& t) { return {t.storage_ptr().get(), t.dtype(), &t.layout()}; }

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to_vector<double>();
  auto w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    double err = std::abs(g[i] - w[i]);
    ASSERT_TRUE(g[i] == w[i] || err <= tol * std::max(1.0, std::abs(w[i])) || (std::isnan(g[i]) && std::isnan(w[i])))
        << what << " element " << i << ": vulkan " << g[i] << " vs cpu " << w[i];
  }
}

TEST(VulkanTransfers, RoundTripEveryDtype) {
  REQUIRE_VULKAN();
  std::vector<double> v = {0, 1, -2, 3.5, 100, -7.25, 42, 0.5};
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::i8,
                  DType::i16, DType::boolean}) {
    std::vector<double> vals = v;
    if (t == DType::u8)
      for (auto& x : vals) x = std::abs(std::trunc(x));
    Tensor host = tensor(vals, {2, 4}).to(t);
    Tensor dev = host.to(kGpu);
    EXPECT_EQ(dev.device(), kGpu);
    expect_close(dev.cpu(), host, 0, std::string("round trip ") + std::string(dtype_name(t)));
    // A strided view travels as its logical contents.
    expect_close(dev.transpose(0, 1).cpu(), host.transpose(0, 1).contiguous(), 0, "transposed round trip");
  }
}

TEST(VulkanTransfers, CastsMatchCpu) {
  REQUIRE_VULKAN();
  Tensor x = tensor({-3.75, -1.5, 0.0, 0.25, 2.5, 1000.125, 65504.0, 1e-3});
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                       DType::i64, DType::i16, DType::i8,  DType::boolean};
  for (DType from : all) {
    Tensor src = x.to(from);
    for (DType to : all) {
      Tensor want = src.to(to);
      Tensor got = src.to(kGpu).to(to);
      expect_close(got, want, 1e-6,
                   "cast " + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    }
  }
}

TEST(VulkanTransfers, OutOfRangeFloatToIntCastsSaturateLikeCpu) {
  REQUIRE_VULKAN();
  Tensor x = tensor({1e20, -1e20, INFINITY, -INFINITY, NAN, -3.75, 300.5, 2.5});
  for (DType from : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor src = x.to(from);
    for (DType to : {DType::i32, DType::i64, DType::u8, DType::i16, DType::i8, DType::boolean}) {
      Tensor want = src.to(to);
      Tensor got = src.to(kGpu).to(to);
      expect_close(got, want, 0, "cast " + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    }
  }
  for (DType to : {DType::i32, DType::i64, DType::u8, DType::i16, DType::i8, DType::boolean})
    for (double v : {1e20, -1e20, double(NAN)})
      expect_close(full({3}, v, {.dtype = to, .device = kGpu}), full({3}, v, {.dtype = to}), 0,
                   "full " + std::string(dtype_name(to)));
}

// Staging through mapped host buffers (DeviceBackend::copy_to_host,
// copy_from_host): a copy sees the kernel queued just before it, a kernel
// queued just after a copy back sees its bytes, the host sees a copy once
// wait() returns, and none of it waits for the whole queue.
TEST(VulkanStaging, CopiesAndKernelsStayInOrderWithoutQueueDrains) {
  REQUIRE_VULKAN();
  DeviceBackend& be = device_backend(kGpu);
  constexpr int n = 96, steps = 40;
  auto buf = be.allocate_host(n * sizeof(float));
  ASSERT_GE(buf->size(), n * sizeof(float));
  EXPECT_EQ(buf->device(), kGpu);
  Tensor base = zeros({n + 8}, {.device = kGpu});
  Tensor t = base.narrow(0, 8, n);  // at a byte offset into its storage
  Tensor acc = zeros({n}, {.device = kGpu});
  const std::size_t offset = 8 * sizeof(float), bytes = n * sizeof(float);
  const DeviceStats before = be.stats();
  bool seen_ok = true;
  for (int i = 0; i < steps && seen_ok; ++i) {
    t.add_(1.0);  // queued, not submitted: the copy must wait for it
    be.copy_to_host(t.storage(), offset, *buf, 0, bytes);
    buf->wait();
    auto* p = static_cast<float*>(buf->data());
    for (int k = 0; k < n; ++k) {
      const float want = i == 0 ? 1.0f : float((i - 1) * 1000 + k + 1);
      if (p[k] != want) {
        ADD_FAILURE() << "step " << i << " element " << k << ": copied " << p[k] << ", want " << want;
        seen_ok = false;
        break;
      }
      p[k] = float(i * 1000 + k);
    }
    be.copy_from_host(*buf, 0, t.storage(), offset, bytes);  // queued, not waited for
    acc.add_(t);                                              // must read the copied bytes
  }
  const DeviceStats after = be.stats();
  EXPECT_EQ(after.queue_drains, before.queue_drains) << "a staging copy waited for the whole queue";
  EXPECT_EQ(after.device_to_host - before.device_to_host, std::uint64_t(steps));
  EXPECT_EQ(after.host_to_device - before.host_to_device, std::uint64_t(steps));
  std::vector<float> got_t = t.cpu().to_vector<float>(), got_acc = acc.cpu().to_vector<float>();
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(got_t[std::size_t(k)], float((steps - 1) * 1000 + k)) << k;
    EXPECT_EQ(got_acc[std::size_t(k)], float(1000 * steps * (steps - 1) / 2 + steps * k)) << k;
  }
  EXPECT_EQ(base.narrow(0, 0, 8).cpu().to_vector<float>(), std::vector<float>(8, 0.0f)) << "bytes before the view";
}

// A staging copy waits for the copies of the other direction over its own
// bytes only: a tensor's first piece goes back while its last piece still
// comes to the host (one queue, as lavapipe has, orders them anyway; two
// copy engines do not). Copies known done are dropped.
TEST(VulkanStaging, CopiesWaitOnlyForTheOtherDirectionOverTheirBytes) {
  const std::size_t mib = 1 << 20;
  std::vector<vulkan::Allocation::StagingCopy> downloads = {{0, mib, 5}, {mib, 2 * mib, 6}, {2 * mib, 2 * mib + 100, 7}};
  EXPECT_EQ(vulkan::last_overlapping(downloads, 0, mib, 0), 5u);             // piece 0 back: its own download
  EXPECT_EQ(vulkan::last_overlapping(downloads, mib - 1, mib + 1, 0), 6u);   // straddling two pieces: the later
  EXPECT_EQ(vulkan::last_overlapping(downloads, 0, 3 * mib, 0), 7u);         // the whole tensor: every piece
  EXPECT_EQ(vulkan::last_overlapping(downloads, 3 * mib, 4 * mib, 0), 0u);   // other bytes: nothing
  EXPECT_EQ(vulkan::last_overlapping(downloads, 0, 3 * mib, 6), 7u);         // 5 and 6 known done
  EXPECT_EQ(downloads.size(), 1u);
}

// A host buffer dropped while its copy is queued, and a tensor freed while a
// copy reads it, keep their memory until the copy is done.
TEST(VulkanStaging, MemoryOfAQueuedCopyIsNotReusedEarly) {
  REQUIRE_VULKAN();
  DeviceBackend& be = device_backend(kGpu);
  constexpr int n = 4096;
  for (int round = 0; round < 8; ++round) {
    Tensor t = zeros({n}, {.device = kGpu});
    {
      auto buf = be.allocate_host(n * sizeof(float));
      auto* p = static_cast<float*>(buf->data());
      for (int k = 0; k < n; ++k) p[k] = float(k + round);
      be.copy_from_host(*buf, 0, t.storage(), 0, n * sizeof(float));
    }  // dropped before its copy ran
    // Uploads take staging memory: they must not get the dropped buffer's yet.
    Tensor other = full({n}, -1.0).to(kGpu);
    auto back = be.allocate_host(n * sizeof(float));
    {
      Tensor gone = t * 1.0;
      be.copy_to_host(gone.storage(), 0, *back, 0, n * sizeof(float));
    }  // freed before its copy ran: later kernels must not write its memory first
    Tensor fresh = full({n}, -2.0, {.device = kGpu});
    back->wait();
    auto* q = static_cast<const float*>(back->data());
    for (int k = 0; k < n; ++k) ASSERT_EQ(q[k], float(k + round)) << "round " << round << " element " << k;
    EXPECT_EQ(other.cpu().to_vector<float>()[0], -1.0f);
  }
}

TEST(VulkanStaging, BadArgumentsNameTheCall) {
  REQUIRE_VULKAN();
  DeviceBackend& be = device_backend(kGpu);
  Tensor t = zeros({16}, {.device = kGpu});
  auto buf = be.allocate_host(16 * sizeof(float));
  expect_error<ValueError>([&] { be.copy_to_host(t.storage(), 8, *buf, 0, 16 * sizeof(float)); },
                           "copy_to_host: bytes [8, 72) are outside the storage of 64 bytes");
  expect_error<ValueError>([&] { be.copy_from_host(*buf, buf->size(), t.storage(), 0, 4); },
                           "copy_from_host: bytes");
  Tensor c = zeros({16});
  expect_error<DeviceError>([&] { be.copy_to_host(c.storage(), 0, *buf, 0, 4); },
                            "copy_to_host: the storage is on cpu");
  auto cpu_buf = device_backend(Device::cpu()).allocate_host(64);
  expect_error<DeviceError>([&] { be.copy_from_host(*cpu_buf, 0, t.storage(), 0, 4); },
                            "copy_from_host: the host buffer belongs to cpu");
}

// Staging copies are host transfers: refused inside a capture, as reads and uploads are.
TEST(VulkanStaging, CaptureRefusesStagingCopies) {
  REQUIRE_VULKAN();
  DeviceBackend& be = device_backend(kGpu);
  Tensor t = ones({8}, {.device = kGpu});
  auto buf = be.allocate_host(8 * sizeof(float));
  expect_error<CaptureError>([&] { capture(kGpu, [&] { be.copy_to_host(t.storage(), 0, *buf, 0, 32); }); },
                             "copy_to_host: a device-to-host copy of 32 bytes");
  expect_error<CaptureError>([&] { capture(kGpu, [&] { be.copy_from_host(*buf, 0, t.storage(), 0, 32); }); },
                             "copy_from_host: a host-to-device copy of 32 bytes");
  // A replay writing what a staging copy reads waits for it.
  Tensor x = zeros({8}, {.device = kGpu});
  CapturedStep step = capture(kGpu, [&] { x.add_(1.0); });
  for (int i = 0; i < 5; ++i) {
    step.replay();
    be.copy_to_host(x.storage(), 0, *buf, 0, 32);
    buf->wait();
    EXPECT_EQ(static_cast<const float*>(buf->data())[3], float(i + 1)) << "after replay " << i + 1;
  }
}

// Contiguous pointwise ops whose operands are each f32 or f16 (casts and
// mixed operands too) take four elements per invocation where every offset is
// a multiple of 4; the last n % 4 elements, and views starting elsewhere, take the
// element loop. Both against the CPU (f16: within one rounding of the f32 result).
TEST(VulkanPointwise, QuadsTailsAndOddOffsetsMatchCpu) {
  REQUIRE_VULKAN();
  Generator gen(17);
  for (DType t : {DType::f32, DType::f16}) {
    const double tol = t == DType::f16 ? 1e-3 : 0.0;
    for (std::int64_t n : {1, 3, 4, 7, 1027}) {
      for (std::int64_t start : {0, 1, 4}) {
        const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(n) + " from " + std::to_string(start);
        Tensor a = randn({n + start}, {}, &gen).to(t).to(kGpu).narrow(0, start, n);
        Tensor b = randn({n + start}, {}, &gen).to(t).to(kGpu).narrow(0, start, n);
        const Tensor a_cpu = a.cpu(), b_cpu = b.cpu();
        auto wide = [](const Tensor& x) { return x.cpu().to(DType::f32); };
        expect_close(wide(a + b), wide(a_cpu + b_cpu), tol, what + ": add");
        expect_close(wide(a * 2.5 - b), wide(a_cpu * 2.5 - b_cpu), std::max(tol, 1e-6), what + ": scale and subtract");
        expect_close(wide(gelu(a)), wide(gelu(a_cpu)), std::max(tol, 1e-5), what + ": gelu");
        // Casts and mixed operands: each operand in its own width.
        const Tensor a32 = a.to(DType::f32);
        expect_close(a32.cpu(), a_cpu.to(DType::f32), 0, what + ": cast to f32");
        expect_close(wide(a32.to(t)), wide(a_cpu), 0, what + ": cast back");
        expect_close((a32 + b).cpu(), a_cpu.to(DType::f32) + b_cpu, 1e-6, what + ": f32 + " + std::string(dtype_name(t)));
        Tensor filled = zeros({n + start}, {.dtype = t, .device = kGpu}), want = zeros({n + start}, {.dtype = t});
        filled.narrow(0, start, n).fill_(3.25);
        want.narrow(0, start, n).fill_(3.25);
        expect_close(wide(filled), wide(want), 0, what + ": fill");
        Tensor copied = zeros({n + start}, {.dtype = t, .device = kGpu});
        copied.narrow(0, start, n).copy_(b);
        expect_close(wide(copied.narrow(0, start, n)), wide(b_cpu), 0, what + ": copy");
      }
    }
  }
}

TEST(VulkanRandom, SameStreamAsCpu) {
  REQUIRE_VULKAN();
  Generator g1(123), g2(123);
  Tensor a = rand({1000}, {}, &g1);
  Tensor b = rand({1000}, {.device = kGpu}, &g2);
  expect_close(b, a, 1e-7, "rand");
  Tensor c = bernoulli({1003}, 0.3, {}, &g1);  // not a whole number of four-element draws
  Tensor d = bernoulli({1003}, 0.3, {.device = kGpu}, &g2);
  expect_close(d, c, 0, "bernoulli");
  Tensor x = rand({2, 501});
  expect_close(dropout(x.to(kGpu), 0.4, true, &g2), dropout(x, 0.4, true, &g1), 0, "dropout");
  // The fused draw-and-multiply: a strided input, f16 (the CPU draws then
  // multiplies), p = 1, and the gradient through the saved mask. Values of
  // order one: a kept element read as dropped (or back) is far off the tolerance.
  Generator inputs(5);
  for (DType t : {DType::f32, DType::f16}) {
    for (double p : {0.25, 1.0}) {
      Tensor y = randn({7, 33}, {}, &inputs).to(t), seed = randn({33, 7}, {}, &inputs).to(t);
      std::vector<Tensor> got[2];
      for (int dev = 0; dev < 2; ++dev) {
        Generator g(77);
        Tensor yd = (dev ? y.to(kGpu) : y).detach().requires_grad_();
        Tensor out = dropout(yd.transpose(0, 1), p, true, &g);
        GradientStore grads = backward(out, dev ? seed.to(kGpu) : seed);
        got[dev] = {out.cpu().to(DType::f32), grads.get(yd).cpu().to(DType::f32)};
      }
      const std::string what = "fused dropout " + std::string(dtype_name(t)) + " p " + std::to_string(p);
      // f16: the device may round the product to f16 differently (one unit in the last place).
      const double tol = t == DType::f16 ? 2e-3 : 0.0;
      expect_close(got[1][0], got[0][0], tol, what);
      expect_close(got[1][1], got[0][1], tol, what + " gradient");
    }
  }
  EXPECT_TRUE(supports<DropoutForwardKernel>(backend(kGpu), DType::f32));
  Tensor e = randn({1000}, {}, &g1);
  Tensor f = randn({1000}, {.device = kGpu}, &g2);
  expect_close(f, e, 1e-4, "randn");
  Tensor h = randint(-5, 17, {1000}, {.dtype = DType::i64}, &g1);
  Tensor k = randint(-5, 17, {1000}, {.dtype = DType::i64, .device = kGpu}, &g2);
  expect_close(k, h, 0, "randint");
}

TEST(VulkanGemm, SplitKWithAlphaAndBeta) {
  REQUIRE_VULKAN();
  Generator gen(6);
  Tensor a = rand({2, 6, 1200}, {}, &gen), b = rand({2, 9, 1200}, {}, &gen), c = rand({2, 6, 9}, {}, &gen);
  Tensor ga = a.to(kGpu), gb = b.to(kGpu), gc = c.to(kGpu);
  for (auto* t : {&c, &gc}) {
    const bool gpu = t == &gc;
    GemmArgs args = GemmArgs::packed(arg_of(gpu ? ga : a), arg_of(gpu ? gb : b), arg_of(*t), 6, 9, 1200,
                                     {.trans_b = true, .batch = 2});
    args.alpha = 0.5;
    args.beta = 2.0;
    run_kernel<GemmKernel>(backend(t->device()), args);
  }
  expect_close(gc, c, 1e-4, "split-K gemm with alpha and beta");
}

// Split K (few output tiles, K >= 256): each tile's slices meet in the GEMM
// kernel, whose last slice runs the epilogue. One kernel per product with
// alpha, beta, a bias, the ReLU and f16, on whole and ragged tiles and
// batches, against the CPU; the same bits at every launch and every replay
// (the tile counters return to 0).
TEST(VulkanGemm, SplitKSlicesMeetInOneKernel) {
  REQUIRE_VULKAN();
  Generator gen(9);
  struct Case {
    std::int64_t batch, m, n, k;
    bool relu;
    DType out;
  };
  for (const Case& c : {Case{1, 64, 64, 1024, true, DType::f32}, Case{2, 6, 9, 1200, false, DType::f32},
                        Case{1, 64, 512, 512, true, DType::f32}, Case{1, 37, 70, 700, true, DType::f16},
                        Case{1, 64, 192, 131072, false, DType::f32},  // a long K: 32 x 32 tiles, 16 slices
                        Case{1, 64, 128, 9216, true, DType::f32},     // a classifier's 9,216 inputs, as above
                        Case{16, 64, 32, 16384, false, DType::f32},  // Winograd's weight pass: 16 small products
                        Case{1, 512, 10, 512, true, DType::f32}}) {  // a classifier's 10 outputs: 32 x 32 tiles
    const std::string what = std::to_string(c.batch) + " x " + std::to_string(c.m) + " x " + std::to_string(c.n) +
                             " x " + std::to_string(c.k) + " " + std::string(dtype_name(c.out));
    Tensor a = rand({c.batch, c.m, c.k}, {}, &gen) - 0.5, b = rand({c.batch, c.n, c.k}, {}, &gen) - 0.5;
    Tensor c0 = rand({c.batch, c.m, c.n}, {}, &gen), bias = (rand({c.n}, {}, &gen) - 0.5).to(c.out).to(DType::f32);
    a = a.to(c.out).to(DType::f32), b = b.to(c.out).to(DType::f32);  // what the GPU holds (f16 in, f16 out)
    c0 = c0.to(c.out).to(DType::f32);
    Tensor want = matmul(a, b.transpose(1, 2)) * 0.5 + c0 * 2.0 + bias;
    if (c.relu) want = relu(want);
    const Tensor ga = a.to(c.out).to(kGpu), gb = b.to(c.out).to(kGpu), gbias = bias.to(c.out).to(kGpu);
    auto launch = [&] {
      Tensor gc = c0.to(c.out).to(kGpu);
      GemmArgs args = GemmArgs::packed(arg_of(ga), arg_of(gb), arg_of(gc), c.m, c.n, c.k,
                                       {.trans_b = true, .batch = c.batch});
      args.alpha = 0.5;
      args.beta = 2.0;
      args.bias = arg_of(gbias);
      args.relu = c.relu;
      synchronize(kGpu);
      const std::uint64_t before = device_stats(kGpu).commands;
      run_kernel<GemmKernel>(backend(kGpu), args);
      // (f16 runs on the matrix units where the device has them: a ReLU pass after.)
      const auto& vk = static_cast<vulkan::VulkanBackend&>(backend(kGpu));
      if (!vulkan::coopmat_gemm_applies(vk.context(), args)) EXPECT_EQ(device_stats(kGpu).commands - before, 1u) << what;
      return gc.cpu().to(DType::f32);
    };
    const Tensor first = launch();
    expect_close(first, want, c.out == DType::f16 ? 1e-2 : 1e-4, "split-K gemm " + what);
    expect_close(launch(), first, 0, "split-K gemm launched again " + what);
  }
  // Captured: replays reuse the counters the capture bound.
  Tensor x = (rand({64, 1024}, {}, &gen) - 0.5).to(kGpu), w = (rand({48, 1024}, {}, &gen) - 0.5).to(kGpu);
  Tensor bias = rand({48}, {}, &gen).to(kGpu), y;
  const Tensor want = linear(x, w, bias).cpu();
  CapturedStep step = capture(kGpu, [&] { y = linear(x, w, bias); });
  for (int i = 0; i < 3; ++i) {
    step.replay();
    expect_close(y, want, 0, "split-K linear, replay " + std::to_string(i));
  }
}

namespace {
// A batched product's shape for the GEMM tests, with A and/or B stored transposed.
struct GemmCase {
  std::int64_t batch, m, n, k;
  std::string name(bool ta, bool tb) const {
    return std::to_string(batch) + " x " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
           (ta ? " A^T" : "") + (tb ? " B^T" : "");
  }
  // Random operands in [-0.5, 0.5) as stored: A [batch, m, k] (or [batch, k, m]), then B.
  std::pair<Tensor, Tensor> operands(bool ta, bool tb, Generator& gen) const {
    Tensor a = rand(ta ? Shape{batch, k, m} : Shape{batch, m, k}, {}, &gen) - 0.5;
    Tensor b = rand(tb ? Shape{batch, n, k} : Shape{batch, k, n}, {}, &gen) - 0.5;
    return {a, b};
  }
};
// op(A) op(B) of stored operands, on the CPU.
Tensor product_of(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  return matmul(ta ? a.transpose(1, 2) : a, tb ? b.transpose(1, 2) : b);
}
}  // namespace

// Products over a K of 64 or less (Winograd's products over 64 channels, a
// weight gradient over a batch of 64), most on 64 x 64 tiles whose groups
// each take a quarter of a slice: aligned, ragged in whole vec4s, ragged in
// scalars, batched, every transpose, and f16 operands (as under autocast).
TEST(VulkanGemm, ShortKMatchesCpu) {
  REQUIRE_VULKAN();
  Generator gen(21);
  for (const GemmCase& c : {GemmCase{1, 128, 192, 64}, GemmCase{1, 200, 300, 40}, GemmCase{1, 130, 70, 7},
                            GemmCase{4, 64, 320, 64}, GemmCase{2, 100, 90, 16}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::string what = c.name(ta, tb);
      const auto [a, b] = c.operands(ta, tb, gen);
      for (DType dt : {DType::f32, DType::f16}) {
        const Tensor ga = a.to(dt).to(kGpu), gb = b.to(dt).to(kGpu);
        Tensor gc = zeros({c.batch, c.m, c.n}, {.device = kGpu});
        run_kernel<GemmKernel>(backend(kGpu), GemmArgs::packed(arg_of(ga), arg_of(gb), arg_of(gc), c.m, c.n, c.k,
                                                               {.trans_a = ta, .trans_b = tb, .batch = c.batch}));
        const Tensor ra = a.to(dt).to(DType::f32), rb = b.to(dt).to(DType::f32);  // the operands as the GPU holds them
        expect_close(gc.cpu(), product_of(ra, rb, ta, tb), 1e-4, std::string("short-K gemm ") + std::string(dtype_name(dt)) + " " + what);
      }
    }
  }
}

// A long K over 64 or more tiles of 128 x 128 keeps those tiles, unsplit
// (gemm.cpp's long_k): aligned, and ragged in M and N, both transposes, against the CPU.
TEST(VulkanGemm, LongKOnWholeTilesMatchesCpu) {
  REQUIRE_VULKAN();
  Generator gen(23);
  for (const GemmCase& c : {GemmCase{1, 1024, 1024, 1024}, GemmCase{1, 1030, 1100, 1028}}) {
    for (int t : {0, 3}) {
      const bool ta = t & 1, tb = t & 2;
      const auto [a, b] = c.operands(ta, tb, gen);
      Tensor gc = zeros({c.batch, c.m, c.n}, {.device = kGpu});
      run_kernel<GemmKernel>(backend(kGpu), GemmArgs::packed(arg_of(a.to(kGpu)), arg_of(b.to(kGpu)), arg_of(gc), c.m,
                                                             c.n, c.k, {.trans_a = ta, .trans_b = tb, .batch = c.batch}));
      expect_close(gc.cpu(), product_of(a, b, ta, tb), 1e-4, "long-K gemm " + c.name(ta, tb));
    }
  }
}

// Ragged shapes whose rows are whole vec4s (the MLP's 784-wide products) take
// bounds-checked vec4 fetches: edge tiles in M and N, a last K-step past K,
// both transposes of each operand, batches, split K, a bias and the ReLU,
// against the CPU. Each operand sits in a NaN-filled buffer with 4 more
// columns and 32 more rows than it uses: a fetch past K reads NaN.
TEST(VulkanGemm, RaggedShapesOfWholeVec4sMatchTheCpu) {
  REQUIRE_VULKAN();
  Generator gen(12);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // The operand in the top-left corner of a NaN buffer on the GPU, and its leading dim and batch stride.
  auto padded = [&](const Tensor& t, std::int64_t& ld, std::int64_t& stride) {
    const std::int64_t batch = t.shape()[0], rows = t.shape()[1], cols = t.shape()[2];
    Tensor p = full({batch, rows + 32, cols + 4}, nan);
    p.narrow(1, 0, rows).narrow(2, 0, cols).copy_(t);
    ld = cols + 4;
    stride = (rows + 32) * (cols + 4);
    return p.to(kGpu);
  };
  for (const GemmCase& c : {GemmCase{1, 68, 132, 196}, GemmCase{1, 512, 512, 784}, GemmCase{1, 512, 784, 512},
                            GemmCase{3, 20, 36, 44}, GemmCase{1, 60, 44, 2052}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const std::string what = c.name(ta, tb);
      const auto [a, b] = c.operands(ta, tb, gen);
      Tensor bias = rand({c.n}, {}, &gen) - 0.5;
      Tensor want = relu(product_of(a, b, ta, tb) + bias);
      Tensor gc = zeros({c.batch, c.m, c.n}, {.device = kGpu});
      std::int64_t lda = 0, ldb = 0, stride_a = 0, stride_b = 0;
      const Tensor ga = padded(a, lda, stride_a), gb = padded(b, ldb, stride_b), gbias = bias.to(kGpu);
      GemmArgs args = GemmArgs::packed(arg_of(ga), arg_of(gb), arg_of(gc), c.m, c.n, c.k,
                                       {.trans_a = ta, .trans_b = tb, .batch = c.batch});
      args.lda = lda;
      args.ldb = ldb;
      args.stride_a = stride_a;
      args.stride_b = stride_b;
      args.bias = arg_of(gbias);
      args.relu = true;
      run_kernel<GemmKernel>(backend(kGpu), args);
      expect_close(gc.cpu(), want, 1e-4, "ragged vec4 gemm " + what);
    }
  }
}

// A bias with alpha and beta, at the kernel level, on both backends against
// the formula: the epilogue (a shape whose tiles divide it) and the copy path
// (split-K on Vulkan, and the CPU), where the bias is added after the product.
TEST(VulkanGemm, BiasWithAlphaAndBetaMatchesTheFormula) {
  REQUIRE_VULKAN();
  Generator gen(8);
  for (auto [m, n, k] : {std::array<std::int64_t, 3>{64, 64, 32}, {6, 9, 1200}}) {
    Tensor a = rand({m, k}, {}, &gen), b = rand({n, k}, {}, &gen), c0 = rand({m, n}, {}, &gen);
    Tensor bias = rand({n}, {}, &gen);
    Tensor want = matmul(a, b.t()) * 0.5 + c0 * 2.0 + bias;
    for (const Device dev : {Device::cpu(), kGpu}) {
      Tensor ad = a.to(dev), bd = b.to(dev), cd = c0.to(dev).clone(), biasd = bias.to(dev);
      GemmArgs args = GemmArgs::packed(arg_of(ad), arg_of(bd), arg_of(cd), m, n, k, {.trans_b = true});
      args.alpha = 0.5;
      args.beta = 2.0;
      args.bias = arg_of(biasd);
      run_kernel<GemmKernel>(backend(dev), args);
      expect_close(cd, want, 1e-4, "gemm with bias, alpha and beta on " + dev.str() + ", k " + std::to_string(k));
    }
  }
}

// A small MLP trained with the fused SGD kernel, identical on both devices.
struct Mlp {
  std::vector<Tensor> params, momentum;
  explicit Mlp(Device d, DType dt = DType::f32) {
    Generator gen(3);
    for (Shape s : {Shape{8, 16}, Shape{16}, Shape{16, 4}, Shape{4}}) {
      params.push_back((randn(s, {}, &gen) * 0.3).to(dt).to(d).requires_grad_());
      momentum.push_back(zeros(s, {.dtype = dt, .device = d}));
    }
  }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    Tensor h = relu(add(matmul(x, params[0]), params[1]));
    return mse_loss(add(matmul(h, params[2]), params[3]), y);
  }
  Tensor step(const Tensor& x, const Tensor& y, int i) {
    Tensor l = loss(x, y);
    GradientStore grads = backward(l);
    for (std::size_t k = 0; k < params.size(); ++k)
      sgd_step_(params[k], grads.at(params[k]), momentum[k], {.lr = 0.05, .momentum = 0.9, .first = i == 0});
    return l;
  }
};

TEST(VulkanTraining, NoTransfersButTheLossAndSameCurveAsCpu) {
  REQUIRE_VULKAN();
  Generator gen(11);
  Tensor x = randn({32, 8}, {}, &gen), y = randn({32, 4}, {}, &gen);
  Mlp cpu(Device::cpu()), gpu(kGpu);
  Tensor gx = x.to(kGpu), gy = y.to(kGpu);
  synchronize(kGpu);
  for (int i = 0; i < 5; ++i) {
    DeviceStats before = device_stats(kGpu);
    double lg = gpu.step(gx, gy, i).item();
    DeviceStats after = device_stats(kGpu);
    double lc = cpu.step(x, y, i).item();
    EXPECT_EQ(after.host_to_device - before.host_to_device, 0u) << "step " << i;
    EXPECT_EQ(after.device_to_host - before.device_to_host, 1u) << "step " << i << ": only the loss is read";
    EXPECT_LE(after.submits - before.submits, (after.commands - before.commands) / 16 + 1)
        << "step " << i << ": commands go in batches, not one submission each";
    EXPECT_NEAR(lg, lc, 1e-4 * std::max(1.0, std::abs(lc))) << "step " << i;
  }
}

// After a host read the device has nothing to run: the next commands go to
// it before the host reads again, so it works while the host records.
TEST(VulkanTraining, IdleDeviceGetsWorkBeforeTheNextRead) {
  REQUIRE_VULKAN();
  Tensor x = ones({64}, {.device = kGpu});
  synchronize(kGpu);
  const DeviceStats before = device_stats(kGpu);
  Tensor y = x;
  for (int i = 0; i < 40; ++i) y = y + 1.0;
  const DeviceStats after = device_stats(kGpu);
  EXPECT_GE(after.commands - before.commands, 40u);
  EXPECT_GE(after.submits - before.submits, 1u) << "40 kernels recorded on an idle device and none submitted";
  EXPECT_LE(after.submits - before.submits, (after.commands - before.commands) / 16);
  EXPECT_EQ(after.device_to_host, before.device_to_host);
  EXPECT_DOUBLE_EQ(y.to(Device::cpu()).to_vector<float>()[63], 41.0);
}

// A small CNN with every layer kind of the examples (conv, relu, max-pool,
// dropout, linear, cross-entropy) and the library's SGD with momentum.
struct TinyCnn : nn::Module {
  nn::Conv2d conv{1, 4, 3};
  nn::Dropout drop{0.25};
  nn::Linear fc{4 * 3 * 3, 5};
  TinyCnn() { register_modules({{"conv", conv}, {"drop", drop}, {"fc", fc}}); }
  Tensor forward(const Tensor& x) override { return fc(drop(max_pool2d(relu(conv(x)), 2)).flatten(1)); }
};

std::vector<double> train_cnn(Device dev, int steps, std::vector<DeviceStats>* stats, DType dtype = DType::f32) {
  manual_seed(0);  // same initialisation and dropout masks on every device
  TinyCnn net;
  net.to(dev, dtype);
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator gen(21);
  Tensor x = randn({8, 1, 8, 8}, {}, &gen).to(dtype).to(dev);
  Tensor y = randint(0, 5, {8}, {.dtype = DType::i64}, &gen).to(dev);
  synchronize(dev);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    if (stats) stats->push_back(device_stats(dev));
    Tensor loss = cross_entropy(net.forward(x), y);
    opt.step(backward(loss));
    losses.push_back(loss.item());
  }
  if (stats) stats->push_back(device_stats(dev));
  return losses;
}

TEST(VulkanTraining, CnnStepReadsOnlyTheLossAndMatchesCpu) {
  REQUIRE_VULKAN();
  std::vector<DeviceStats> stats;
  auto gpu = train_cnn(kGpu, 5, &stats);
  auto cpu = train_cnn(Device::cpu(), 5, nullptr);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::max(1.0, std::abs(cpu[i]))) << "step " << i;
    EXPECT_EQ(stats[i + 1].host_to_device - stats[i].host_to_device, 0u) << "step " << i;
    EXPECT_EQ(stats[i + 1].device_to_host - stats[i].device_to_host, 1u) << "step " << i << ": only the loss is read";
    EXPECT_LE(stats[i + 1].submits - stats[i].submits, (stats[i + 1].commands - stats[i].commands) / 16 + 1)
        << "step " << i << ": commands go in batches, not one submission each";
  }
  EXPECT_LT(gpu.back(), gpu.front());
}

// A checkpoint saved from a Vulkan model and optimizer loads into another
// Vulkan model and optimizer, which then trains exactly like the original.
TEST(VulkanIo, CheckpointRoundTripContinuesTraining) {
  REQUIRE_VULKAN();
  const std::string path = ::testing::TempDir() + "vulkan_cnn.ckpt.safetensors";
  manual_seed(0);
  TinyCnn a;
  a.to(kGpu);
  optim::SGD opt_a(a.parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator gen(21);
  Tensor x = randn({8, 1, 8, 8}, {}, &gen).to(kGpu);
  Tensor y = randint(0, 5, {8}, {.dtype = DType::i64}, &gen).to(kGpu);
  for (int i = 0; i < 2; ++i) opt_a.step(backward(cross_entropy(a.forward(x), y)));
  io::save_checkpoint(path, a, opt_a, {.epoch = 1, .step = 2});

  TinyCnn b;  // different initial weights
  b.to(kGpu);
  optim::SGD opt_b(b.parameters(), {.lr = 0.1, .momentum = 0.9});
  io::TrainingState s = io::load_checkpoint(path, b, opt_b);
  EXPECT_EQ(s.step, 2);
  // One more step on each, without dropout so both draw the same masks.
  a.eval();
  b.eval();
  opt_a.step(backward(cross_entropy(a.forward(x), y)));
  opt_b.step(backward(cross_entropy(b.forward(x), y)));
  auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pb[i].second.device(), kGpu) << pb[i].first;
    expect_close(pb[i].second, pa[i].second, 1e-6, pb[i].first);
  }
  std::remove(path.c_str());
}

TEST(VulkanMemory, ThousandStepsKeepBytesInUseFlat) {
  REQUIRE_VULKAN();
  Generator gen(12);
  Tensor x = randn({32, 8}, {.device = kGpu}, &gen), y = randn({32, 4}, {.device = kGpu}, &gen);
  Mlp net(kGpu);
  DeviceStats warm;
  for (int i = 0; i < 1000; ++i) {
    net.step(x, y, i);
    if (i % 100 == 99) synchronize(kGpu);  // let deferred frees return to the free lists
    if (i == 99) warm = device_stats(kGpu);
  }
  synchronize(kGpu);
  DeviceStats end = device_stats(kGpu);
  EXPECT_EQ(end.bytes_in_use, warm.bytes_in_use);
  EXPECT_EQ(end.blocks, warm.blocks);
  EXPECT_EQ(end.bytes_reserved, warm.bytes_reserved);
  EXPECT_GT(end.blocks, 0u);
  EXPECT_GE(end.peak_bytes_in_use, end.bytes_in_use);
}

TEST(VulkanMemory, FreedBuffersAreReused) {
  REQUIRE_VULKAN();
  synchronize(kGpu);
  {
    Tensor t = zeros({1000}, {.device = kGpu});
  }
  synchronize(kGpu);
  DeviceStats a = device_stats(kGpu);
  for (int i = 0; i < 100; ++i) {
    Tensor t = zeros({1000}, {.device = kGpu});
    synchronize(kGpu);
  }
  DeviceStats b = device_stats(kGpu);
  EXPECT_EQ(a.bytes_reserved, b.bytes_reserved);
  EXPECT_EQ(a.bytes_in_use, b.bytes_in_use);
}

TEST(VulkanErrors, UnsupportedOpNamesTheOp) {
  REQUIRE_VULKAN();
  // Fused attention has f32 kernels only.
  Tensor q = ones({1, 2, 4}, {.dtype = DType::f64, .device = kGpu});
  try {
    scaled_dot_product_attention(q, q, q);
    FAIL() << "f64 attention on Vulkan should throw";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("scaled_dot_product_attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("attention_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos) << e.what();
  }
}

TEST(VulkanErrors, BadDeviceIndex) {
  REQUIRE_VULKAN();
  try {
    zeros({2}, {.device = Device::vulkan(999)});
    FAIL() << "vulkan:999 should not exist";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
  }
}

TEST(VulkanErrors, MixingDevices) {
  REQUIRE_VULKAN();
  Tensor a = ones({2}), b = ones({2}, {.device = kGpu});
  try {
    add(a, b);
    FAIL() << "adding a cpu and a vulkan tensor should throw";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
}

// Several Vulkan devices in one process: each has its own context, memory and
// stream. Needs a machine with two devices; skipped elsewhere.
TEST(VulkanDevice, TwoDevicesInOneProcess) {
  REQUIRE_VULKAN();
  const Device second = Device::vulkan(1);
  try {
    device_backend(second);
  } catch (const DeviceError&) {
    GTEST_SKIP() << "one Vulkan device only";
  }
  manual_seed(5);
  Tensor a = randn({33, 17}), b = randn({17, 9});
  Tensor want = matmul(a, b);
  Tensor on0 = matmul(a.to(kGpu), b.to(kGpu));
  Tensor on1 = matmul(a.to(second), b.to(second));
  EXPECT_EQ(on1.device(), second);
  expect_close(on0.cpu(), want, 1e-5, "matmul on vulkan:0");
  expect_close(on1.cpu(), want, 1e-5, "matmul on vulkan:1");
  expect_close(on0.to(second).cpu(), want, 1e-5, "vulkan:0 -> vulkan:1 transfer");
  EXPECT_THROW(add(on0, on1), DeviceError);

  // One thread per device, each training its own copy at the same time.
  auto train = [&](Device dev, double* loss_out) {
    Tensor w = zeros({17, 9}, {.device = dev, .requires_grad = true});
    Tensor x = a.to(dev), y = want.to(dev);
    Tensor loss;
    for (int step = 0; step < 20; ++step) {
      loss = mse_loss(matmul(x, w), y);
      GradientStore g = backward(loss);
      NoGradGuard no_grad;
      w.add_(g.at(w), -0.05);
    }
    *loss_out = loss.item();
  };
  double loss0 = 0, loss1 = 0;
  std::thread t0(train, kGpu, &loss0), t1(train, second, &loss1);
  t0.join();
  t1.join();
  EXPECT_NEAR(loss0, loss1, 1e-5 * std::max(1.0, loss0));
  EXPECT_LT(loss0, mean(square(want)).item());
}

// synchronize_all drains every device the process has used (the test
// executables call it before exiting: see tests/drain_devices.cpp).
TEST(VulkanDevice, SynchronizeAllDrainsEveryUsedDevice) {
  REQUIRE_VULKAN();
  Tensor a = rand({64, 64}, {.device = kGpu});
  Tensor b = matmul(a, a);
  const std::uint64_t before = device_stats(kGpu).queue_drains;
  synchronize_all();
  EXPECT_EQ(device_stats(kGpu).queue_drains, before + 1);
  expect_close(b.cpu(), matmul(a.cpu(), a.cpu()), 1e-4, "the product drained");
}

TEST(VulkanDevice, BestSkipsSoftwareDevices) {
  REQUIRE_VULKAN();
  Device best = Device::best();
  if (!best.is_cpu()) SUCCEED() << "a hardware Vulkan device is present";
  // best() is a listed device and never a software rasteriser.
  std::vector<DeviceInfo> devices = Device::list();
  ASSERT_FALSE(devices.empty());
  EXPECT_EQ(devices.front().device, Device::cpu());
  bool listed = false;
  for (const DeviceInfo& d : devices) listed = listed || d.device == best;
  EXPECT_TRUE(listed) << best.str();
  EXPECT_NO_THROW(device_backend(best));
  for (const DeviceInfo& d : devices)
    if (d.device == best && !best.is_cpu())
      EXPECT_EQ(d.name.find("llvmpipe"), std::string::npos) << "best() chose the software device " << d.name;
}

TEST(VulkanDevice, ListNamesEveryDevice) {
  REQUIRE_VULKAN();
  int vulkan_devices = 0;
  for (const DeviceInfo& d : Device::list()) {
    EXPECT_FALSE(d.name.empty()) << d.device.str();
    if (!d.device.is_cpu()) {
      ++vulkan_devices;
      EXPECT_NO_THROW(device_backend(d.device)) << d.name;
    }
  }
  EXPECT_GE(vulkan_devices, 1);
}

// Every kernel the device says it lacks makes the op that needs it throw the
// one DeviceError naming the op, the kernel and the dtype; the list is printed.
TEST(VulkanDevice, OpsNameWhatTheDeviceLacks) {
  REQUIRE_VULKAN();
  Backend& be = backend(kGpu);
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32,
                          DType::i64, DType::u8,  DType::i8,  DType::i16,  DType::boolean};
  std::string lacks;
  for (const RegisteredKernel& k : registered_kernels())
    for (DType dt : dtypes)
      if (!k.supports(be, dt)) lacks += std::string(k.name) + "/" + std::string(dtype_name(dt)) + " ";
  std::cout << "vulkan:0 lacks: " << (lacks.empty() ? "nothing" : lacks) << "\n";
  // f64 arithmetic runs in double wherever the device has shaderFloat64 (which the context requires).
  expect_supports<UnaryKernel, BinaryKernel, WhereKernel, ReduceKernel, GemmKernel, SoftmaxForwardKernel,
                  SoftmaxBackwardKernel, Im2colKernel, Col2imKernel, Pool2dForwardKernel, Pool2dBackwardKernel,
                  RandomKernel>(be, DType::f64, true);
  // The fused optimizer kernels take f32; ops compose the update for other dtypes.
  expect_supports<SgdStepKernel, AdamStepKernel>(be, DType::f32, true);
  expect_supports<SgdStepKernel, AdamStepKernel>(be, DType::f64, false);
  if (!supports<AttentionForwardKernel>(be, DType::f64))
    expect_error<DeviceError>([] {
      Tensor q = ones({1, 2, 4}, {.dtype = DType::f64, .device = kGpu});
      scaled_dot_product_attention(q, q, q);
    }, "scaled_dot_product_attention: device vulkan:0 has no attention_forward kernel for f64 tensors");
  if (!supports<IndexAddKernel>(be, DType::f64))  // no 64-bit float or integer atomics
    expect_error<DeviceError>([] {
      Tensor w = ones({5, 3}, {.dtype = DType::f64, .device = kGpu}).requires_grad_();
      Tensor idx = tensor(std::vector<double>{1, 3}, {2}).to(DType::i64).to(kGpu);
      backward(sum(embedding(idx, w)));
    }, "has no index_add kernel for f64 tensors");
  if (!supports<IndexAddKernel>(be, DType::f16))
    expect_error<DeviceError>([] {
      Tensor w = ones({5, 3}, {.dtype = DType::f16, .device = kGpu}).requires_grad_();
      Tensor idx = tensor(std::vector<double>{1, 3}, {2}).to(DType::i64).to(kGpu);
      backward(sum(embedding(idx, w)));
    }, "has no index_add kernel for f16 tensors");
}

}  // namespace

// Every code of the shared lists (src/backend/kernel_codes.hpp) runs on the
// Vulkan kernels and agrees with the CPU: a list and its shader numbering can
// never drift apart unnoticed.
namespace {
TensorArg full_arg(const Tensor& t) { return {t.storage_ptr().get(), t.dtype(), &t.layout()}; }

Tensor on_each(Device dev, const Tensor& like) { return zeros(like.shape(), {.dtype = like.dtype(), .device = dev}); }
}  // namespace

namespace {
// Every code on both devices in `dt`; `scalar` is the ops' parameter (f64
// passes one float cannot hold, so a parameter rounded on the way shows).
void check_every_code(DType dt, double tol, double scalar) {
  Generator gen(21);
  // Positive inputs keep log, sqrt, rsqrt and pow defined.
  Tensor a = uniform({3, 37}, 0.25, 2.0, {}, &gen).to(dt), b = uniform({3, 37}, 0.25, 2.0, {}, &gen).to(dt);
  const std::string in = std::string(" in ") + std::string(dtype_name(dt));
  for (int code = 0; code < kUnaryOpCount; ++code) {
    const UnaryOp op = UnaryOp(code);
    const double p0 = op == UnaryOp::clamp ? scalar - 1 : scalar, p1 = op == UnaryOp::clamp ? scalar : 0.0;
    // tan's pole (pi / 2) lies in a's range: there one ulp of x moves tan by
    // more than the tolerance, and a GPU's f32 tan differs by that much
    // (NVIDIA's, at tan = -885), so tan takes inputs up to 1.5.
    const Tensor x = op == UnaryOp::tan ? a * 0.75 : a;
    Tensor want = on_each(Device::cpu(), x), ga = x.to(kGpu), got = on_each(kGpu, x);
    run_kernel<UnaryKernel>(backend(Device::cpu()), op, full_arg(want), full_arg(x), p0, p1);
    run_kernel<UnaryKernel>(backend(kGpu), op, full_arg(got), full_arg(ga), p0, p1);
    expect_close(got.cpu(), want, tol, "unary " + std::string(name_of(op)) + in);
  }
  for (int code = 0; code < kBinaryOpCount; ++code) {
    const BinaryOp op = BinaryOp(code);
    // Comparisons write bool tensors, as the ops ask them to.
    const bool compare = op >= BinaryOp::eq && op <= BinaryOp::ge;
    Tensor out_like = compare ? a.to(DType::boolean) : a;
    Tensor want = on_each(Device::cpu(), out_like), ga = a.to(kGpu), gb = b.to(kGpu), got = on_each(kGpu, out_like);
    run_kernel<BinaryKernel>(backend(Device::cpu()), op, full_arg(want), full_arg(a), full_arg(b), scalar - 1, scalar);
    run_kernel<BinaryKernel>(backend(kGpu), op, full_arg(got), full_arg(ga), full_arg(gb), scalar - 1, scalar);
    expect_close(got.cpu(), want, tol, "binary " + std::string(name_of(op)) + in);
  }
  for (int code = 0; code < kReduceOpCount; ++code) {
    const ReduceOp op = ReduceOp(code);
    const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
    const TensorOptions o{.dtype = is_arg ? DType::i64 : dt};
    Tensor want = zeros({3, 1}, o), got = zeros({3, 1}, {.dtype = o.dtype, .device = kGpu}), ga = a.to(kGpu);
    run_kernel<ReduceKernel>(backend(Device::cpu()), op, full_arg(want), full_arg(a));
    run_kernel<ReduceKernel>(backend(kGpu), op, full_arg(got), full_arg(ga));
    expect_close(got.cpu(), want, tol, "reduce " + std::string(name_of(op)) + in);
  }
}
}  // namespace

TEST(VulkanCodes, EveryUnaryBinaryAndReduceCodeMatchesCpu) {
  REQUIRE_VULKAN();
  check_every_code(DType::f32, 1e-5, 1.5);
  check_every_code(DType::f64, 1e-14, 1.1);
}

// Out-of-range indices on the GPU: the gather kernel records them and the
// ShapeError comes at the host's next wait; the record is then cleared.
TEST(VulkanIndices, OutOfRangeIsAnErrorAtTheNextWait) {
  REQUIRE_VULKAN();
  Tensor weight = ones({5, 3}, {.device = kGpu, .requires_grad = true});
  Tensor bad = tensor({1.0, 7.0}).to(DType::i64).to(kGpu);
  expect_error<ShapeError>([&] { embedding(bad, weight).cpu(); },
                           "index_select: index 7 is out of range for a dim of size 5");
  Tensor negative = tensor({-1.0, 0.0}).to(DType::i64).to(kGpu);
  expect_error<ShapeError>([&] { cross_entropy(zeros({2, 4}, {.device = kGpu}), negative).item(); },
                           "nll_loss: index -1 is out of range for a dim of size 4");
  // The composition (class weights) gathers with index_select, which checks too.
  expect_error<ShapeError>(
      [&] { cross_entropy(zeros({2, 4}, {.device = kGpu}), negative, {.weight = ones({4}, {.device = kGpu})}).item(); },
      "index_select: index -1 is out of range for a dim of size 4");
  // The gradient's scatter checks too.
  Tensor loss = sum(embedding(tensor({2.0, 9.0}).to(DType::i64).to(kGpu), weight));
  expect_error<ShapeError>([&] { backward(loss); synchronize(kGpu); }, "is out of range for a dim of size 5");
  Tensor fine = tensor({4.0, 0.0}).to(DType::i64).to(kGpu);
  EXPECT_EQ(embedding(fine, weight).cpu().to_vector<float>(), std::vector<float>(6, 1.0f));
  EXPECT_NO_THROW(synchronize(kGpu));
}

// gather and scatter_add record their bad indices under their own names.
TEST(VulkanIndices, GatherAndScatterAddNameTheirFaults) {
  REQUIRE_VULKAN();
  Tensor x = ones({2, 3}, {.device = kGpu});
  Tensor bad = tensor(std::vector<std::int64_t>{0, 5}, {2, 1}).to(kGpu);
  expect_error<ShapeError>([&] { gather(x, 1, bad).cpu(); }, "gather: index 5 is out of range for a dim of size 3");
  expect_error<ShapeError>([&] { scatter_add(x, 1, bad, ones({2, 1}, {.device = kGpu})).cpu(); },
                           "scatter_add: index 5 is out of range for a dim of size 3");
  Tensor fine = tensor(std::vector<std::int64_t>{2, 2}, {2, 1}).to(kGpu);
  EXPECT_EQ(scatter_add(x, 1, fine, ones({2, 1}, {.device = kGpu})).cpu().to_vector<float>(),
            (std::vector<float>{1, 1, 2, 1, 1, 2}));
  expect_error<DeviceError>([&] { scatter_add(x.to(DType::i32), 1, fine, ones({2, 1}, {.dtype = DType::i32, .device = kGpu})); },
                            "scatter_add: device vulkan:0 has no scatter_add kernel for i32 tensors");
}

// ---- fused attention on the device ----

namespace {

Tensor attention_unfused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.shape().back())));
  return matmul(softmax(s + bias, -1), v);
}

}  // namespace

TEST(VulkanAttention, MatchesUnfusedOnTheDeviceWithCausalAndPaddingMasks) {
  REQUIRE_VULKAN();
  // Lengths that no workgroup size divides; a (B, 1, 1, Lk) padding mask and the causal rule.
  const std::int64_t B = 2, H = 2, Lq = 37, Lk = 70, D = 8;
  Generator gen(1);
  Tensor q = randn({B, H, Lq, D}, {}, &gen), k = randn({B, H, Lk, D}, {}, &gen), v = randn({B, H, Lk, D}, {}, &gen);
  Tensor seed = randn({B, H, Lq, D}, {}, &gen);
  std::vector<std::uint8_t> keep(std::size_t(B * Lk), 1), tril(std::size_t(Lq * Lk));
  for (std::int64_t j = 50; j < Lk; ++j) keep[std::size_t(j)] = 0;
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t j = 0; j < Lk; ++j) tril[std::size_t(i * Lk + j)] = j <= i;
  Tensor padding = tensor(keep, {B, 1, 1, Lk}), causal = tensor(tril, {Lq, Lk});
  struct Case {
    const char* name;
    Tensor mask;
    bool is_causal;
    Tensor bias;
  };
  const Case cases[] = {{"padding", padding, false, (padding.to(DType::f32) - 1.0) * 1e30},
                        {"causal", {}, true, (causal.to(DType::f32) - 1.0) * 1e30}};
  for (const Case& c : cases) {
    std::vector<Tensor> results;
    for (bool fused : {true, false}) {
      Tensor qg = q.to(kGpu).requires_grad_(), kg = k.to(kGpu).requires_grad_(), vg = v.to(kGpu).requires_grad_();
      Tensor out = fused ? scaled_dot_product_attention(qg, kg, vg, c.mask.defined() ? c.mask.to(kGpu) : Tensor(),
                                                        0.0, c.is_causal)
                         : attention_unfused(qg, kg, vg, c.bias.to(kGpu));
      GradientStore g = backward(out, seed.to(kGpu));
      for (const Tensor& t : {out, g.get(qg), g.get(kg), g.get(vg)}) {
        EXPECT_EQ(t.device(), kGpu) << c.name;
        results.push_back(t.cpu());
      }
    }
    for (int i = 0; i < 4; ++i) expect_close(results[std::size_t(i)], results[std::size_t(4 + i)], 1e-4, c.name);
  }
}

// The device kernels against the CPU's: the tiled kernel (head dims up to 128,
// rows past one workgroup, tiles that do not divide the lengths, different
// q/k and v widths), the wide fallback (head dim 160), with an additive float
// mask, the causal rule with lq != lk, and dropout drawing the same weights.
TEST(VulkanAttention, TiledAndWideKernelsAgreeWithCpu) {
  REQUIRE_VULKAN();
  struct Case {
    std::int64_t lq, lk, d, dv;
    bool causal, float_mask;
    double dropout;
    bool side_by_side = false;  // q, k, v and their gradients as views of [B, L, H, D]
  };
  const Case cases[] = {{130, 97, 24, 40, false, true, 0.0}, {70, 70, 64, 64, true, false, 0.0},
                        {65, 33, 16, 16, true, false, 0.3},  {37, 45, 160, 8, false, true, 0.0},
                        {29, 29, 160, 160, true, false, 0.2},
                        // rows not whole 16-byte units (element-wise loads), a 128-wide register row
                        {41, 29, 18, 10, false, true, 0.1},  {45, 77, 98, 36, true, false, 0.2},
                        // the one-pass backward (grad_q by atomics) over several key workgroups and query
                        // tiles: causal with more keys than queries, a mask with fewer, ragged tiles
                        {97, 131, 32, 28, true, false, 0.15}, {150, 70, 20, 32, false, true, 0.0},
                        {100, 90, 64, 48, false, false, 0.1},
                        // key lengths that are whole draws of four: one Philox draw per four weights
                        {72, 72, 64, 64, true, false, 0.1}, {64, 96, 32, 32, false, true, 0.25},
                        // long sequences: the grid forward (head dims up to 32 on lavapipe), with dropout
                        // over keys that are whole draws of four and keys that are not
                        {530, 520, 32, 24, true, false, 0.1}, {515, 601, 20, 32, false, true, 0.2},
                        // heads read and written where they lie, by each kernel
                        {97, 131, 32, 28, true, false, 0.15, true}, {45, 77, 98, 36, true, false, 0.2, true},
                        {37, 45, 160, 8, false, true, 0.0, true},   {41, 29, 18, 10, false, true, 0.1, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "lq " << c.lq << " lk " << c.lk << " d " << c.d << " dv " << c.dv
                                      << (c.side_by_side ? " side by side" : ""));
    Generator gen(3);
    const std::int64_t B = 2, H = 3;
    Tensor q = randn({B, H, c.lq, c.d}, {}, &gen), k = randn({B, H, c.lk, c.d}, {}, &gen);
    Tensor v = randn({B, H, c.lk, c.dv}, {}, &gen), seed = randn({B, H, c.lq, c.dv}, {}, &gen);
    Tensor mask = c.float_mask ? randn({B, 1, c.lq, c.lk}, {}, &gen) : Tensor();
    std::vector<Tensor> results[2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device where = dev ? kGpu : Device::cpu();
      Generator drop(11);
      // Leaves [B, H, L, D], or [B, L, H, D] whose transposes the op reads in place.
      auto leaf = [&](const Tensor& t) {
        return (c.side_by_side ? t.transpose(1, 2).contiguous() : t).to(where).detach().requires_grad_();
      };
      auto heads = [&](const Tensor& t) { return c.side_by_side ? t.transpose(1, 2) : t; };
      Tensor qd = leaf(q), kd = leaf(k), vd = leaf(v);
      Tensor out = scaled_dot_product_attention(heads(qd), heads(kd), heads(vd),
                                                mask.defined() ? mask.to(where) : Tensor(), c.dropout, c.causal,
                                                std::nullopt, &drop);
      GradientStore g = backward(out, seed.to(where));
      for (const Tensor& t : {out, heads(g.get(qd)), heads(g.get(kd)), heads(g.get(vd))}) {
        ASSERT_TRUE(t.defined()) << "result " << results[dev].size() << " on " << where.str();
        results[dev].push_back(t.cpu());
      }
    }
    const char* names[] = {"out", "grad q", "grad k", "grad v"};
    for (int i = 0; i < 4; ++i) expect_close(results[1][std::size_t(i)], results[0][std::size_t(i)], 2e-4, names[i]);
  }
}

// A NaN in a key, a query row or the additive mask gives NaN where PyTorch
// (and the CPU's f32 kernel) gives NaN, in the f16 kernel on the matrix units
// too: every row for a key, that row for a query or a mask entry, forward and
// backward. Its online softmax's max passes NaN over; the exp and sums carry it.
TEST(VulkanAttention, F16MatrixUnitKernelGivesNanRowsWhereTheCpuDoes) {
  REQUIRE_VULKAN();
  if (!supports<AttentionForwardKernel>(backend(kGpu), DType::f16))
    GTEST_SKIP() << "the device has no 16x16x16 f16 cooperative-matrix shape";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const char* where : {"key", "query", "mask"}) {
    SCOPED_TRACE(where);
    Generator gen(7);
    std::vector<double> qv = randn({1, 2, 5, 8}, {.dtype = DType::f64}, &gen).to_vector<double>();
    std::vector<double> kv = randn({1, 2, 7, 8}, {.dtype = DType::f64}, &gen).to_vector<double>();
    std::vector<double> mv(35, 0.0);
    if (where == std::string("key")) kv[3 * 8] = nan;              // k[0, 0, 3, 0]
    if (where == std::string("query")) qv[(5 + 2) * 8 + 1] = nan;  // q[0, 1, 2, 1]
    if (where == std::string("mask")) mv[0] = nan;                 // mask[0, 0]
    Tensor q = tensor(qv, {1, 2, 5, 8}).to(DType::f16).to(DType::f32), k = tensor(kv, {1, 2, 7, 8}).to(DType::f16).to(DType::f32);
    Tensor v = randn({1, 2, 7, 8}, {}, &gen).to(DType::f16).to(DType::f32);
    Tensor seed = randn({1, 2, 5, 8}, {}, &gen).to(DType::f16).to(DType::f32);
    Tensor mask = tensor(mv, {5, 7}).to(DType::f32);
    std::vector<Tensor> results[2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device at = dev ? kGpu : Device::cpu();
      const DType dt = dev ? DType::f16 : DType::f32;
      auto leaf = [&](const Tensor& t) { return t.to(at).to(dt).detach().requires_grad_(); };
      Tensor qd = leaf(q), kd = leaf(k), vd = leaf(v);
      Tensor out = scaled_dot_product_attention(qd, kd, vd, mask.to(at).to(dt));
      EXPECT_EQ(out.dtype(), dt);
      GradientStore g = backward(out, seed.to(at).to(dt));
      for (const Tensor& t : {out, g.get(qd), g.get(kd), g.get(vd)}) results[dev].push_back(t.cpu().to(DType::f32));
    }
    const char* names[] = {"out", "grad q", "grad k", "grad v"};
    for (int i = 0; i < 4; ++i) {
      const auto got = results[1][std::size_t(i)].to_vector<float>(), want = results[0][std::size_t(i)].to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      std::size_t nans = 0;
      for (std::size_t e = 0; e < got.size(); ++e) {
        EXPECT_EQ(std::isnan(got[e]), std::isnan(want[e])) << names[i] << " element " << e;
        nans += std::isnan(want[e]);
      }
      EXPECT_GT(nans, 0u) << names[i];
    }
  }
}

// The f16 kernel on the matrix units (where the device has 16x16x16 shapes)
// against the CPU's f32 kernel on the same f16-rounded inputs: ragged lengths
// past one workgroup, d != dv, head dims 16 to 128, both mask kinds, the
// causal rule with lq != lk, and dropout drawing the same weights. Errors are
// measured against each result's largest magnitude (f16 P and dS carry about
// three digits). Heads wider than 128 are refused in f16 and stay f32 under autocast.
TEST(VulkanAttention, F16MatrixUnitKernelAgreesWithF32Cpu) {
  REQUIRE_VULKAN();
  if (!supports<AttentionForwardKernel>(backend(kGpu), DType::f16))
    GTEST_SKIP() << "the device has no 16x16x16 f16 cooperative-matrix shape";
  struct Case {
    std::int64_t lq, lk, d, dv;
    bool causal;
    int mask;  // 0 none, 1 float, 2 u8 padding
    double dropout;
    double q_scale = 1.0;  // 6: scores spread far enough that row maxima move tile to tile
    bool side_by_side = false;  // q, k, v and their gradients as views of [B, L, H, D]
  };
  const Case cases[] = {{130, 97, 24, 40, false, 1, 0.0}, {70, 70, 64, 64, true, 0, 0.0},
                        {65, 33, 16, 16, true, 0, 0.3},   {200, 150, 128, 128, false, 2, 0.1},
                        {257, 257, 64, 64, true, 0, 0.1}, {20, 300, 96, 32, false, 0, 0.0},
                        {33, 47, 20, 12, true, 0, 0.2},   // rows not whole 16-byte units
                        {90, 300, 32, 32, false, 0, 0.0, 6.0},
                        {130, 97, 24, 40, false, 1, 0.0, 1.0, true},
                        {70, 70, 64, 64, true, 0, 0.1, 1.0, true},
                        {33, 47, 20, 12, true, 0, 0.2, 1.0, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "lq " << c.lq << " lk " << c.lk << " d " << c.d << " dv " << c.dv
                                      << (c.side_by_side ? " side by side" : ""));
    Generator gen(5);
    const std::int64_t B = 2, H = 2;
    auto half_rounded = [](const Tensor& t) { return t.to(DType::f16).to(DType::f32); };
    Tensor q = half_rounded(randn({B, H, c.lq, c.d}, {}, &gen) * c.q_scale);
    Tensor k = half_rounded(randn({B, H, c.lk, c.d}, {}, &gen));
    Tensor v = half_rounded(randn({B, H, c.lk, c.dv}, {}, &gen));
    Tensor seed = half_rounded(randn({B, H, c.lq, c.dv}, {}, &gen));
    Tensor mask;
    if (c.mask == 1) mask = randn({B, 1, c.lq, c.lk}, {}, &gen);
    if (c.mask == 2) {
      std::vector<std::uint8_t> keep(std::size_t(B * c.lk), 1);
      for (std::int64_t j = c.lk - 20; j < c.lk; ++j) keep[std::size_t(c.lk + j)] = 0;  // padding in batch 1
      mask = tensor(keep, {B, 1, 1, c.lk});
    }
    std::vector<Tensor> results[2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device where = dev ? kGpu : Device::cpu();
      const DType dt = dev ? DType::f16 : DType::f32;
      Generator drop(11);
      // Leaves [B, H, L, D], or [B, L, H, D] whose transposes the op reads in place.
      auto leaf = [&](const Tensor& t) {
        return (c.side_by_side ? t.transpose(1, 2).contiguous() : t).to(where).to(dt).detach().requires_grad_();
      };
      auto heads = [&](const Tensor& t) { return c.side_by_side ? t.transpose(1, 2) : t; };
      Tensor qd = leaf(q), kd = leaf(k), vd = leaf(v);
      Tensor md = mask.defined() ? (mask.dtype() == DType::u8 ? mask : mask.to(dt)).to(where) : Tensor();
      Tensor out =
          scaled_dot_product_attention(heads(qd), heads(kd), heads(vd), md, c.dropout, c.causal, std::nullopt, &drop);
      EXPECT_EQ(out.dtype(), dt);
      GradientStore g = backward(out, seed.to(where).to(dt));
      for (const Tensor& t : {out, heads(g.get(qd)), heads(g.get(kd)), heads(g.get(vd))}) {
        ASSERT_TRUE(t.defined()) << "result " << results[dev].size() << " on " << where.str();
        results[dev].push_back(t.cpu().to(DType::f32));
      }
    }
    const char* names[] = {"out", "grad q", "grad k", "grad v"};
    for (int i = 0; i < 4; ++i) {
      const auto got = results[1][std::size_t(i)].to_vector<double>(), want = results[0][std::size_t(i)].to_vector<double>();
      ASSERT_EQ(got.size(), want.size());
      double largest = 0, worst = 0;
      for (std::size_t e = 0; e < got.size(); ++e) {
        largest = std::max(largest, std::abs(want[e]));
        worst = std::max(worst, std::abs(got[e] - want[e]));
      }
      EXPECT_GT(largest, 0.0) << names[i];
      EXPECT_LE(worst, 1e-2 * largest) << names[i] << ": largest error " << worst << " of magnitude " << largest;
    }
  }
  // Wider heads: refused in f16, computed in f32 under autocast.
  Tensor wide = randn({1, 1, 8, 160}, {.device = kGpu});
  expect_error<Error>([&] { scaled_dot_product_attention(wide.to(DType::f16), wide.to(DType::f16), wide.to(DType::f16)); },
                      "scaled_dot_product_attention: the Vulkan f16 kernel takes head dims up to 128, got 160");
  AutocastGuard amp(true);
  EXPECT_EQ(scaled_dot_product_attention(wide, wide, wide).dtype(), DType::f32);
}

TEST(VulkanAttention, LongSequenceMemoryIsLinear) {
  REQUIRE_VULKAN();
  // L = 4096: the scores alone would be 64 MiB; q, k, v, out and their gradients are about 1 MiB.
  const std::int64_t L = 4096, D = 8;
  const std::size_t limit = std::size_t(L * L) * sizeof(float) / 16;
  Generator gen(2);
  Tensor q = randn({1, 1, L, D}, {.device = kGpu}, &gen).requires_grad_();
  Tensor k = randn({1, 1, L, D}, {.device = kGpu}, &gen).requires_grad_();
  Tensor v = randn({1, 1, L, D}, {.device = kGpu}, &gen).requires_grad_();
  synchronize(kGpu);
  const DeviceStats start = device_stats(kGpu);
  const std::size_t before = start.bytes_in_use;
  if (start.peak_bytes_in_use > before + limit)
    GTEST_SKIP() << "an earlier test of this process peaked higher than the limit; run alone (as ctest does)";
  {
    Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    GradientStore g = backward(out, ones_like(out));
    EXPECT_TRUE(std::isfinite(sum(g.get(k)).item()));
  }
  const DeviceStats after = device_stats(kGpu);
  EXPECT_GT(after.peak_bytes_in_use, before);
  EXPECT_LT(after.peak_bytes_in_use - before, limit);
}

// Out of memory, the allocator waits for the work in flight and returns the
// blocks no tensor uses before it gives up. Runs as ctest
// vulkan_memory_limit, under RUMUS_VULKAN_MEMORY_LIMIT_MIB=200: room for one
// 64 MiB block of small tensors and one tensor of up to 128 MiB.
TEST(VulkanMemoryLimit, ReclaimsBeforeFailing) {
  REQUIRE_VULKAN();
  if (!std::getenv("RUMUS_VULKAN_MEMORY_LIMIT_MIB")) GTEST_SKIP() << "runs as ctest vulkan_memory_limit";
  const std::size_t limit = std::size_t(200) << 20;
  constexpr std::int64_t kMiB = (1 << 20) / 4;  // f32 elements in a MiB
  // Each size is a size class of its own: a new block each time, which fits
  // only once the previous one (its tensor gone) is returned.
  double total = 0;
  for (std::int64_t mib : {80, 96, 112, 128, 80}) {
    Tensor t = full({mib * kMiB}, 0.5, {.device = kGpu});
    total += sum(t).item();
    EXPECT_LE(device_stats(kGpu).bytes_reserved, limit);
  }
  const double expected_total = 0.5 * double(80 + 96 + 112 + 128 + 80) * double(kMiB);
  EXPECT_NEAR(total, expected_total, 1e-5 * expected_total);  // f32 sums of millions of terms
  // Tensors of one size, each released while the work reading it is still
  // recorded or in flight: reusable only after a wait the allocator makes.
  Tensor acc = zeros({}, {.device = kGpu});
  for (int i = 0; i < 4; ++i) acc = acc + sum(full({96 * kMiB}, double(i), {.device = kGpu}));
  EXPECT_NEAR(acc.item(), 6.0 * double(96 * kMiB), 1e-5 * 6.0 * double(96 * kMiB));
  EXPECT_LE(device_stats(kGpu).bytes_reserved, limit);
  // Two live tensors that cannot both fit: an error naming the limit and the bytes.
  Tensor a = full({96 * kMiB}, 1.0, {.device = kGpu});
  expect_error<DeviceError>([&] { Tensor b = full({96 * kMiB}, 1.0, {.device = kGpu}); },
                            "RUMUS_VULKAN_MEMORY_LIMIT_MIB");
  EXPECT_NEAR(sum(a).item(), double(96 * kMiB), 1e-5 * double(96 * kMiB));  // the device still works
}

// Convolutions run on the device's implicit-GEMM kernels (no column buffer)
// and agree with the CPU's (oneDNN) forward, input, weight and bias gradients.
namespace {

struct ConvCase {
  std::int64_t n, c, h, w, oc, kh, kw;
  Conv2dOptions o;
  bool bias;
  int view;  // the input as 0: contiguous, 1: channels-last storage permuted to NCHW, 2: every other column
  bool relu = false;  // conv2d_relu
};

std::string conv_case_name(const ConvCase& k) {
  return "x [" + std::to_string(k.n) + ", " + std::to_string(k.c) + ", " + std::to_string(k.h) + ", " +
         std::to_string(k.w) + "] w [" + std::to_string(k.oc) + ", " + std::to_string(k.c / k.o.groups) + ", " +
         std::to_string(k.kh) + ", " + std::to_string(k.kw) + "] stride " + std::to_string(k.o.stride[0]) + "," +
         std::to_string(k.o.stride[1]) + " pad " + std::to_string(k.o.padding[0]) + "," +
         std::to_string(k.o.padding[1]) + " dilation " + std::to_string(k.o.dilation[0]) + "," +
         std::to_string(k.o.dilation[1]) + " groups " + std::to_string(k.o.groups) + (k.bias ? " bias" : "") +
         " view " + std::to_string(k.view);
}

struct ConvRun {
  Tensor out, grad_x, grad_w, grad_b;
};

ConvRun run_conv(const ConvCase& k, Device dev) {
  Generator gen(31);
  const Shape base_shape = k.view == 1 ? Shape{k.n, k.h, k.w, k.c} : k.view == 2 ? Shape{k.n, k.c, k.h, 2 * k.w}
                                                                                  : Shape{k.n, k.c, k.h, k.w};
  Tensor base = uniform(base_shape, -1, 1, {}, &gen).to(dev).requires_grad_();
  Tensor w = uniform({k.oc, k.c / k.o.groups, k.kh, k.kw}, -1, 1, {}, &gen).to(dev).requires_grad_();
  Tensor b = k.bias ? uniform({k.oc}, -1, 1, {}, &gen).to(dev).requires_grad_() : Tensor();
  Tensor x = k.view == 1 ? base.permute({0, 3, 1, 2}) : k.view == 2 ? base.slice(3, 1, 2 * k.w, 2) : base;
  ConvRun r;
  r.out = k.relu ? conv2d_relu(x, w, b, k.o) : conv2d(x, w, b, k.o);
  Tensor seed = uniform(r.out.shape(), -1, 1, {}, &gen).to(dev);
  GradientStore g = backward(r.out, seed);
  r.grad_x = g.get(base);
  r.grad_w = g.get(w);
  if (k.bias) r.grad_b = g.get(b);
  return r;
}

void expect_conv_matches_cpu(const ConvCase& k, double tol) {
  const std::string what = conv_case_name(k);
  ConvRun cpu = run_conv(k, Device::cpu()), gpu = run_conv(k, kGpu);
  ASSERT_EQ(gpu.out.device(), kGpu) << what;
  expect_close(gpu.out, cpu.out, tol, what + " output");
  expect_close(gpu.grad_x, cpu.grad_x, tol, what + " input gradient");
  expect_close(gpu.grad_w, cpu.grad_w, tol, what + " weight gradient");
  if (k.bias) expect_close(gpu.grad_b, cpu.grad_b, tol, what + " bias gradient");
}

}  // namespace

// conv2d_relu applies its ReLU in the implicit GEMM's epilogue: outputs and
// gradients (through the saved output) match the CPU's, and a NaN output
// becomes 0 as relu() makes it on this device.
TEST(VulkanConv, FusedReluInTheEpilogueMatchesCpu) {
  REQUIRE_VULKAN();
  for (bool bias : {false, true})
    for (int view : {0, 2}) {
      ConvCase k{2, 5, 10, 9, 70, 3, 3, {.padding = {1, 1}}, bias, view, true};
      expect_conv_matches_cpu(k, 1e-4);
      if (::testing::Test::HasFatalFailure()) return;
    }
  std::vector<double> values = uniform({1, 2, 6, 6}, -1, 1).to(DType::f64).to_vector<double>();
  values[36 + 2 * 6 + 3] = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor(values, {1, 2, 6, 6}).to(DType::f32);
  Tensor w = uniform({3, 2, 3, 3}, -1, 1), b = uniform({3}, -1, 1);
  Tensor fused = conv2d_relu(x.to(kGpu), w.to(kGpu), b.to(kGpu));
  Tensor composed = relu(conv2d(x.to(kGpu), w.to(kGpu), b.to(kGpu)));
  EXPECT_EQ(sum(isfinite(fused)).item(), double(fused.numel())) << "a NaN convolution output goes through ReLU as 0";
  EXPECT_EQ(sum(ne(fused, composed)).item(), 0.0) << "the epilogue's ReLU is relu()'s";
}

TEST(VulkanConv, DirectKernelsForF32And16Bit) {
  REQUIRE_VULKAN();
  Backend& be = backend(kGpu);
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    expect_supports<Conv2dForwardKernel, Conv2dBackwardDataKernel, Conv2dBackwardWeightKernel>(be, dt, true);
  // f64 lowers to im2col + GEMM.
  expect_supports<Conv2dForwardKernel, Conv2dBackwardDataKernel, Conv2dBackwardWeightKernel>(be, DType::f64, false);
}

// Stride, padding, dilation, groups (1, 2, depthwise), batch 1 and 3, odd
// sizes, a non-square kernel, channels that fill no tile, strided input views.
TEST(VulkanConv, GridMatchesCpu) {
  REQUIRE_VULKAN();
  int index = 0;
  for (std::int64_t n : {1, 3})
    for (std::int64_t stride : {1, 2})
      for (std::int64_t pad : {0, 1, 2})
        for (std::int64_t dilation : {1, 2})
          for (std::int64_t groups : {1, 2, 6}) {
            ConvCase k{n, 6, 9, 7, 12, 3, 2, {.stride = {stride, stride}, .padding = {pad, pad},
                                              .dilation = {dilation, dilation}, .groups = groups},
                       index % 2 == 0, index % 3};
            ++index;
            expect_conv_matches_cpu(k, 1e-4);
            if (::testing::Test::HasFatalFailure()) return;
          }
}

// Mixed strides and paddings per axis, more channels than one 64-wide tile
// (two M tiles with a ragged edge), and a 1x1 kernel.
TEST(VulkanConv, RaggedTilesAndAsymmetricOptionsMatchCpu) {
  REQUIRE_VULKAN();
  expect_conv_matches_cpu({2, 70, 6, 5, 66, 3, 3, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}}, true, 0},
                          1e-4);
  expect_conv_matches_cpu({3, 67, 5, 5, 65, 1, 1, {}, true, 1}, 1e-4);
  expect_conv_matches_cpu({1, 10, 11, 13, 5, 5, 4, {.stride = {3, 2}, .padding = {2, 0}, .groups = 5}, false, 2},
                          1e-4);
}

// The shapes of the MNIST CNN (1 -> 32 -> 64 channels, 3x3, 28x28), whose
// weight gradients split their long reduction over workgroups, and a wide
// layer that takes the 128 x 128 tiles.
TEST(VulkanConv, MnistCnnShapesAndLargeTilesMatchCpu) {
  REQUIRE_VULKAN();
  expect_conv_matches_cpu({4, 1, 28, 28, 32, 3, 3, {}, true, 0}, 2e-4);
  expect_conv_matches_cpu({4, 32, 26, 26, 64, 3, 3, {}, true, 0}, 2e-4);
  // Its weight gradient sums 37632 products: f32 rounding of partial sums near 60
  // reaches a few 1e-4 where they cancel to a small total.
  expect_conv_matches_cpu({3, 3, 112, 112, 72, 3, 3, {.padding = {1, 1}}, false, 0}, 1e-3);
}

// The kernels themselves, without the op layer: output, input, weight and
// bias gradients overwrite whatever the buffers held, also at nonzero offsets.
TEST(VulkanConv, KernelsOverwriteOutputsAtOffsets) {
  REQUIRE_VULKAN();
  Conv2dGeometry g;
  g.batch = 2;
  g.channels = 4;
  g.height = 6;
  g.width = 5;
  g.kernel_h = 3;
  g.kernel_w = 3;
  g.pad_h = 1;
  g.pad_w = 1;
  g.out_h = 6;
  g.out_w = 5;
  const std::int64_t oc = 6, groups = 2;
  Generator gen(5);
  Tensor x = uniform({2, 4, 6, 5}, -1, 1, {}, &gen), w = uniform({6, 2, 3, 3}, -1, 1, {}, &gen);
  Tensor b = uniform({6}, -1, 1, {}, &gen), go = uniform({2, 6, 6, 5}, -1, 1, {}, &gen);
  // Each result lands at offset 3 of a buffer full of 7s.
  auto at_offset = [](Device dev, const Shape& shape) {
    std::int64_t numel = 1;
    for (auto d : shape) numel *= d;
    return full({numel + 3}, 7.0, {.device = dev}).slice(0, 3, numel + 3).view(shape);
  };
  std::vector<Tensor> results[2];
  for (int d = 0; d < 2; ++d) {
    const Device dev = d ? kGpu : Device::cpu();
    Backend& be = backend(dev);
    Tensor dx = x.to(dev), dw = w.to(dev), db = b.to(dev), dgo = go.to(dev);
    Tensor out = at_offset(dev, {2, 6, 6, 5}), gin = at_offset(dev, {2, 4, 6, 5}), gw = at_offset(dev, {6, 2, 3, 3}),
           gb = at_offset(dev, {6});
    run_kernel<Conv2dForwardKernel>(be, g, oc, groups, arg_of(out), arg_of(dx), arg_of(dw), arg_of(db), false);
    run_kernel<Conv2dBackwardDataKernel>(be, g, oc, groups, arg_of(gin), arg_of(dgo), arg_of(dw));
    run_kernel<Conv2dBackwardWeightKernel>(be, g, oc, groups, arg_of(gw), arg_of(gb), arg_of(dgo), arg_of(dx));
    results[d] = {out.cpu(), gin.cpu(), gw.cpu(), gb.cpu()};
  }
  const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
  for (int i = 0; i < 4; ++i) expect_close(results[1][i], results[0][i], 1e-4, names[i]);
}

namespace {
// Puts the convolution route and workspace size back as they were.
struct ConvRouteRestore {
  vulkan::ConvRoute route = vulkan::conv_route_override();
  std::int64_t bytes = vulkan::conv_workspace_bytes();
  std::int64_t groups = vulkan::winograd_fused_max_groups();
  std::int64_t direct_groups = vulkan::conv_direct_max_groups();
  std::int64_t tile = vulkan::winograd_tile_override();
  ~ConvRouteRestore() {
    vulkan::conv_route_override() = route;
    vulkan::conv_workspace_bytes() = bytes;
    vulkan::winograd_fused_max_groups() = groups;
    vulkan::conv_direct_max_groups() = direct_groups;
    vulkan::winograd_tile_override() = tile;
  }
};
}  // namespace

// More column tiles (batch x positions / 128) than the 65535 workgroups Vulkan
// promises per grid dimension: the kernels go out in several dispatches, and
// the later ones (starting past tile 0) land where they should: the implicit
// GEMM's, and conv_direct.comp's (with the limit made small). (lavapipe itself
// takes wider grids, so this checks the cut, not the limit.)
TEST(VulkanConv, ColumnTilesPastOneGridMatchCpu) {
  REQUIRE_VULKAN();
  Generator gen(41);
  {
    ConvRouteRestore restore;
    vulkan::conv_route_override() = vulkan::ConvRoute::implicit_gemm;  // one channel: conv_direct's otherwise
    Tensor x = uniform({1, 1, 2900, 2900}, -1, 1, {}, &gen), w = uniform({1, 1, 1, 1}, -1, 1, {}, &gen);
    expect_close(conv2d(x.to(kGpu), w.to(kGpu)).cpu(), conv2d(x, w), 1e-5, "implicit GEMM output");
  }
  // conv_direct.comp with at most 3 workgroups a launch: a forward in 6
  // launches, a weight gradient in 3 slices of 1,280 positions.
  ConvRouteRestore restore;
  vulkan::conv_direct_max_groups() = 3;
  expect_conv_matches_cpu({4, 1, 20, 20, 12, 3, 3, {.padding = {1, 1}}, true, 0, true}, 1e-4);
}

// A reduction of 72000 products per output (4500 slices of 16) in one
// workgroup: more inner-loop iterations than llvmpipe lets one loop run.
// One output over many elements is split over workgroups and combined by a
// second launch: sums, extremes (NaN wins) and 16-bit inputs, on contiguous,
// transposed and keepdim views, against the CPU.
TEST(VulkanReduce, LongFullReductionsSplitOverWorkgroupsMatchCpu) {
  REQUIRE_VULKAN();
  Generator gen(4);
  Tensor x = randn({700, 530}, {}, &gen);
  Tensor xg = x.to(kGpu);
  for (bool transposed : {false, true}) {
    SCOPED_TRACE(transposed ? "transposed" : "contiguous");
    const Tensor c = transposed ? x.transpose(0, 1) : x, g = transposed ? xg.transpose(0, 1) : xg;
    expect_close(sum(g).cpu(), sum(c), 1e-4, "sum");
    expect_close(sum(g, {0, 1}, true).cpu(), sum(c, {0, 1}, true), 1e-4, "sum keepdim");
    expect_close(max(g).cpu(), max(c), 0, "max");
    expect_close(min(g).cpu(), min(c), 0, "min");
    expect_close(mean(g).cpu(), mean(c), 1e-5, "mean");
  }
  expect_close(sum(xg.to(DType::f16)).cpu().to(DType::f32), sum(x.to(DType::f16).to(DType::f32)), 2e-3, "f16 sum");
  std::vector<float> with_nan(200000, 1.0f);
  with_nan[123456] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(max(tensor(with_nan, {200000}).to(kGpu)).item()));
  EXPECT_EQ(sum(tensor(std::vector<float>(200000, 1.0f), {200000}).to(kGpu)).item(), 200000.0);
}

// Sums down columns (a bias gradient over many rows) run as runs of rows per
// invocation, then a pass over the runs: sums, means, extremes (NaN wins), a
// 16-bit input, a kept dim before the reduced one, and extents with no divisor
// in range (one pass per output instead), against the CPU.
TEST(VulkanReduce, DownTheColumnsMatchesCpu) {
  REQUIRE_VULKAN();
  Generator gen(5);
  Tensor x = randn({4096, 96}, {}, &gen), xg = x.to(kGpu);
  expect_close(sum(xg, {0}).cpu(), sum(x, {0}), 1e-4, "sum over rows");
  expect_close(sum(xg, {0}, true).cpu(), sum(x, {0}, true), 1e-4, "sum over rows, keepdim");
  expect_close(mean(xg, {0}).cpu(), mean(x, {0}), 1e-5, "mean over rows");
  expect_close(amax(xg, {0}).cpu(), amax(x, {0}), 0, "amax over rows");
  expect_close(amin(xg, {0}).cpu(), amin(x, {0}), 0, "amin over rows");
  expect_close(sum(xg.to(DType::f16), {0}).cpu().to(DType::f32), sum(x.to(DType::f16).to(DType::f32), {0}), 2e-2,
               "f16 sum over rows");
  Tensor y = randn({3, 1000, 40}, {}, &gen), yg = y.to(kGpu);
  expect_close(sum(yg, {1}).cpu(), sum(y, {1}), 1e-4, "sum over the middle dim");
  expect_close(mean(yg.narrow(2, 5, 30), {1}).cpu(), mean(y.narrow(2, 5, 30), {1}), 1e-5, "mean of a narrowed view");
  Tensor p = randn({1009, 64}, {}, &gen);  // prime extent
  expect_close(sum(p.to(kGpu), {0}).cpu(), sum(p, {0}), 1e-4, "sum over a prime number of rows");
  std::vector<float> with_nan(2048 * 16, 1.0f);
  with_nan[1500 * 16 + 3] = std::numeric_limits<float>::quiet_NaN();
  auto col_max = amax(tensor(with_nan, {2048, 16}).to(kGpu), {0}).cpu().to_vector<float>();
  EXPECT_TRUE(std::isnan(col_max[3]));
  EXPECT_EQ(col_max[4], 1.0f);
  auto col_min = amin(tensor(with_nan, {2048, 16}).to(kGpu), {0}).cpu().to_vector<float>();
  EXPECT_TRUE(std::isnan(col_min[3]));
  EXPECT_EQ(col_min[4], 1.0f);
}

// A bias gradient over a batch of 64 rows is one launch: 16 rows an
// invocation cost less than a second launch and its barrier (vulkan/reduce.cpp).
TEST(VulkanReduce, SixtyFourRowsTakeOneLaunch) {
  REQUIRE_VULKAN();
  Generator gen(7);
  const Tensor x = randn({64, 512}, {}, &gen), xg = x.to(kGpu);
  synchronize(kGpu);
  const std::uint64_t before = device_stats(kGpu).commands;
  const Tensor s = sum(xg, {0});
  EXPECT_EQ(device_stats(kGpu).commands - before, 1u);
  expect_close(s.cpu(), sum(x, {0}), 1e-4, "sum over 64 rows");
}

// The kernel down contiguous columns (column_reduce.comp): units of 4 and
// single elements, one run of rows or partial rows and a second launch,
// batches, more columns than one workgroup takes, views at odd offsets, and
// f16 and bf16 values.
TEST(VulkanReduce, DownContiguousColumnsMatchesCpu) {
  REQUIRE_VULKAN();
  Generator gen(6);
  struct Case {
    Shape shape;
    const char* what;
  };
  for (const Case& c : {Case{{16, 5000}, "split-K slices: one run, 1,250 units"},
                        Case{{8192, 256}, "a bias gradient: partial rows, then a second launch"},
                        Case{{3000, 7}, "7 columns: single floats, rows past the unrolled loop"},
                        Case{{2, 3}, "two rows"},
                        Case{{5, 1200, 12}, "a batch of five"}}) {
    Tensor x = randn(c.shape, {}, &gen), xg = x.to(kGpu);
    const int dim = int(c.shape.size()) - 2;
    expect_close(sum(xg, {dim}).cpu(), sum(x, {dim}), 2e-4, c.what);
    expect_close(mean(xg, {dim}).cpu(), mean(x, {dim}), 1e-5, c.what);
    expect_close(amax(xg, {dim}).cpu(), amax(x, {dim}), 0, c.what);
    expect_close(amin(xg, {dim}).cpu(), amin(x, {dim}), 0, c.what);
  }
  // 16-bit inputs (f32 arithmetic) into 16-bit results, against the CPU on the same values;
  // both round the f32 sum once.
  for (const DType dt : {DType::f16, DType::bf16})
    for (const Shape& shape : {Shape{8192, 256}, Shape{3000, 7}, Shape{4, 900, 12}}) {
      Tensor x = randn(shape, {}, &gen).to(dt), xg = x.to(kGpu);
      const int dim = int(shape.size()) - 2;
      const std::string what = std::string(dtype_name(dt)) + " " + shape_str(shape);
      const double tol = dt == DType::f16 ? 1e-3 : 8e-3;  // half an ulp of the result, and the order of the adds
      expect_close(sum(xg, {dim}).cpu().to(DType::f32), sum(x, {dim}).to(DType::f32), tol, what + " sum");
      expect_close(mean(xg, {dim}).cpu().to(DType::f32), mean(x, {dim}).to(DType::f32), tol, what + " mean");
      expect_close(amax(xg, {dim}).cpu().to(DType::f32), amax(x, {dim}).to(DType::f32), 0, what + " amax");
      EXPECT_EQ(sum(xg, {dim}).dtype(), dt) << what;
    }
  // A view one float in: unaligned, read a float at a time.
  Tensor w = randn({600, 33}, {}, &gen), wg = w.to(kGpu);
  expect_close(sum(wg.narrow(1, 1, 32), {0}).cpu(), sum(w.narrow(1, 1, 32), {0}), 1e-4, "a view at an odd offset");
  // Into an output view with its own offset (the GEMM's split-K sum into a slice of C).
  Tensor out = zeros({3, 256}).to(kGpu), src = randn({64, 256}, {}, &gen), src_g = src.to(kGpu);
  Tensor row = out.narrow(0, 1, 1);
  run_kernel<ReduceKernel>(backend(kGpu), ReduceOp::sum, arg_of(row), arg_of(src_g));
  expect_close(out.cpu().narrow(0, 1, 1), sum(src, {0}, true), 1e-4, "into a row of a matrix");
  EXPECT_EQ(out.cpu().narrow(0, 0, 1).abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(out.cpu().narrow(0, 2, 1).abs().sum().item<float>(), 0.0f);
  // Infinities and NaN through partial rows.
  std::vector<float> v(8192 * 8, 0.5f);
  v[7000 * 8 + 1] = -std::numeric_limits<float>::infinity();
  v[100 * 8 + 2] = std::numeric_limits<float>::quiet_NaN();
  auto mins = amin(tensor(v, {8192, 8}).to(kGpu), {0}).cpu().to_vector<float>();
  EXPECT_EQ(mins[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(mins[2]));
  EXPECT_EQ(mins[0], 0.5f);
}

// Short contiguous rows share a workgroup, bit_ceil(n) / 16 lanes each
// (vulkan/reduce.cpp): a bias gradient's per-sample sums, outputs that do not
// fill the last workgroup, every lane count from 8 to 64, the longest row
// (2,048) and one past it (a workgroup each), rows of a strided view, extremes
// with NaN, means, and an f16 input, against the CPU.
TEST(VulkanReduce, ShortRowsShareAWorkgroupAndMatchCpu) {
  REQUIRE_VULKAN();
  Generator gen(8);
  for (const Shape& shape : {Shape{64, 32, 576}, Shape{7, 13, 65}, Shape{5, 3, 200}, Shape{33, 1000},
                             Shape{9, 2048}, Shape{9, 2049}, Shape{1, 1, 100}}) {
    const Tensor x = randn(shape, {}, &gen), xg = x.to(kGpu);
    const int last = int(shape.size()) - 1;
    const std::string what = shape_str(shape);
    expect_close(sum(xg, {last}).cpu(), sum(x, {last}), 1e-4, what + " sum");
    expect_close(sum(xg, {last}, true).cpu(), sum(x, {last}, true), 1e-4, what + " sum keepdim");
    expect_close(mean(xg, {last}).cpu(), mean(x, {last}), 1e-5, what + " mean");
    expect_close(amax(xg, {last}).cpu(), amax(x, {last}), 0, what + " amax");
    expect_close(amin(xg, {last}).cpu(), amin(x, {last}), 0, what + " amin");
  }
  // Rows of a view: every other row, from an offset of one float.
  const Tensor w = randn({40, 301}, {}, &gen), wg = w.to(kGpu);
  const Tensor view = w.narrow(1, 1, 300).slice(0, 0, 40, 2), view_g = wg.narrow(1, 1, 300).slice(0, 0, 40, 2);
  expect_close(sum(view_g, {1}).cpu(), sum(view, {1}), 1e-4, "rows of a strided view");
  const Tensor h = randn({50, 300}, {}, &gen).to(DType::f16);
  expect_close(sum(h.to(kGpu), {1}).cpu().to(DType::f32), sum(h, {1}).to(DType::f32), 2e-3, "f16 rows");
  std::vector<float> v(20 * 100, 1.0f);
  v[5 * 100 + 77] = std::numeric_limits<float>::quiet_NaN();
  v[6 * 100 + 3] = -std::numeric_limits<float>::infinity();
  const Tensor vg = tensor(v, {20, 100}).to(kGpu);
  const auto maxes = amax(vg, {1}).cpu().to_vector<float>(), mins = amin(vg, {1}).cpu().to_vector<float>();
  EXPECT_TRUE(std::isnan(maxes[5]));
  EXPECT_TRUE(std::isnan(mins[5]));
  EXPECT_EQ(mins[6], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(maxes[6], 1.0f);
  EXPECT_EQ(maxes[4], 1.0f);
  // Past the grid's limit along x (made 3 workgroups): rows of 100, 32 to a
  // workgroup, in a grid of 3 x 6, and rows of 3,000, a workgroup each, in 3 x 4.
  const std::int64_t limit = vulkan::reduce_max_groups();
  vulkan::reduce_max_groups() = 3;
  for (const Shape& shape : {Shape{500, 100}, Shape{11, 3000}}) {
    const Tensor y = randn(shape, {}, &gen);
    const Tensor got = sum(y.to(kGpu), {1}).cpu();
    vulkan::reduce_max_groups() = limit;
    expect_close(got, sum(y, {1}), 1e-4, "past the grid's limit " + shape_str(shape));
    vulkan::reduce_max_groups() = 3;
  }
  vulkan::reduce_max_groups() = limit;
}

TEST(VulkanConv, LongReductionMatchesCpu) {
  REQUIRE_VULKAN();
  expect_conv_matches_cpu({1, 8000, 3, 3, 1, 3, 3, {}, true, 0}, 1e-3);
  // A weight gradient summed over 67,600 positions, in about 1,056 slices of
  // the implicit GEMM (forced: one channel is conv_direct's otherwise), and
  // in conv_direct's slices.
  for (const auto route : {vulkan::ConvRoute::implicit_gemm, vulkan::ConvRoute::automatic}) {
    ConvRouteRestore restore;
    vulkan::conv_route_override() = route;
    expect_conv_matches_cpu({100, 1, 28, 28, 4, 3, 3, {}, true, 0}, 1e-3);
  }
}

// Both ways of an f32 convolution, forced in turn: the implicit GEMM and the
// columns (im2col, or the input itself for 1x1 stride 1, then gemm) with a
// workspace small enough that the batch goes in several chunks, one of them
// ragged. ResNet's shapes (3x3 stride 1 and 2, 1x1 downsampling), a 1x1
// stride 1, bias, the fused ReLU and strided input views, against the CPU;
// the weight gradient accumulates over the chunks, so a chunk that overwrote
// the last would fail here.
TEST(VulkanConv, ColumnsAndImplicitGemmBothMatchCpu) {
  REQUIRE_VULKAN();
  ConvRouteRestore restore;
  const ConvCase cases[] = {
      {5, 8, 8, 8, 12, 3, 3, {.padding = {1, 1}}, false, 0},
      {5, 8, 9, 9, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true, 2},
      {5, 8, 8, 8, 16, 1, 1, {.stride = {2, 2}}, false, 1},
      {5, 12, 6, 7, 10, 1, 1, {}, true, 0},
      {5, 6, 7, 7, 9, 3, 3, {.padding = {1, 1}}, true, 0, true},
      // Rows of 8 positions and 16 pixels: the columns and the image move four at a time.
      {3, 8, 15, 16, 12, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true, 2},
  };
  for (auto route : {vulkan::ConvRoute::implicit_gemm, vulkan::ConvRoute::columns}) {
    vulkan::conv_route_override() = route;
    // Two samples' columns of the largest case at a time: chunks of 2, 2 and 1.
    vulkan::conv_workspace_bytes() = 2 * (8 * 9 + 12) * 64 * 4;
    for (const ConvCase& k : cases) {
      SCOPED_TRACE(route == vulkan::ConvRoute::columns ? "columns" : "implicit GEMM");
      expect_conv_matches_cpu(k, 1e-4);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Winograd F(2x2, 3x3) and F(4x4, 3x3) for the forward, data and weight
// passes of 3x3 stride-1 convolutions, forced: paddings 0, 1 and 2 (the data
// pass pads by 2 - pad), odd sizes (tiles past the edge, whose output
// gradient is zero), bias with the fused ReLU, a strided input view, one
// channel, and a workspace that takes the batch in chunks of 2, 2 and 1 (the
// weight gradient's sums gather every chunk); against the CPU, gradients
// included.
// The shapes it does not take (stride 2, 1x1) go the usual way in the same run.
// f32 passes whose products are small run the one-pass kernels (72 x 8
// channels: several blocks of 32 rows, a reduction not a whole number of
// blocks; forward launches of 2 workgroups, so a batch takes several; the
// weight pass's slices of tiles, 6 of them in the split case), larger ones the
// products on workspaces (48 x 48 channels). F(4x4, 3x3) takes every case on
// workspaces: sizes that leave 1, 2 or 3 outputs in the last tile, and rows
// of whole quads (8 and 16 outputs) that it stores four outputs at a time.
TEST(VulkanConv, WinogradMatchesCpu) {
  REQUIRE_VULKAN();
  ConvRouteRestore restore;
  const ConvCase cases[] = {
      {5, 8, 8, 8, 12, 3, 3, {.padding = {1, 1}}, false, 0},
      {5, 6, 7, 9, 10, 3, 3, {.padding = {1, 1}}, true, 0, true},
      {5, 4, 9, 7, 6, 3, 3, {}, true, 2},
      {5, 3, 5, 6, 8, 3, 3, {.padding = {2, 2}}, false, 1},
      {5, 1, 6, 6, 2, 3, 3, {.padding = {0, 2}}, true, 0},
      {5, 8, 9, 9, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true, 2},
      {5, 12, 6, 7, 10, 1, 1, {}, true, 0},
      {2, 72, 6, 6, 8, 3, 3, {.padding = {1, 1}}, true, 0, true},
      {2, 8, 6, 7, 72, 3, 3, {.padding = {1, 1}}, true, 0},
      {2, 48, 5, 6, 48, 3, 3, {.padding = {1, 1}}, true, 0},
      // Unfused, rows of 8 tiles: the output transform takes four tiles an item, rows of 8 outputs in two quads.
      {2, 48, 7, 16, 48, 3, 3, {.padding = {1, 1}}, true, 0, true},
  };
  vulkan::conv_route_override() = vulkan::ConvRoute::winograd;
  vulkan::winograd_fused_max_groups() = 2;
  for (std::int64_t tile : {2, 4}) {
    SCOPED_TRACE("tile " + std::to_string(tile));
    vulkan::winograd_tile_override() = tile;
    const std::int64_t points = (tile + 2) * (tile + 2);
    // Two samples' transformed tiles of the largest case (8 x 8 outputs) at a time.
    vulkan::conv_workspace_bytes() = 2 * points * (8 + 12) * (8 / tile) * (8 / tile) * 4;
    for (const ConvCase& k : cases) {
      expect_conv_matches_cpu(k, 1e-4);
      if (::testing::Test::HasFatalFailure()) return;
    }
    // A reduction long enough to split: 100 tiles a sample, in chunks of 3
    // samples (300 tiles, whose products split K) and 1, so the weight
    // gradient's split slices meet and the second chunk adds onto the
    // first's sums.
    vulkan::conv_workspace_bytes() = 3 * points * (8 + 12) * 100 * 4;
    const std::int64_t side = 10 * tile;
    expect_conv_matches_cpu({4, 8, side, side, 12, 3, 3, {.padding = {1, 1}}, true, 0}, 1e-4);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// 16-bit convolutions (autocast's) on the device's own kernels: Winograd
// (forward and data; the weight pass too but under winograd_no_weight), the columns
// (the stem's 3 channels, stride 2, 1x1) and f32 copies for grouped ones, in
// f16 and bf16, against the CPU's f32 convolution of the same rounded
// operands. The workspace holds two samples of F(2x2, 3x3)'s f16 tiles and
// products (one of bf16's, whose products are f32; two or more of
// F(4x4, 3x3)'s), so the passes take the batch in chunks and the weight sums
// add them. f16 runs twice: with the automatic Winograd tiles, F(2x2, 3x3),
// and with F(4x4, 3x3).
TEST(VulkanConv, SixteenBitMatchesCpuOfTheRoundedOperands) {
  REQUIRE_VULKAN();
  ConvRouteRestore restore;
  const ConvCase cases[] = {
      {3, 8, 7, 9, 12, 3, 3, {.padding = {1, 1}}, true, 0, true},
      {3, 8, 9, 7, 6, 3, 3, {}, true, 0},
      {3, 3, 8, 8, 8, 3, 3, {.padding = {1, 1}}, true, 0},
      {3, 8, 9, 9, 16, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, false, 0},
      {3, 12, 6, 7, 10, 1, 1, {}, true, 0},
      {3, 6, 7, 7, 12, 3, 3, {.padding = {1, 1}, .groups = 3}, true, 0},
      // Rows of 8 tiles: the output transform takes four tiles an item, the last column past the output.
      {2, 8, 7, 15, 12, 3, 3, {.padding = {1, 1}}, true, 0},
      // Stride 2 over rows of 16 pixels: the columns and the image four at a time.
      {2, 8, 16, 16, 8, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, false, 0},
  };
  vulkan::conv_workspace_bytes() = 2 * 16 * (8 * 2 + 12 * 2) * 20;
  for (DType dt : {DType::f16, DType::bf16})
    for (std::int64_t tile : {0, 4})
    for (vulkan::ConvRoute route : {vulkan::ConvRoute::automatic, vulkan::ConvRoute::winograd_no_weight}) {
      if (dt == DType::bf16 && tile == 4) continue;  // too coarse for bf16's 8 bits
      vulkan::winograd_tile_override() = tile;
      vulkan::conv_route_override() = route;
      // F(4x4, 3x3) rounds f16 tiles after larger factors: its errors are
      // about 5 times F(2x2, 3x3)'s, still below bf16's.
      const double tol = dt == DType::bf16 ? 6e-2 : tile == 4 ? 5e-2 : 1e-2;
      for (const ConvCase& k : cases) {
        const std::string what = std::string(dtype_name(dt)) + " tile " + std::to_string(tile) + " route " +
                                 std::to_string(int(route)) + " " + conv_case_name(k);
        Generator gen(7);
        auto draw = [&](const Shape& shape) { return uniform(shape, -1, 1, {}, &gen).to(dt).to(DType::f32); };
        const Tensor x = draw({k.n, k.c, k.h, k.w}), w = draw({k.oc, k.c / k.o.groups, k.kh, k.kw});
        const Tensor b = k.bias ? draw({k.oc}) : Tensor();
        // The CPU's ReLU takes the GPU's mask: an output near 0 may round to
        // either side in 16 bits, and the gradient passes where it is positive.
        auto run = [&](Device dev, DType as, const Tensor& gpu_out) {
          auto leaf = [&](const Tensor& t) { return t.to(as).to(dev).detach().requires_grad_(); };
          Tensor xd = leaf(x), wd = leaf(w), bd = k.bias ? leaf(b) : Tensor();
          ConvRun r;
          Tensor pre = k.relu && !gpu_out.defined() ? conv2d_relu(xd, wd, bd, k.o) : conv2d(xd, wd, bd, k.o);
          r.out = k.relu && gpu_out.defined() ? relu(pre) : pre;
          Generator seed_gen(11);
          Tensor s = uniform(pre.shape(), -1, 1, {}, &seed_gen).to(dt).to(as).to(dev);
          if (k.relu && gpu_out.defined()) s = s * gt(gpu_out.to(dev).to(as), 0.0).to(as);
          GradientStore g = backward(pre, s);
          r.grad_x = g.get(xd);
          r.grad_w = g.get(wd);
          if (k.bias) r.grad_b = g.get(bd);
          return r;
        };
        const ConvRun gpu = run(kGpu, dt, Tensor()), cpu = run(Device::cpu(), DType::f32, gpu.out);
        ASSERT_EQ(gpu.out.dtype(), dt) << what;
        ASSERT_EQ(gpu.grad_w.dtype(), dt) << what;
        auto wide = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::f32); };
        expect_close(wide(gpu.out), cpu.out, tol, what + " output");
        expect_close(wide(gpu.grad_x), cpu.grad_x, tol, what + " input gradient");
        expect_close(wide(gpu.grad_w), cpu.grad_w, tol, what + " weight gradient");
        if (k.bias) expect_close(wide(gpu.grad_b), cpu.grad_b, tol, what + " bias gradient");
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

// How F(4x4, 3x3) rounds 16-bit tiles, at ResNet's layer1 scale (64
// channels, 16 x 16, weights as Kaiming's): the rms error of the output and
// of the input and weight gradients, each against the CPU's f32
// convolution of the same rounded operands and relative to its rms. With
// f16 tiles and products F(4x4, 3x3) stays below F(2x2, 3x3) on bf16 tiles
// (the automatic choice for bf16), which its points 0, 1, -1, 2, -1/2 are
// for; and it is within a few times F(2x2, 3x3) on f16 tiles (and above
// them: it ran). An output gradient 512 times larger, as a GradScaler's,
// changes nothing: the transforms keep their tiles in f16's range.
TEST(VulkanConv, WinogradFourByFourRoundsSixteenBitTilesWithinBf16sError) {
  REQUIRE_VULKAN();
  ConvRouteRestore restore;
  vulkan::conv_route_override() = vulkan::ConvRoute::winograd;
  auto rms_errors = [](DType dt, std::int64_t tile, double seed_scale = 1.0) {
    vulkan::winograd_tile_override() = tile;
    Generator gen(3);
    const Tensor x = uniform({2, 64, 16, 16}, -1, 1, {}, &gen).to(dt).to(DType::f32);
    const Tensor w = (uniform({64, 64, 3, 3}, -1, 1, {}, &gen) * std::sqrt(3.0 / 576)).to(dt).to(DType::f32);
    const Tensor seed = (uniform({2, 64, 16, 16}, -1, 1, {}, &gen) * seed_scale).to(dt).to(DType::f32);
    std::array<Tensor, 3> got, want;
    for (int on_gpu : {0, 1}) {
      const Device dev = on_gpu ? kGpu : Device::cpu();
      const DType as = on_gpu ? dt : DType::f32;
      Tensor xd = x.to(as).to(dev).detach().requires_grad_(), wd = w.to(as).to(dev).detach().requires_grad_();
      Tensor y = conv2d(xd, wd, Tensor(), {.padding = {1, 1}});
      GradientStore g = backward(y, seed.to(as).to(dev));
      auto& out = on_gpu ? got : want;
      out = {y, g.get(xd), g.get(wd)};
    }
    std::array<double, 3> errors{};
    for (int i = 0; i < 3; ++i) {
      const Tensor ref = want[i].to(DType::f64), diff = got[i].to(Device::cpu()).to(DType::f64) - ref;
      errors[i] = std::sqrt(mean(diff * diff).item() / mean(ref * ref).item());
    }
    return errors;
  };
  const auto f16_4 = rms_errors(DType::f16, 4), f16_2 = rms_errors(DType::f16, 2), bf16_2 = rms_errors(DType::bf16, 2);
  const auto f16_4_scaled = rms_errors(DType::f16, 4, 512.0);
  const char* names[] = {"output", "input gradient", "weight gradient"};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_LT(f16_4[i], bf16_2[i]) << "f16 F(4x4, 3x3) " << f16_4[i] << ", bf16 F(2x2, 3x3) " << bf16_2[i];
    EXPECT_LT(f16_4[i], 8 * f16_2[i]) << "f16 F(4x4, 3x3) " << f16_4[i] << ", f16 F(2x2, 3x3) " << f16_2[i];
    EXPECT_GT(f16_4[i], 2 * f16_2[i]) << "f16 F(4x4, 3x3) " << f16_4[i] << ", f16 F(2x2, 3x3) " << f16_2[i];
    EXPECT_LT(f16_4_scaled[i], 1.5 * f16_4[i]) << "f16 F(4x4, 3x3), output gradient 512 times larger: "
                                                << f16_4_scaled[i];
    std::printf("%s: rms error f16 F(4x4, 3x3) %.2e, f16 F(2x2, 3x3) %.2e, bf16 F(2x2, 3x3) %.2e\n", names[i], f16_4[i],
                f16_2[i], bf16_2[i]);
  }
}

// The benchmark knob's ways for Winograd: the automatic choice takes every
// pass of a 3x3 stride-1 convolution of 8 channels or more; `winograd` the
// stem's 3 channels too; `winograd_no_weight` is the automatic choice with
// the weight pass on the columns.
// The direct kernels (conv_direct.comp) take f32 convolutions of one group
// over fewer than 8 channels whose window holds at most 32 inputs: MNIST's
// conv1 with its ReLU (weight gradient in many slices), more output channels
// than a workgroup's 64 (two channel blocks, one slice written in place),
// stride, padding and dilation with a window of exactly 32 and 5 channels
// (blocks of 8), slices and channel blocks both, a 1x1 window, input views,
// with and without bias, against the CPU; and the shapes they leave to the
// other kernels.
TEST(VulkanConv, DirectKernelsForTinyReductionsMatchCpu) {
  REQUIRE_VULKAN();
  const ConvCase cases[] = {{64, 1, 28, 28, 32, 3, 3, {}, true, 0, true},
                            {2, 3, 9, 11, 70, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true, 1},
                            {16, 1, 20, 20, 80, 3, 3, {.padding = {1, 1}}, true, 0},  // 25 slices x 2 blocks
                            {3, 2, 10, 10, 5, 4, 4, {.stride = {1, 2}, .padding = {3, 2}, .dilation = {2, 1}}, false, 2},
                            {4, 3, 7, 7, 16, 1, 1, {}, true, 0, true},
                            {1, 1, 5, 5, 1, 5, 5, {}, false, 0}};
  for (const ConvCase& k : cases) {
    expect_conv_matches_cpu(k, k.n * k.h * k.w > 10000 ? 1e-3 : 1e-4);  // f32 sums over 43,264 positions
    if (::testing::Test::HasFatalFailure()) return;
  }
  ConvRouteRestore restore;
  Conv2dGeometry conv1{8, 1, 28, 28, 3, 3, 1, 1, 0, 0, 1, 1, 26, 26}, wide = conv1, stem = conv1;
  wide.channels = 8;  // K = 72
  stem.channels = 3;  // K = 27
  Conv2dGeometry tall = conv1;
  tall.kernel_h = 11;  // K = 33
  EXPECT_TRUE(vulkan::conv_takes_direct(conv1, 1, DType::f32));
  EXPECT_TRUE(vulkan::conv_takes_direct(stem, 1, DType::f32));
  EXPECT_FALSE(vulkan::conv_takes_direct(wide, 1, DType::f32));
  EXPECT_FALSE(vulkan::conv_takes_direct(tall, 1, DType::f32));
  EXPECT_FALSE(vulkan::conv_takes_direct(stem, 3, DType::f32));   // grouped
  EXPECT_FALSE(vulkan::conv_takes_direct(conv1, 1, DType::f16));  // 16-bit: the columns
  vulkan::conv_route_override() = vulkan::ConvRoute::implicit_gemm;
  EXPECT_FALSE(vulkan::conv_takes_direct(conv1, 1, DType::f32));  // a forced route
}

TEST(VulkanConv, WinogradRoutesPerPass) {
  ConvRouteRestore restore;
  Conv2dGeometry wide{8, 64, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, 16}, stem = wide, strided = wide;
  stem.channels = 3;
  strided.stride_h = strided.stride_w = 2;
  strided.out_h = strided.out_w = 8;
  using vulkan::ConvPass;
  using vulkan::ConvRoute;
  auto takes = [](ConvPass pass, const Conv2dGeometry& g) { return vulkan::conv_takes_winograd(pass, g, 1); };
  const ConvPass passes[] = {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight};
  struct Want {
    ConvRoute route;
    bool wide[3], stem[3];
  };
  const Want wants[] = {{ConvRoute::automatic, {true, true, true}, {false, false, false}},
                        {ConvRoute::winograd, {true, true, true}, {true, true, true}},
                        {ConvRoute::winograd_no_weight, {true, true, false}, {false, false, false}},
                        {ConvRoute::weight_columns, {false, false, false}, {false, false, false}}};
  for (const Want& w : wants) {
    vulkan::conv_route_override() = w.route;
    for (int p = 0; p < 3; ++p) {
      SCOPED_TRACE("route " + std::to_string(int(w.route)) + " pass " + std::to_string(p));
      EXPECT_EQ(takes(passes[p], wide), w.wide[p]);
      EXPECT_EQ(takes(passes[p], stem), w.stem[p]);
      EXPECT_FALSE(takes(passes[p], strided));
      EXPECT_FALSE(vulkan::conv_takes_winograd(passes[p], wide, 2));  // grouped
    }
  }
}

// ---- f16 GEMM on cooperative matrices, and the f32 GEMM's tile tuner ----

namespace {
using vulkan::CoopMatShape;
using vulkan::CoopMatType;
constexpr CoopMatType F16 = CoopMatType::f16, F32 = CoopMatType::f32;
constexpr std::uint32_t kShared48K = 49152, kThreads1K = 1024;

vulkan::VulkanBackend& vulkan_backend() { return dynamic_cast<vulkan::VulkanBackend&>(backend(kGpu)); }

// f16-rounded operands and the f32 product of the rounded values, on the CPU.
Tensor rounded(const Tensor& t) { return t.to(DType::f16).to(DType::f32); }
}  // namespace

TEST(VulkanCoopmat, TileChoiceFromTheDeviceShapes) {
  using vulkan::choose_coopmat_tile;
  // None: an empty list, f16 accumulation only, workgroup scope only, odd sizes, k beyond a 32-slice.
  EXPECT_FALSE(choose_coopmat_tile({}, 32, kShared48K, kThreads1K));
  std::vector<CoopMatShape> unusable = {{16, 8, 16, F16, F16, F16, F16, true},
                                        {16, 8, 16, F16, F16, F32, F32, false},
                                        {12, 8, 16, F16, F16, F32, F32, true},
                                        {16, 16, 64, F16, F16, F32, F32, true},
                                        {16, 8, 16, CoopMatType::other, F16, F32, F32, true}};
  EXPECT_FALSE(choose_coopmat_tile(unusable, 32, kShared48K, kThreads1K));

  // An NVIDIA-like list: the largest f16 x f16 -> f32 product wins.
  std::vector<CoopMatShape> nv = {{16, 8, 8, F16, F16, F32, F32, true},
                                  {16, 8, 16, F16, F16, F32, F32, true},
                                  {16, 16, 16, F16, F16, F16, F16, true},
                                  {16, 16, 16, F16, F16, F32, F32, true}};
  auto t = choose_coopmat_tile(nv, 32, kShared48K, kThreads1K);
  ASSERT_TRUE(t);
  EXPECT_EQ(std::vector<std::uint32_t>({t->lm, t->ln, t->lk}), (std::vector<std::uint32_t>{16, 16, 16}));
  EXPECT_EQ(std::vector<std::uint32_t>({t->bm, t->bn, t->wm, t->wn}), (std::vector<std::uint32_t>{128, 128, 64, 64}));
  EXPECT_EQ(t->threads(), 128u);
  // Same volume: the longer k.
  std::vector<CoopMatShape> same = {{16, 16, 8, F16, F16, F32, F32, true}, {16, 8, 16, F16, F16, F32, F32, true}};
  EXPECT_EQ(choose_coopmat_tile(same, 32, kShared48K, kThreads1K)->lk, 16u);

  // A workgroup layout asked for is taken when valid, ignored otherwise.
  auto eight = choose_coopmat_tile(nv, 32, kShared48K, kThreads1K, "128,128,64,32,32");
  ASSERT_TRUE(eight);
  EXPECT_EQ(eight->wn, 32u);
  EXPECT_EQ(eight->threads(), 256u);
  // 128 x 256 double-buffered needs up to 65 KiB of shared memory: refused within 48 KiB.
  EXPECT_EQ(choose_coopmat_tile(nv, 32, kShared48K, kThreads1K, "128,256,64,64")->bn, 128u);
  EXPECT_EQ(choose_coopmat_tile(nv, 32, 98304, kThreads1K, "128,256,64,64")->bn, 256u);
  EXPECT_EQ(choose_coopmat_tile(nv, 32, kShared48K, kThreads1K, "100,128,64,64")->bm, 128u);
  EXPECT_EQ(choose_coopmat_tile(nv, 32, kShared48K, kThreads1K, "garbage")->bm, 128u);
  // Limits of the device: too little shared memory or too few invocations leave no tile.
  EXPECT_FALSE(choose_coopmat_tile(nv, 32, 8192, kThreads1K));
  EXPECT_FALSE(choose_coopmat_tile(nv, 32, kShared48K, 64));
}

// Thin products narrow the tile (and its subgroups' parts) while the layout
// stays valid: a subgroup's part never goes below one matrix-unit product.
TEST(VulkanCoopmat, ThinProductsNarrowTheTile) {
  using vulkan::fit_coopmat_tile;
  std::vector<CoopMatShape> nv = {{16, 16, 16, F16, F16, F32, F32, true}};
  const vulkan::CoopMatTile t = *vulkan::choose_coopmat_tile(nv, 32, kShared48K, kThreads1K);
  auto dims = [](const vulkan::CoopMatTile& x) { return std::vector<std::uint32_t>{x.bm, x.bn, x.wm, x.wn}; };
  EXPECT_EQ(dims(fit_coopmat_tile(t, 1024, 1024, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{128, 128, 64, 64}));
  EXPECT_EQ(dims(fit_coopmat_tile(t, 65, 1024, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{128, 128, 64, 64}));
  EXPECT_EQ(dims(fit_coopmat_tile(t, 64, 64, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{64, 64, 32, 32}));
  EXPECT_EQ(dims(fit_coopmat_tile(t, 40, 1024, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{64, 128, 32, 64}));
  EXPECT_EQ(dims(fit_coopmat_tile(t, 1024, 24, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{128, 32, 64, 16}));
  EXPECT_EQ(dims(fit_coopmat_tile(t, 1, 3, kShared48K, kThreads1K)), (std::vector<std::uint32_t>{32, 32, 16, 16}));
  for (const auto& x : {fit_coopmat_tile(t, 64, 64, kShared48K, kThreads1K), fit_coopmat_tile(t, 1, 3, kShared48K, kThreads1K)})
    EXPECT_EQ(x.threads(), 128u);
}

// The tensor-core kernel's split along K (lavapipe has no cooperative
// matrices, so the rule is checked here, the products on devices with them):
// about two waves of workgroups (eight for batched products from K = 16,384
// on), slices of at least 256, at most 32.
TEST(VulkanCoopmat, SplitKSlicesFromTilesAndK) {
  using vulkan::coopmat_split_k_slices;
  EXPECT_EQ(coopmat_split_k_slices(16, 8192), 17);  // 1024 x 256 weight gradient: 16 tiles of 128 x 128
  EXPECT_EQ(coopmat_split_k_slices(16, 65536), 17);  // the same over 65,536 tokens: still two waves
  EXPECT_EQ(coopmat_split_k_slices(16, 16383, 16), 17);
  EXPECT_EQ(coopmat_split_k_slices(16, 16384, 16), 32);  // Winograd's 16 weight products: 1,056 / 16, capped
  EXPECT_EQ(coopmat_split_k_slices(48, 65536, 16), 22);  // 16 products of 3 tiles each
  EXPECT_EQ(coopmat_split_k_slices(100, 16384, 2), 11);
  EXPECT_EQ(coopmat_split_k_slices(4, 8192), 32);   // 256 x 256: capped at 32
  EXPECT_EQ(coopmat_split_k_slices(4, 1000), 3);    // slices of at least 256
  EXPECT_EQ(coopmat_split_k_slices(4, 300), 1);
  EXPECT_EQ(coopmat_split_k_slices(4, 128), 1);      // K too short to split
  EXPECT_EQ(coopmat_split_k_slices(200, 8192), 1);   // enough tiles already
  EXPECT_EQ(coopmat_split_k_slices(0, 8192), 1);
}

// The capability check decides the path: without VK_NV_cooperative_matrix
// (lavapipe) no f16 product takes the tensor-core kernel and f32 products run
// on the plain kernel; with it, f16 products of K >= kShortK do and f32 ones
// and short-K ones still do not.
TEST(VulkanCoopmat, CapabilityCheckPicksThePath) {
  REQUIRE_VULKAN();
  vulkan::Context ctx(0);
  const std::int64_t k = vulkan::kShortK;
  Tensor a16 = ones({8, k}).to(DType::f16), b16 = ones({k, 8}).to(DType::f16);
  Tensor c32 = zeros({8, 8}), c16 = zeros({8, 8}).to(DType::f16);
  Tensor a32 = ones({8, k}), b32 = ones({k, 8});
  // The shape of a product large enough for the matrix units (the path is
  // decided from the arguments; nothing runs).
  auto args = [k](const Tensor& a, const Tensor& b, const Tensor& c) {
    return GemmArgs::packed(arg_of(a), arg_of(b), arg_of(c), 1024, 1024, k);
  };
  GemmArgs short_k = args(a16, b16, c32);
  short_k.k = k - 8;  // the first k - 8 columns of A and rows of B
  EXPECT_FALSE(vulkan::coopmat_gemm_applies(ctx, short_k));
  const bool has = ctx.coopmat_tile.has_value();
  if (ctx.coopmat_shapes.empty()) EXPECT_FALSE(has) << "a tile without any device shape";
  EXPECT_EQ(vulkan::coopmat_gemm_applies(ctx, args(a16, b16, c32)), has);
  EXPECT_EQ(vulkan::coopmat_gemm_applies(ctx, args(a16, b16, c16)), has);
  EXPECT_FALSE(vulkan::coopmat_gemm_applies(ctx, args(a32, b32, c32)));
  EXPECT_FALSE(vulkan::coopmat_gemm_applies(ctx, args(a16, b32, c32)));
  // f16 products run everywhere: on the matrix units where the device has them, else on the plain kernel.
  EXPECT_TRUE(supports<GemmKernel>(backend(kGpu), DType::f16));
  std::cout << "[ coopmat  ] " << ctx.name << ": " << ctx.coopmat_shapes.size() << " cooperative-matrix shapes, "
            << (has ? "tensor-core f16 GEMM " + std::to_string(ctx.coopmat_tile->lm) + "x" +
                          std::to_string(ctx.coopmat_tile->ln) + "x" + std::to_string(ctx.coopmat_tile->lk)
                    : std::string("plain kernel only"))
            << "\n";
  // The K bound on any device: the context given a tile as an NVIDIA GPU's.
  ctx.coopmat_tile =
      vulkan::choose_coopmat_tile(std::vector<CoopMatShape>{{16, 16, 16, F16, F16, F32, F32, true}}, 32, kShared48K,
                                  kThreads1K);
  ASSERT_TRUE(ctx.coopmat_tile);
  EXPECT_TRUE(vulkan::coopmat_gemm_applies(ctx, args(a16, b16, c32)));
  EXPECT_FALSE(vulkan::coopmat_gemm_applies(ctx, short_k));
  // A small product (8 x 8 tiles of 64) stays on the plain kernel unless its K is long or it is batched.
  GemmArgs small = args(a16, b16, c32);
  small.m = small.n = 512;
  EXPECT_FALSE(vulkan::coopmat_gemm_applies(ctx, small));
  small.k = vulkan::kLongK;
  EXPECT_TRUE(vulkan::coopmat_gemm_applies(ctx, small));
  small.k = k;
  small.batch = 16;
  EXPECT_TRUE(vulkan::coopmat_gemm_applies(ctx, small));
  // The plain path: f32 products agree with the CPU.
  Generator gen(11);
  Tensor a = rand({37, 21}, {}, &gen), b = rand({21, 45}, {}, &gen);
  expect_close(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), 1e-4, "f32 matmul on the plain kernel");
}

// On devices with cooperative matrices (skips elsewhere): aligned, ragged,
// transposed and batched f16 products, f32 and f16 C, alpha and beta.
TEST(VulkanCoopmat, F16ProductsMatchCpu) {
  REQUIRE_VULKAN();
  if (!supports<GemmKernel>(backend(kGpu), DType::f16)) GTEST_SKIP() << "no cooperative matrices on this device";
  Generator gen(12);
  // The last three have few tiles over a long K: split into slices that are summed after.
  for (auto [m, k, n] : {std::array<std::int64_t, 3>{256, 128, 256}, {128, 64, 384}, {33, 47, 65}, {1, 70, 3},
                         {200, 40, 136}, {517, 300, 260}, {256, 8192, 256}, {200, 3000, 136}, {96, 1000, 40},
                         // Narrowed tiles (fit_coopmat_tile): 64 x 64, thin along M or N only, 32 wide.
                         {64, 4096, 64}, {40, 500, 200}, {300, 256, 24}, {17, 3000, 30}}) {
    const std::string what = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    Tensor a = rand({m, k}, {}, &gen) - 0.5, b = rand({k, n}, {}, &gen) - 0.5;
    Tensor want = matmul(rounded(a), rounded(b));
    Tensor ga = a.to(DType::f16).to(kGpu), gb = b.to(DType::f16).to(kGpu);
    expect_close(matmul(ga, gb).to(DType::f32), want, 2e-2, "f16 matmul " + what);
    Tensor at = a.transpose(0, 1).contiguous().to(DType::f16).to(kGpu).transpose(0, 1);
    Tensor bt = b.transpose(0, 1).contiguous().to(DType::f16).to(kGpu).transpose(0, 1);
    expect_close(matmul(at, bt).to(DType::f32), want, 2e-2, "f16 matmul of transposed operands " + what);
  }
  // Batched, f32 C, alpha and beta through the kernel table.
  Tensor a = rand({3, 40, 72}, {}, &gen), b = rand({3, 72, 24}, {}, &gen), c = rand({3, 40, 24}, {}, &gen);
  Tensor ga = a.to(DType::f16).to(kGpu), gb = b.to(DType::f16).to(kGpu), gc = c.to(kGpu);
  GemmArgs g = GemmArgs::packed(arg_of(ga), arg_of(gb), arg_of(gc), 40, 24, 72, {.batch = 3});
  g.alpha = 0.5;
  g.beta = 2.0;
  run_kernel<GemmKernel>(backend(kGpu), g);
  expect_close(gc.cpu(), matmul(rounded(a), rounded(b)) * 0.5 + c * 2.0, 2e-2, "batched f16 gemm, f32 C, alpha, beta");
  // The same with a K long enough to be split: the slices' sum, then beta C.
  Tensor al = rand({3, 40, 1500}, {}, &gen) - 0.5, bl = rand({3, 1500, 24}, {}, &gen) - 0.5;
  Tensor gal = al.to(DType::f16).to(kGpu), gbl = bl.to(DType::f16).to(kGpu), gcl = c.to(kGpu);
  GemmArgs gl = GemmArgs::packed(arg_of(gal), arg_of(gbl), arg_of(gcl), 40, 24, 1500, {.batch = 3});
  gl.alpha = 0.5;
  gl.beta = 2.0;
  run_kernel<GemmKernel>(backend(kGpu), gl);
  expect_close(gcl.cpu(), matmul(rounded(al), rounded(bl)) * 0.5 + c * 2.0, 2e-2,
               "batched f16 gemm split along K, f32 C, alpha, beta");
}

namespace {
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name)
      : path(std::filesystem::path(::testing::TempDir()) / ("rumus_tiles_" + name + ".txt")) {
    std::filesystem::remove(path);
  }
  ~TempFile() { std::filesystem::remove(path); }
  void write(const std::string& text) const { std::ofstream(path) << text; }
  std::string read() const {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), {}};
  }
};

// A timer that makes one candidate the fastest.
std::function<std::optional<double>(const vulkan::GemmTile&)> favour(vulkan::GemmTile fast, int* calls) {
  return [fast, calls](const vulkan::GemmTile& t) -> std::optional<double> {
    ++*calls;
    return t == fast ? 1.0 : 2.0 + t.bm / 64.0;
  };
}
}  // namespace

TEST(VulkanGemmTuner, CacheRoundTrips) {
  TempFile f("roundtrip");
  const auto all = vulkan::gemm_tile_candidates();
  const vulkan::GemmTile fast{64, 128, 16};
  int calls = 0;
  {
    vulkan::GemmTuner tuner("dev:1", f.path, true);
    auto t = tuner.choose("m10.n10.k10.b0.t00", all, favour(fast, &calls));
    ASSERT_TRUE(t);
    EXPECT_EQ(*t, fast);
    EXPECT_EQ(calls, int(vulkan::gemm_tile_candidates().size()));
    EXPECT_EQ(*tuner.choose("m10.n10.k10.b0.t00", all, favour({}, &calls)), fast) << "measured again";
    EXPECT_EQ(calls, int(vulkan::gemm_tile_candidates().size()));
    EXPECT_EQ(tuner.problem(), "");
  }
  // A new process (a new tuner) reads the choice back without timing.
  vulkan::GemmTuner again("dev:1", f.path, true);
  EXPECT_EQ(again.problem(), "");
  ASSERT_TRUE(again.cached("m10.n10.k10.b0.t00"));
  EXPECT_EQ(*again.cached("m10.n10.k10.b0.t00"), fast);
  EXPECT_FALSE(again.cached("m11.n10.k10.b0.t00"));
  // No temporary left beside the file.
  for (const auto& e : std::filesystem::directory_iterator(f.path.parent_path()))
    EXPECT_EQ(e.path().filename().string().find("rumus_tiles_roundtrip.txt.tmp"), std::string::npos) << e.path();
  // Disabled: no measurement, but cached choices still apply.
  vulkan::GemmTuner off("dev:1", f.path, false);
  EXPECT_FALSE(off.choose("m3.n3.k3.b0.t00", all, favour(fast, &calls)));
  EXPECT_TRUE(off.choose("m10.n10.k10.b0.t00", all, favour(fast, &calls)));
  EXPECT_EQ(calls, int(vulkan::gemm_tile_candidates().size()));
  // A device that cannot time chooses nothing and caches nothing.
  vulkan::GemmTuner blind("dev:1", f.path, true);
  EXPECT_FALSE(blind.choose("m4.n4.k4.b0.t00", all, [](const vulkan::GemmTile&) { return std::optional<double>(); }));
  EXPECT_FALSE(blind.cached("m4.n4.k4.b0.t00"));
}

TEST(VulkanGemmTuner, CorruptOrForeignFileIsIgnoredWithAReason) {
  TempFile f("corrupt");
  const auto all = vulkan::gemm_tile_candidates();
  const vulkan::GemmTile fast{128, 64, 8};
  const std::string good = "rumus gemm tiles 3\ndevice dev:1\nm10.n10.k10.b0.t00 64 64 32\n";
  struct Case {
    std::string text, reason;
  };
  for (const Case& c : {Case{"\x01\x02garbage\xff", "does not start with"},
                        Case{"rumus gemm tiles 3\n", "second line does not name the device"},
                        Case{"rumus gemm tiles 3\ndevice dev:2\nm10.n10.k10.b0.t00 64 64 32\n", "another device"},
                        Case{good + "m1.n1.k1.b0.t00 64 64\n", "line 4"},
                        Case{good + "m1.n1.k1.b0.t00 96 64 8\n", "line 4"},
                        Case{good + "m1.n1.k1.b0.t00 64 64 8 9\n", "line 4"},
                        // timed before 64 x 64 tiles ran sliced K: the old version, a tile no longer taken
                        Case{"rumus gemm tiles 2\ndevice dev:1\nm10.n10.k10.b0.t00 64 64 16\n", "does not start with"},
                        Case{good + "m1.n1.k1.b0.t00 64 64 16\n", "line 4"},
                        Case{good + "m1.n1.k1.b0.t00 -64 64 8\n", "line 4"}}) {
    f.write(c.text);
    vulkan::GemmTuner tuner("dev:1", f.path, true);
    EXPECT_NE(tuner.problem().find(c.reason), std::string::npos) << tuner.problem();
    EXPECT_NE(tuner.problem().find(f.path.string()), std::string::npos) << "names the file: " << tuner.problem();
    EXPECT_FALSE(tuner.cached("m10.n10.k10.b0.t00")) << "nothing of an untrusted file is used: " << c.reason;
    // The next choice rewrites the file, which then reads back cleanly.
    int calls = 0;
    EXPECT_EQ(*tuner.choose("m5.n5.k5.b0.t01", all, favour(fast, &calls)), fast);
    vulkan::GemmTuner again("dev:1", f.path, true);
    EXPECT_EQ(again.problem(), "");
    EXPECT_EQ(*again.cached("m5.n5.k5.b0.t01"), fast);
  }
  f.write(good);
  EXPECT_EQ(vulkan::GemmTuner("dev:1", f.path, true).problem(), "");
  // A cache that cannot be written (its directory is a file): choices stay in memory.
  std::filesystem::path blocked = f.path / "tiles.txt";
  vulkan::GemmTuner tuner("dev:1", blocked, true);
  int calls = 0;
  EXPECT_EQ(*tuner.choose("m5.n5.k5.b0.t00", all, favour(fast, &calls)), fast);
  EXPECT_NE(tuner.problem().find("could not"), std::string::npos) << tuner.problem();
  EXPECT_EQ(*tuner.cached("m5.n5.k5.b0.t00"), fast);
}

// The driver's compiled pipelines persist between processes: a second
// Pipelines (a new process) starts from the file the first one wrote; a file
// of another device or driver, or garbage, is ignored with a reason and
// replaced; a cache that cannot be written stays in memory.
TEST(VulkanPipelineCache, SavesLoadsAndRejectsForeignData) {
  REQUIRE_VULKAN();
  const vulkan::Context& ctx = vulkan_backend().context();
  TempFile f("pipelines");
  const std::vector<std::uint32_t> spec = {64};
  {
    vulkan::Pipelines first(ctx, f.path);
    EXPECT_FALSE(first.cache().loaded()) << "no file yet";
    EXPECT_TRUE(first.get(vulkan::ShaderId::elementwise, spec));
  }  // saved when the device's pipelines go
  std::string data = f.read();
  ASSERT_FALSE(data.empty()) << "nothing written to " << f.path;
  EXPECT_TRUE(vulkan::pipeline_cache_header_matches(std::as_bytes(std::span(data.data(), data.size())), ctx.properties));
  {
    vulkan::Pipelines second(ctx, f.path);
    EXPECT_TRUE(second.cache().loaded());
    EXPECT_EQ(second.cache().problem(), "");
    EXPECT_TRUE(second.get(vulkan::ShaderId::elementwise, spec));
  }
  // Another device's or driver's data: never handed to this driver.
  std::string foreign = data;
  foreign[8] ^= 0x5a;  // the vendor id
  std::string other_driver = data;
  other_driver[16] ^= 0x01;  // the cache UUID
  for (const std::string& bad : {foreign, other_driver, std::string("\x01\x02garbage"), std::string()}) {
    f.write(bad);
    {
      vulkan::Pipelines p(ctx, f.path);
      EXPECT_FALSE(p.cache().loaded());
      if (!bad.empty()) {
        EXPECT_NE(p.cache().problem().find("not written by this device"), std::string::npos) << p.cache().problem();
        EXPECT_NE(p.cache().problem().find(f.path.string()), std::string::npos) << "names the file";
      }
      EXPECT_TRUE(p.get(vulkan::ShaderId::elementwise, spec));
    }
    const std::string rewritten = f.read();
    EXPECT_TRUE(vulkan::pipeline_cache_header_matches(std::as_bytes(std::span(rewritten.data(), rewritten.size())),
                                                       ctx.properties))
        << "replaced by this device's data";
  }
  // Its directory is a file: the cache stays in memory, pipelines still build.
  vulkan::Pipelines blocked(ctx, f.path / "pipelines.bin");
  EXPECT_TRUE(blocked.get(vulkan::ShaderId::elementwise, spec));
  blocked.cache().save();
  EXPECT_NE(blocked.cache().problem().find("could not"), std::string::npos) << blocked.cache().problem();
  // No temporaries left beside the file.
  for (const auto& e : std::filesystem::directory_iterator(f.path.parent_path()))
    EXPECT_EQ(e.path().filename().string().find("rumus_tiles_pipelines.txt.tmp"), std::string::npos) << e.path();
}

// Whatever the tuner picks must be right: every candidate tile on aligned,
// ragged, transposed and split-K shapes.
TEST(VulkanGemmTuner, EveryCandidateTileGivesCorrectProducts) {
  REQUIRE_VULKAN();
  std::vector<std::pair<vulkan::GemmTile, std::uint32_t>> runs;  // a tile and its K groups (0: the device's)
  for (const vulkan::GemmTile& tile : vulkan::gemm_tile_candidates()) {
    runs.push_back({tile, 0});
    // Two groups of 64 x 64, as on a device that allows 128 invocations a workgroup.
    if (tile.bm == 64 && tile.bn == 64) runs.push_back({tile, 2});
  }
  for (const auto& [tile, groups] : runs) {
    const std::string name = std::to_string(tile.bm) + "x" + std::to_string(tile.bn) + "x" + std::to_string(tile.bk) +
                             (groups ? " in " + std::to_string(groups) + " K groups" : "");
    vulkan::gemm_tile_override() = tile;
    if (groups) vulkan::gemm_kslices_override() = groups;
    for (auto [m, k, n] : {std::array<std::int64_t, 3>{128, 64, 128}, {33, 17, 65}, {6, 1100, 5}, {130, 40, 70}}) {
      Generator gen(13);
      Tensor a = rand({m, k}, {}, &gen), b = rand({k, n}, {}, &gen);
      Tensor want = matmul(a, b);
      const std::string what = "tile " + name + ", " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      expect_close(matmul(a.to(kGpu), b.to(kGpu)), want, 1e-4, what);
      Tensor at = a.transpose(0, 1).contiguous().to(kGpu).transpose(0, 1);
      Tensor bt = b.transpose(0, 1).contiguous().to(kGpu).transpose(0, 1);
      expect_close(matmul(at, bt), want, 1e-4, what + " transposed");
    }
    vulkan::gemm_tile_override().reset();
    vulkan::gemm_kslices_override().reset();
  }
}

TEST(VulkanGemmTuner, SlicedKGroupsFitTheWorkgroupLimit) {
  EXPECT_EQ(vulkan::gemm_tile_kslices(64, 64, 1024), 4u);
  EXPECT_EQ(vulkan::gemm_tile_kslices(64, 64, 256), 4u);
  EXPECT_EQ(vulkan::gemm_tile_kslices(64, 64, 128), 2u) << "Vulkan's minimum limit: 2 groups of 64";
  EXPECT_EQ(vulkan::gemm_tile_kslices(128, 128, 1024), 1u);
  EXPECT_EQ(vulkan::gemm_tile_kslices(64, 128, 1024), 1u);
  EXPECT_EQ(vulkan::gemm_tile_kslices(32, 32, 128), 8u) << "16 invocations a group, 128 in all";
}

// On first use of a shape class the backend times the candidates on the
// device (timestamp queries), caches the fastest on disk, and the product is right.
TEST(VulkanGemmTuner, TunesOnFirstUseAndCachesOnDisk) {
  REQUIRE_VULKAN();
  TempFile f("device");
  auto& vb = vulkan_backend();
  auto old = vb.replace_gemm_tuner(std::make_unique<vulkan::GemmTuner>("test-device", f.path, true));
  Generator gen(14);
  Tensor a = rand({70, 50}, {}, &gen), b = rand({50, 90}, {}, &gen), c = rand({70, 90}, {}, &gen);
  Tensor gc = c.to(kGpu);
  Tensor ga = a.to(kGpu), gb = b.to(kGpu);
  // Through the kernel table with beta = 1: timing must not touch C.
  GemmArgs g = GemmArgs::packed(arg_of(ga), arg_of(gb), arg_of(gc), 70, 90, 50);
  g.beta = 1.0;
  vulkan::gemm(vb, g);
  auto tuner = vb.replace_gemm_tuner(std::move(old));
  expect_close(gc.cpu(), matmul(a, b) + c, 1e-4, "tuned gemm with beta");
  const std::string key = vulkan::gemm_shape_class(70, 90, 50, 1, false, false);
  auto chosen = tuner->cached(key);
  if (!chosen) GTEST_SKIP() << "the device's queue has no timestamps: nothing tuned";
  EXPECT_TRUE(vulkan::is_gemm_tile_candidate(*chosen));
  EXPECT_NE(f.read().find(key), std::string::npos) << f.read();
  EXPECT_EQ(tuner->problem(), "");
}

// f64 on the device: the double-precision math, random draws, training and
// 64-bit integers beyond float's 2^24.
namespace {

// Distance in units in the last place (0 for equal values, both NaN, or both
// zeros; huge where one side is NaN or infinite and the other is not).
double ulps(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0 : 1e300;
  if (got == want) return 0;
  if (std::isinf(got) || std::isinf(want)) return 1e300;
  if (std::signbit(got) != std::signbit(want)) return got == 0 || want == 0 ? 1 : 1e300;
  std::int64_t g, w;
  std::memcpy(&g, &got, 8);
  std::memcpy(&w, &want, 8);
  return double(g > w ? g - w : w - g);  // same sign: the bit patterns count the doubles between
}

// Values across the whole double range: a dense grid near 0, powers of ten
// and their neighbours both signs, subnormals, the extremes, inf, NaN.
std::vector<double> sweep_values() {
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                           std::numeric_limits<double>::max(), std::numeric_limits<double>::lowest(),
                           std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(),
                           4.9e-310, 709.78, 709.79, -745.1, -745.2, 1e-300, 22.0, 22.1, 6.0, 5.99, 2.5, 2.49};
  for (int i = -4000; i <= 4000; ++i) v.push_back(i * 0.0073);  // [-29.2, 29.2]
  for (int e = -320; e <= 308; e += 3)
    for (double m : {1.0, 1.7, 3.3, 7.9}) {
      double x = m * std::pow(10.0, e);
      if (std::isfinite(x)) {
        v.push_back(x);
        v.push_back(-x);
      }
    }
  for (int i = 0; i < 2000; ++i) v.push_back(1.0 + (i - 1000) * 1e-6);  // log near 1
  return v;
}

double max_ulps(const std::vector<double>& got, const std::vector<double>& x, double (*want)(double),
                double* worst_x) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    double u = ulps(got[i], want(x[i]));
    if (u > worst) {
      worst = u;
      *worst_x = x[i];
    }
  }
  return worst;
}

std::vector<double> on_gpu(const std::vector<double>& x, Tensor (*op)(const Tensor&)) {
  Tensor t = tensor(x, {std::int64_t(x.size())}).to(DType::f64).to(kGpu);
  Tensor r = op(t);
  EXPECT_EQ(r.dtype(), DType::f64);
  return r.to_vector<double>();
}

}  // namespace

TEST(VulkanF64, MathWithinFewUlpsOfTheCLibrary) {
  REQUIRE_VULKAN();
  const std::vector<double> x = sweep_values();
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*want)(double);
    double bound;
  };
  const Case cases[] = {
      {"exp", [](const Tensor& t) { return exp(t); }, [](double v) { return std::exp(v); }, 2},
      {"log", [](const Tensor& t) { return log(t); }, [](double v) { return std::log(v); }, 2},
      {"tanh", [](const Tensor& t) { return tanh(t); }, [](double v) { return std::tanh(v); }, 3},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); },
       [](double v) { return v >= 0 ? 1 / (1 + std::exp(-v)) : std::exp(v) / (1 + std::exp(v)); }, 3},
      {"silu", [](const Tensor& t) { return silu(t); },
       [](double v) { return v * (v >= 0 ? 1 / (1 + std::exp(-v)) : std::exp(v) / (1 + std::exp(v))); }, 4},
      // Where 1 + erf does not cancel (x >= 0), the error of erf shows directly.
      {"gelu", [](const Tensor& t) { return gelu(relu(t)); },
       [](double v) { v = v > 0 ? v : 0; return 0.5 * v * (1 + std::erf(v * 0.70710678118654752440)); }, 2},
      {"pow 2.5", [](const Tensor& t) { return pow(t, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 4},
      {"pow -3", [](const Tensor& t) { return pow(t, -3.0); }, [](double v) { return std::pow(v, -3.0); }, 4},
      {"pow 0.1", [](const Tensor& t) { return pow(t, 0.1); }, [](double v) { return std::pow(v, 0.1); }, 4},
  };
  for (const Case& c : cases) {
    double at = 0;
    double worst = max_ulps(on_gpu(x, c.op), x, c.want, &at);
    EXPECT_LE(worst, c.bound) << c.name << ": " << worst << " ulps at x = " << at;
  }
  // gelu below 0: 1 + erf cancels, so what shows is erf's absolute error
  // (within 3 ulps of 1, the C library's own rounding of erf included).
  std::vector<double> neg;
  for (int i = 0; i <= 4000; ++i) neg.push_back(-i * 0.002);
  auto g = on_gpu(neg, [](const Tensor& t) { return gelu(t); });
  for (std::size_t i = 0; i < neg.size(); ++i) {
    const double want = 0.5 * neg[i] * (1 + std::erf(neg[i] * 0.70710678118654752440));
    EXPECT_NEAR(g[i], want, 0.5 * std::abs(neg[i]) * 3 * std::numeric_limits<double>::epsilon())
        << "gelu at " << neg[i] << ": vulkan " << g[i] << ", C " << want;
  }
}

TEST(VulkanF64, PowFollowsTheCLibraryEverywhere) {
  REQUIRE_VULKAN();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> bases = {0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.7, -3.7, 1e-300, 1e300,
                                     1.0000001, 0.9999999, 5e-324, inf, -inf, nan, 10.0, 0.1};
  const std::vector<double> exps = {0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, -0.5, 2.5, 1e10, -1e10, 1023.0,
                                    -1074.0, 1e-20, 300.0, -300.0, 53.5, inf, -inf, nan};
  std::vector<double> a, b;
  for (double x : bases)
    for (double y : exps) {
      a.push_back(x);
      b.push_back(y);
    }
  const Shape s{std::int64_t(a.size())};
  auto got = pow(tensor(a, s).to(DType::f64).to(kGpu), tensor(b, s).to(DType::f64).to(kGpu)).to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double want = std::pow(a[i], b[i]);
    EXPECT_LE(ulps(got[i], want), 4) << "pow(" << a[i] << ", " << b[i] << "): vulkan " << got[i] << ", C " << want;
    if (want == 0) EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << "pow(" << a[i] << ", " << b[i] << ")";
  }
}

// Sums accumulate in double: a float accumulator would lose the 1e-10 parts.
TEST(VulkanF64, ReductionsKeepDoublePrecision) {
  REQUIRE_VULKAN();
  std::vector<double> v(3000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 1.0 + double(i) * 1e-10;
  Tensor c = tensor(v, {3, 1000}).to(DType::f64);
  Tensor g = c.to(kGpu);
  for (auto [got, want] : {std::pair{sum(g).item(), sum(c).item()}, {mean(g).item(), mean(c).item()}})
    EXPECT_NEAR(got, want, 1e-12 * std::abs(want));
  auto rows = sum(g, {1}).to_vector<double>(), want_rows = sum(c, {1}).to_vector<double>();
  for (std::size_t i = 0; i < rows.size(); ++i) EXPECT_NEAR(rows[i], want_rows[i], 1e-12 * want_rows[i]);
  // max, argmax tell apart values float would merge.
  Tensor close = tensor(std::vector<double>{1.0, 1.0 + 1e-12, 1.0 + 2e-12, 1.0 + 1e-12}, {4}).to(DType::f64).to(kGpu);
  EXPECT_EQ(argmax(close).item(), 2.0);
  EXPECT_EQ(max(close).item(), 1.0 + 2e-12);
  EXPECT_EQ(argmin(close, 0).item(), 0.0);
}

TEST(VulkanF64, MatmulMatchesCpuInDouble) {
  REQUIRE_VULKAN();
  Generator gen(5);
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {33, 70, 31}, {64, 64, 64}, {5, 0, 7}}) {
    Tensor a = randn({2 * m * k}, {.dtype = DType::f64}, &gen).reshape({2, m, k});
    Tensor b = randn({2 * k * n}, {.dtype = DType::f64}, &gen).reshape({2, k, n});
    expect_close(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b), 1e-13, "matmul");
    expect_close(matmul(a.to(kGpu).transpose(-1, -2).contiguous().transpose(-1, -2), b.to(kGpu).transpose(-1, -2).contiguous().transpose(-1, -2)),
                 matmul(a, b), 1e-13, "matmul of transposed views");
  }
}

// The CPU's f64 draws: uniform and bernoulli mapped in double (exact), normal
// from the same float Box-Muller scaled in double.
TEST(VulkanF64, RandomDrawsMatchTheCpu) {
  REQUIRE_VULKAN();
  auto draw = [](Device d, int kind) {
    Generator gen(123);
    TensorOptions o{.dtype = DType::f64, .device = d};
    Tensor t = kind == 0 ? rand({1000}, o, &gen) * 0.3 + 0.1
               : kind == 1 ? randn({1000}, o, &gen)
                           : dropout(ones({1000}, o), 0.3, true, &gen);
    return t.to_vector<double>();
  };
  for (int kind : {0, 1, 2}) {
    auto g = draw(kGpu, kind), c = draw(Device::cpu(), kind);
    for (std::size_t i = 0; i < c.size(); ++i) {
      // Box-Muller runs in float: a GPU's float log and cos are not correctly
      // rounded (NVIDIA's differ by ~1e-6), the bound of the f32 randn test.
      if (kind == 1) EXPECT_NEAR(g[i], c[i], 1e-4 * std::max(1.0, std::abs(c[i]))) << "normal " << i;
      else EXPECT_EQ(g[i], c[i]) << (kind == 0 ? "uniform " : "dropout ") << i;
    }
  }
  // The dropout scale 1 / (1 - p) is the double, not its float rounding.
  auto d = draw(kGpu, 2);
  for (double v : d) EXPECT_TRUE(v == 0.0 || v == 1.0 / 0.7) << v;
}

// i64 arithmetic runs in the double variant: exact to 2^53 (float kept 24 bits).
TEST(VulkanF64, I64ArithmeticExactBeyondFloat) {
  REQUIRE_VULKAN();
  const double big = 1099511627777.0;  // 2^40 + 1
  Tensor a = tensor(std::vector<double>{big, -big, 16777217.0}, {3}).to(DType::i64);
  Tensor g = a.to(kGpu);
  auto sum_gpu = add(g, g).to_vector<double>(), sum_cpu = add(a, a).to_vector<double>();
  EXPECT_EQ(sum_gpu, sum_cpu);
  EXPECT_EQ(sum(g).item(), sum(a).item());
  Tensor three = tensor(std::vector<double>{3}, {1}).to(DType::i64);
  EXPECT_EQ(mul(g, three.to(kGpu)).to_vector<double>(), mul(a, three).to_vector<double>());
}

// The f64 casts to narrower integers go through double, not float.
TEST(VulkanF64, CastsToIntegersAreExact) {
  REQUIRE_VULKAN();
  Tensor a = tensor(std::vector<double>{123456789.0, -2147483647.0, 16777217.0}, {3}).to(DType::f64);
  EXPECT_EQ(a.to(kGpu).to(DType::i32).to_vector<double>(), a.to(DType::i32).to_vector<double>());
}

TEST(VulkanF64, MlpTrainingMatchesCpuCurve) {
  REQUIRE_VULKAN();
  Generator gen(11);
  Tensor x = randn({32, 8}, {.dtype = DType::f64}, &gen), y = randn({32, 4}, {.dtype = DType::f64}, &gen);
  Mlp cpu(Device::cpu(), DType::f64), gpu(kGpu, DType::f64);
  Tensor gx = x.to(kGpu), gy = y.to(kGpu);
  for (int i = 0; i < 5; ++i) {
    double lg = gpu.step(gx, gy, i).item();
    double lc = cpu.step(x, y, i).item();
    EXPECT_NEAR(lg, lc, 1e-12 * std::max(1.0, std::abs(lc))) << "step " << i;
  }
}

TEST(VulkanF64, CnnTrainingMatchesCpuCurve) {
  REQUIRE_VULKAN();
  auto gpu = train_cnn(kGpu, 4, nullptr, DType::f64);
  auto cpu = train_cnn(Device::cpu(), 4, nullptr, DType::f64);
  for (std::size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], 1e-11 * std::max(1.0, std::abs(cpu[i]))) << "step " << i;
  EXPECT_LT(gpu.back(), gpu.front());
}

// f32 index_add where many rows land on one: every addition kept, whether by
// float atomics or (devices without them) by compare-and-swap. Small integers
// sum exactly in any order, so the result must equal the CPU's bit for bit.
TEST(VulkanIndexAdd, KeepsEveryContributionInF32) {
  REQUIRE_VULKAN();
  std::vector<double> ix(3000), g(3000 * 4);
  for (std::size_t i = 0; i < ix.size(); ++i) ix[i] = double(i % 5 == 0 ? 6 : i % 3);  // rows 0, 1, 2, 6
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = double(int(i % 11) - 5);
  Tensor idx = tensor(ix, {3000}).to(DType::i64);
  auto grad_on = [&](Device d) {
    Tensor w = zeros({7, 4}, {.device = d}).requires_grad_();
    return backward(sum(mul(embedding(idx.to(d), w), tensor(g, {3000, 4}).to(d)))).get(w);
  };
  Tensor gpu = grad_on(kGpu), cpu = grad_on(Device::cpu());
  EXPECT_EQ(gpu.to(Device::cpu()).to_vector<float>(), cpu.to_vector<float>());
  EXPECT_NE(cpu.to_vector<float>()[6 * 4], 0.0f);  // the repeated row got its sums
}

// f64 index_add where many rows land on one: every addition kept (64-bit float
// atomics, or compare-and-swap without them), to float-free precision.
TEST(VulkanF64, IndexAddKeepsEveryContribution) {
  REQUIRE_VULKAN();
  if (!supports<IndexAddKernel>(backend(kGpu), DType::f64)) GTEST_SKIP() << "no 64-bit atomics on this device";
  std::vector<double> ix(2000);
  for (std::size_t i = 0; i < ix.size(); ++i) ix[i] = double(i % 7 == 0 ? 3 : i % 2);  // rows 0, 1, 3, heavily repeated
  Tensor idx = tensor(ix, {2000}).to(DType::i64);
  auto grad_on = [&](Device d) {
    Tensor w = zeros({5, 3}, {.dtype = DType::f64, .device = d}).requires_grad_();
    Tensor g = tensor(sample_values({2000, 3}, -1, 1, 9), {2000, 3}).to(DType::f64).to(d) * 1e-9 + 1.0;
    return backward(sum(mul(embedding(idx.to(d), w), g))).get(w);
  };
  Tensor gpu = grad_on(kGpu), cpu = grad_on(Device::cpu());
  EXPECT_EQ(gpu.dtype(), DType::f64);
  expect_close(gpu, cpu, 1e-13, "embedding gradient");
}

// The math library's f64 kernels (shaders/math_special.glsl) against the C
// library over each function's domain, specials (0, -0, inf, NaN) included.
TEST(VulkanF64, SpecialFunctionsWithinFewUlpsOfTheCLibrary) {
  REQUIRE_VULKAN();
  const double inf = std::numeric_limits<double>::infinity();
  auto grid = [&](double lo, double hi, int n) {
    std::vector<double> v = {0.0, -0.0, inf, -inf, std::numeric_limits<double>::quiet_NaN()};
    for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * i / n);
    return v;
  };
  const std::vector<double> all = sweep_values(), trig = grid(-100.0, 100.0, 20000), unit = grid(-1.0, 1.0, 20000);
  struct Case {
    const char* name;
    const std::vector<double>* x;
    Tensor (*op)(const Tensor&);
    double (*want)(double);
    double bound;
  };
  const Case cases[] = {
      {"sin", &trig, [](const Tensor& t) { return sin(t); }, [](double v) { return std::sin(v); }, 4},
      {"cos", &trig, [](const Tensor& t) { return cos(t); }, [](double v) { return std::cos(v); }, 4},
      {"tan", &trig, [](const Tensor& t) { return tan(t); }, [](double v) { return std::tan(v); }, 4},
      {"asin", &unit, [](const Tensor& t) { return asin(t); }, [](double v) { return std::asin(v); }, 4},
      {"acos", &unit, [](const Tensor& t) { return acos(t); }, [](double v) { return std::acos(v); }, 4},
      {"atan", &all, [](const Tensor& t) { return atan(t); }, [](double v) { return std::atan(v); }, 4},
      {"sinh", &all, [](const Tensor& t) { return sinh(t); }, [](double v) { return std::sinh(v); }, 4},
      {"cosh", &all, [](const Tensor& t) { return cosh(t); }, [](double v) { return std::cosh(v); }, 4},
      {"asinh", &all, [](const Tensor& t) { return asinh(t); }, [](double v) { return std::asinh(v); }, 4},
      {"acosh", &all, [](const Tensor& t) { return acosh(t); }, [](double v) { return std::acosh(v); }, 4},
      {"atanh", &unit, [](const Tensor& t) { return atanh(t); }, [](double v) { return std::atanh(v); }, 4},
      {"erfc", &all, [](const Tensor& t) { return erfc(t); }, [](double v) { return std::erfc(v); }, 4},
      {"log1p", &all, [](const Tensor& t) { return log1p(t); }, [](double v) { return std::log1p(v); }, 4},
      {"expm1", &all, [](const Tensor& t) { return expm1(t); }, [](double v) { return std::expm1(v); }, 4},
      {"log2", &all, [](const Tensor& t) { return log2(t); }, [](double v) { return std::log2(v); }, 4},
      {"log10", &all, [](const Tensor& t) { return log10(t); }, [](double v) { return std::log10(v); }, 4},
      {"exp2", &all, [](const Tensor& t) { return exp2(t); }, [](double v) { return std::exp2(v); }, 4},
  };
  for (const Case& c : cases) {
    double at = 0;
    double worst = max_ulps(on_gpu(*c.x, c.op), *c.x, c.want, &at);
    EXPECT_LE(worst, c.bound) << c.name << ": " << worst << " ulps at x = " << at;
  }
  // erfinv has no C function: the CPU's, which runs the same Newton steps. Both
  // stop where erf's last bits do: within erf's rounding divided by its slope.
  Tensor u = tensor(unit, {std::int64_t(unit.size())}).to(DType::f64);
  auto got = erfinv(u.to(kGpu)).to_vector<double>(), want = erfinv(u).to_vector<double>();
  const double eps = std::numeric_limits<double>::epsilon();
  for (std::size_t i = 0; i < unit.size(); ++i) {
    if (!std::isfinite(want[i])) {
      EXPECT_LE(ulps(got[i], want[i]), 0) << "erfinv at " << unit[i];
      continue;
    }
    const double slope = 1.1283791670955126 * std::exp(-want[i] * want[i]);
    EXPECT_NEAR(got[i], want[i], 4 * eps * (std::abs(want[i]) + 1 / slope)) << "erfinv at " << unit[i];
  }
}
