// Modules: registration and dotted names, state round trips, train/eval,
// layer shapes and initialisation.
#include <gtest/gtest.h>

#include <rumus/rumus.hpp>

#include "devices.hpp"
#include "expect_error.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <cmath>
#include <sstream>

using namespace rumus;
using rumus::testing::expect_error;

namespace {

struct Block : nn::Module {
  nn::Conv2d conv{1, 4, 3, {.padding = {1, 1}}};
  nn::BatchNorm2d bn{4};
  Block() { register_modules({{"conv", conv}, {"bn", bn}}); }
  Tensor forward(const Tensor& x) override { return relu(bn(conv(x))); }
  std::string type_name() const override { return "Block"; }
};

struct Net : nn::Module {
  Block block;
  nn::Sequential head{nn::Flatten(), nn::Linear(4 * 4 * 4, 8), nn::ReLU(), nn::Dropout(0.5), nn::Linear(8, 3)};
  Net() { register_modules({{"block", block}, {"head", head}}); }
  Tensor forward(const Tensor& x) override { return head(max_pool2d(block(x), 2)); }
  std::string type_name() const override { return "Net"; }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (auto& [n, t] : named) out.push_back(n);
  return out;
}

}  // namespace

// A growing std::vector<Net> moves its modules: each moved Net's submodules
// (registered by reference, nested two deep) are its own members, so forward,
// parameters and training reach the tensors those members hold.
TEST(Module, MovedModulesKeepTheirMembers) {
  manual_seed(3);
  std::vector<Net> nets;
  for (int i = 0; i < 5; ++i) nets.emplace_back();  // each growth moves the earlier nets
  Tensor x = randn({2, 1, 8, 8});
  for (Net& net : nets) {
    net.eval();
    const auto children = net.named_children();
    ASSERT_EQ(children.size(), 2u);
    EXPECT_EQ(children[0].second, &net.block);
    EXPECT_EQ(children[1].second, &net.head);
    EXPECT_EQ(net.block.named_children()[0].second, &net.block.conv);
    EXPECT_EQ(net.parameters()[0].impl_ptr(), net.block.conv.weight.impl_ptr());
    Tensor by_hand = net.head(max_pool2d(relu(net.block.bn(net.block.conv(x))), 2));
    EXPECT_EQ(net.forward(x).to_vector<float>(), by_hand.to_vector<float>());
  }
  optim::SGD opt(nets[0].parameters(), {.lr = 0.1});
  const std::vector<float> before = nets[0].block.conv.weight.to_vector<float>();
  opt.step(backward(sum(nets[0].forward(x))));
  EXPECT_NE(nets[0].block.conv.weight.to_vector<float>(), before);
}

// Conv1d: PyTorch's names, shapes, printout and errors; the same as a
// height-1 Conv2d with the weight's extra dim.
TEST(Conv1dModule, NamesShapesAndAConv2dOfHeightOne) {
  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  EXPECT_EQ(names(conv.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3}));
  EXPECT_EQ(conv.pretty_print(), "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2)");
  Tensor x = randn({2, 4, 9});
  Tensor y = conv.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 5}));
  Tensor y2 = conv2d(x.unsqueeze(2), conv.weight.unsqueeze(2), conv.bias, {.stride = {1, 2}, .padding = {0, 1}, .groups = 2});
  EXPECT_EQ(y.to_vector<float>(), y2.squeeze(2).to_vector<float>());
  EXPECT_EQ(conv.forward(randn({4, 9})).shape(), (Shape{6, 5}));  // unbatched
  expect_error<ShapeError>([&] { conv1d(x, randn({6, 2, 3, 1})); }, "conv1d: expected weight of 3 dims");
  expect_error<ShapeError>([&] { conv1d(randn({9}), conv.weight); }, "conv1d: expected input of 3 dims");
  expect_error<ShapeError>([&] { conv1d(x, conv.weight, {}, {.stride = 0}); }, "conv1d: expected stride >= 1, got 0");
  expect_error<Error>([] { nn::Conv1d(3, 6, 3, {.groups = 2}); }, "Conv1d: in_channels 3 and out_channels 6");
}

// ConvTranspose2d/1d: PyTorch's weight layout (input channels first), names,
// printout and errors; the forward is conv_transpose2d with the module's options.
TEST(ConvTransposeModules, NamesShapesAndPrintout) {
  nn::ConvTranspose2d up(4, 6, {3, 2}, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  EXPECT_EQ(names(up.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(up.weight.shape(), (Shape{4, 3, 3, 2}));
  EXPECT_EQ(up.bias.shape(), (Shape{6}));
  EXPECT_EQ(up.pretty_print(),
            "ConvTranspose2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), groups=2)");
  Tensor x = randn({2, 4, 3, 5});
  Tensor y = up.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 6, 9}));  // (3-1)*2 - 2 + (3-1) + 1 + 1, (5-1)*2 - 2 + (2-1) + 1 + 1
  EXPECT_EQ(y.to_vector<float>(), conv_transpose2d(x, up.weight, up.bias, up.options).to_vector<float>());
  EXPECT_EQ(up.forward(randn({4, 3, 5})).shape(), (Shape{6, 6, 9}));  // unbatched
  // forward(x, output_size) picks the output_padding as PyTorch, whatever the options hold: 5x8 is the
  // smallest output (output_padding 0), 6x9 the largest (1).
  up.options.output_padding = 0;
  EXPECT_EQ(up.forward(x, {5, 8}).to_vector<float>(),
            conv_transpose2d(x, up.weight, up.bias, {.stride = 2, .padding = 1, .output_padding = {0, 0}, .groups = 2})
                .to_vector<float>());
  EXPECT_EQ(up.forward(x, {6, 9}).to_vector<float>(), y.to_vector<float>());
  expect_error<ShapeError>([&] { up.forward(x, {7, 9}); },
                           "ConvTranspose2d: requested output size 7x9 is not between 5x8 and 6x9 for input [2, 4, 3, 5]");
  // PyTorch's bound: fan_in from weight dim 1 (out / groups * kernel), 3 * 3 * 2 = 18.
  EXPECT_LE(max(abs(up.bias)).item(), 1.0 / std::sqrt(18.0));

  nn::ConvTranspose1d up1(3, 2, 4, {.stride = 3, .dilation = 2}, false);
  EXPECT_EQ(names(up1.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(up1.weight.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(up1.pretty_print(), "ConvTranspose1d(3, 2, kernel_size=(4,), stride=(3,), dilation=(2,), bias=false)");
  EXPECT_EQ(up1.forward(randn({2, 3, 5})).shape(), (Shape{2, 2, 19}));  // (5-1)*3 + 2*3 + 1
  expect_error<Error>([] { nn::ConvTranspose2d(3, 6, 3, {.groups = 2}); },
                      "ConvTranspose2d: in_channels 3 and out_channels 6 must be divisible by groups 2");
  expect_error<Error>([] { nn::ConvTranspose1d(3, 2, 0); }, "ConvTranspose1d: expected kernel_size >= 1, got 0");
}

// padding_mode and padding "same"/"valid": PyTorch's printout, and the same
// as padding the input with pad() and convolving it unpadded.
TEST(ConvPaddingModes, PrintoutAndExplicitPadding) {
  nn::Conv2d same(2, 3, {2, 3}, {.dilation = {1, 2}, .padding_str = "same", .padding_mode = "circular"});
  EXPECT_EQ(same.pretty_print(),
            "Conv2d(2, 3, kernel_size=(2, 3), stride=(1, 1), padding=same, dilation=(1, 2), padding_mode=circular)");
  Tensor x = randn({2, 2, 4, 5});
  Tensor y = same.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4, 5}));
  // Height: total 1 = 0 above + 1 below; width: total 4 = 2 + 2.
  Tensor want = conv2d(pad(x, {2, 2, 0, 1}, "circular"), same.weight, same.bias, {.dilation = {1, 2}});
  EXPECT_EQ(y.to_vector<float>(), want.to_vector<float>());

  nn::Conv1d reflect(3, 4, 3, {.stride = 2, .padding = 1, .padding_mode = "reflect"}, false);
  EXPECT_EQ(reflect.pretty_print(),
            "Conv1d(3, 4, kernel_size=(3,), stride=(2,), padding=(1,), bias=false, padding_mode=reflect)");
  Tensor x1 = randn({2, 3, 7});
  EXPECT_EQ(reflect.forward(x1).to_vector<float>(),
            conv1d(pad(x1, {1, 1}, "reflect"), reflect.weight, {}, {.stride = 2}).to_vector<float>());
  nn::Conv1d valid(3, 4, 3, {.padding_str = "valid"});
  EXPECT_EQ(valid.forward(x1).shape(), (Shape{2, 4, 5}));
  EXPECT_EQ(nn::Conv1d(3, 4, 3).options.padding_mode, "zeros");  // PyTorch's default
}

// InstanceNorm1d/2d: PyTorch's defaults (no affine, no running statistics),
// state-dict names with both on, per-instance statistics, eval by the running ones.
TEST(InstanceNormModules, DefaultsNamesAndStatistics) {
  nn::InstanceNorm2d plain(3);
  EXPECT_TRUE(plain.state_dict().empty());
  EXPECT_EQ(plain.pretty_print(), "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)");
  Tensor x = add(mul(randn({2, 3, 4, 5}), 3.0), 2.0);
  Tensor y = plain.forward(x);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 3; ++c) {  // each instance: mean 0, (biased) variance 1
      Tensor part = y.select(0, n).select(0, c);
      EXPECT_NEAR(mean(part).item(), 0.0, 1e-5);
      EXPECT_NEAR(mean(square(part)).item(), 1.0, 1e-3);
    }
  EXPECT_EQ(plain.forward(x.select(0, 1)).to_vector<float>(), y.select(0, 1).contiguous().to_vector<float>());

  nn::InstanceNorm1d tracked(3, 1e-5, 0.5, true, true);
  std::vector<std::string> keys;
  for (const auto& [k, t] : tracked.state_dict()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
  Tensor x1 = add(randn({4, 3, 6}), 1.0);
  tracked.forward(x1);
  EXPECT_EQ(tracked.num_batches_tracked.item<std::int64_t>(), 1);
  // momentum 0.5 from 0: half the batch's mean of the instance means.
  const auto want = mul(mean(mean(x1, {2}), {0}), 0.5).to_vector<float>();
  const auto got = tracked.running_mean.to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
  tracked.eval();
  Tensor ye = tracked.forward(x1);
  Tensor by_running = div(sub(x1, tracked.running_mean.view({1, 3, 1})),
                          sqrt(add(tracked.running_var.view({1, 3, 1}), 1e-5)));
  const auto a = ye.to_vector<float>(), b = by_running.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  expect_error<ShapeError>([&] { tracked.forward(randn({2, 3, 4, 5})); },
                           "InstanceNorm1d: expected input of 3 dims (batched) or 2 (unbatched), got [2, 3, 4, 5]");
  expect_error<ShapeError>([] { instance_norm(randn({2, 3, 4}), {}, {}, ones({4})); },
                           "instance_norm: expected weight of shape [3] for input [2, 3, 4], got [4]");
  expect_error<ShapeError>([] { instance_norm(randn({2, 3})); },
                           "instance_norm: expected input of at least 3 dims [N, C, ...], got [2, 3]");
  expect_error<ValueError>([] { instance_norm(randn({2, 3, 1})); },
                           "instance_norm: expected more than 1 position per channel");
  expect_error<ValueError>([] { instance_norm(randn({2, 3, 4}), {}, {}, {}, {}, false); },
                           "instance_norm: expected running_mean and running_var when use_input_stats is false");
}

// Upsample, PixelShuffle, PixelUnshuffle: no parameters, PyTorch's printouts,
// the functional forms; shuffling there and back is the identity.
TEST(ResamplingModules, PrintoutsShapesAndRoundTrip) {
  nn::Upsample up({.scale_factor = {2.0}, .mode = "bilinear", .align_corners = false});
  EXPECT_TRUE(up.state_dict().empty());
  EXPECT_EQ(up.pretty_print(), "Upsample(scale_factor=2.0, mode='bilinear')");
  EXPECT_EQ(nn::Upsample({.size = {4, 6}}).pretty_print(), "Upsample(size=(4, 6), mode='nearest')");
  Tensor x = randn({2, 3, 2, 3});
  EXPECT_EQ(up.forward(x).shape(), (Shape{2, 3, 4, 6}));
  // Nearest with factor 2 repeats each pixel in a 2x2 block.
  Tensor near = interpolate(x, {.scale_factor = {2.0}});
  for (std::int64_t i = 0; i < 4; ++i)
    for (std::int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(near.select(2, i).select(2, j).to_vector<float>(), x.select(2, i / 2).select(2, j / 2).to_vector<float>());

  nn::PixelShuffle shuffle(2);
  nn::PixelUnshuffle unshuffle(2);
  EXPECT_EQ(shuffle.pretty_print(), "PixelShuffle(upscale_factor=2)");
  EXPECT_EQ(unshuffle.pretty_print(), "PixelUnshuffle(downscale_factor=2)");
  Tensor y = randn({3, 8, 2, 3});  // unbatched leading dims too: [*, C, H, W]
  EXPECT_EQ(shuffle.forward(y).shape(), (Shape{3, 2, 4, 6}));
  EXPECT_EQ(unshuffle.forward(shuffle.forward(y)).to_vector<float>(), y.to_vector<float>());
  EXPECT_EQ(pixel_shuffle(randn({2, 2, 8, 1, 1}), 2).shape(), (Shape{2, 2, 2, 2, 2}));
}

// Dropout2d/Dropout1d zero whole channels and scale the rest; Fold/Unfold
// are col2im/im2col with PyTorch's printouts. None has parameters.
TEST(ChannelDropoutAndFoldModules, ChannelsPrintoutsAndRoundTrip) {
  nn::Dropout2d drop(0.5);
  EXPECT_TRUE(drop.state_dict().empty());
  EXPECT_EQ(drop.pretty_print(), "Dropout2d(p=0.5)");
  manual_seed(3);
  Tensor x = add(rand({4, 6, 3, 2}), 1.0);  // no zeros of its own
  Tensor y = drop.forward(x);
  int dropped = 0;
  for (std::int64_t n = 0; n < 4; ++n)
    for (std::int64_t c = 0; c < 6; ++c) {
      const auto got = y.select(0, n).select(0, c).to_vector<float>();
      const auto in = x.select(0, n).select(0, c).to_vector<float>();
      const bool zero = got[0] == 0.0f;
      dropped += zero;
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], zero ? 0.0f : 2.0f * in[i]);
    }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 24);
  drop.eval();
  EXPECT_EQ(drop.forward(x).to_vector<float>(), x.to_vector<float>());
  nn::Dropout1d drop1(0.25);
  EXPECT_EQ(drop1.pretty_print(), "Dropout1d(p=0.25)");
  EXPECT_EQ(drop1.forward(randn({3, 5})).shape(), (Shape{3, 5}));
  expect_error<ValueError>([] { nn::Dropout2d(1.5); }, "Dropout2d: expected 0 <= p <= 1, got 1.5");

  nn::Unfold unfold(2, {.stride = 2});
  nn::Fold fold({4, 6}, 2, {.stride = 2});
  EXPECT_TRUE(unfold.state_dict().empty());
  EXPECT_EQ(unfold.pretty_print(), "Unfold(kernel_size=(2, 2), dilation=(1, 1), padding=(0, 0), stride=(2, 2))");
  EXPECT_EQ(fold.pretty_print(),
            "Fold(output_size=(4, 6), kernel_size=(2, 2), dilation=(1, 1), padding=(0, 0), stride=(2, 2))");
  Tensor img = randn({2, 3, 4, 6});
  Tensor cols = unfold.forward(img);
  EXPECT_EQ(cols.shape(), (Shape{2, 12, 6}));
  EXPECT_EQ(fold.forward(cols).to_vector<float>(), img.to_vector<float>());  // blocks do not overlap
}

// AdaptiveMaxPool2d/1d: shapes, printouts, indices that point at the maxima.
TEST(AdaptiveMaxPoolModules, ShapesPrintoutsAndIndices) {
  nn::AdaptiveMaxPool2d pool({2, 3});
  EXPECT_EQ(pool.pretty_print(), "AdaptiveMaxPool2d(output_size=(2, 3))");
  Tensor x = randn({2, 3, 5, 7});
  auto [values, indices] = pool.forward_with_indices(x);
  EXPECT_EQ(values.shape(), (Shape{2, 3, 2, 3}));
  EXPECT_EQ(indices.shape(), (Shape{2, 3, 2, 3}));
  EXPECT_EQ(pool.forward(x).to_vector<float>(), values.to_vector<float>());
  // Each index reads its maximum back from the flattened plane.
  Tensor back = gather(x.flatten(2), 2, indices.flatten(2)).view({2, 3, 2, 3});
  EXPECT_EQ(back.to_vector<float>(), values.to_vector<float>());
  EXPECT_EQ(amax(x, {2, 3}).to_vector<float>(), adaptive_max_pool2d(x, 1).flatten(1).to_vector<float>());
  nn::AdaptiveMaxPool1d pool1(4);
  EXPECT_EQ(pool1.pretty_print(), "AdaptiveMaxPool1d(output_size=4)");
  EXPECT_EQ(pool1.forward(randn({3, 9})).shape(), (Shape{3, 4}));
  expect_error<ShapeError>([] { adaptive_max_pool2d(randn({2, 3}), 2); },
                           "adaptive_max_pool2d: expected input of 4 dims [N, C, H, W] or 3 [C, H, W], got [2, 3]");
  expect_error<ShapeError>([] { adaptive_max_pool2d(randn({1, 2, 3}), {0, 1}); },
                           "adaptive_max_pool2d: expected an output size of at least 1x1, got 0x1");
  expect_error<ShapeError>([] { adaptive_max_pool1d(randn({2, 3, 4, 5}), 2); },
                           "adaptive_max_pool1d: expected input of 3 dims [N, C, L] or 2 [C, L], got [2, 3, 4, 5]");

  // MaxPool2d's indices and MaxUnpool2d: the maxima back at their places, zeros elsewhere.
  nn::MaxPool2d mp(Pool2dOptions{.kernel = 2});
  nn::MaxUnpool2d unpool(2);
  EXPECT_EQ(unpool.pretty_print(), "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  Tensor img = randn({2, 3, 4, 6});
  auto [mv, mi] = mp.forward_with_indices(img);
  EXPECT_EQ(mv.to_vector<float>(), mp.forward(img).to_vector<float>());
  Tensor restored = unpool.forward(mv, mi);
  EXPECT_EQ(restored.shape(), img.shape());
  Tensor kept = ne(restored, 0.0).to(DType::f32);
  EXPECT_EQ(sum(kept).item(), double(mv.numel()));
  EXPECT_EQ(mul(img, kept).to_vector<float>(), restored.to_vector<float>());
  EXPECT_EQ(unpool.forward(mv, mi, Size2{5, 7}).shape(), (Shape{2, 3, 5, 7}));
  expect_error<ShapeError>([&, mv = mv, mi = mi] { max_unpool2d(mv, mi.to(DType::i32), {.kernel = 2}); },
                           "max_unpool2d: expected i64 indices shaped as the input [2, 3, 2, 3], got i32 [2, 3, 2, 3]");
}

// BatchNorm1d, GroupNorm and the 1-D poolings: PyTorch's names and shapes,
// GroupNorm's statistics per sample and group, and errors naming the op.
TEST(OneDLayers, NamesShapesAndGroupStatistics) {
  nn::BatchNorm1d bn(3);
  std::vector<std::string> keys;
  for (const auto& [k, t] : bn.state_dict()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"}));
  EXPECT_EQ(bn.forward(randn({4, 3})).shape(), (Shape{4, 3}));
  EXPECT_EQ(bn.forward(randn({4, 3, 5})).shape(), (Shape{4, 3, 5}));
  EXPECT_EQ(bn.num_batches_tracked.item<std::int64_t>(), 2);
  expect_error<ShapeError>([&] { bn.forward(randn({4, 3, 5, 2})); }, "batch_norm1d: expected input of 2 dims");

  nn::GroupNorm gn(2, 4);
  EXPECT_EQ(names(gn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(gn.pretty_print(), "GroupNorm(2, 4, eps=1e-05, affine=True)");
  Tensor y = gn.forward(add(mul(randn({3, 4, 5}), 3.0), 2.0));
  for (std::int64_t n = 0; n < 3; ++n)
    for (std::int64_t g = 0; g < 2; ++g) {  // each sample's group: mean 0, (biased) variance 1
      Tensor part = y.select(0, n).narrow(0, 2 * g, 2);
      EXPECT_NEAR(mean(part).item(), 0.0, 1e-5);
      EXPECT_NEAR(mean(square(part)).item(), 1.0, 1e-3);
    }
  expect_error<Error>([] { nn::GroupNorm(3, 4); }, "GroupNorm: num_channels 4 must be divisible by num_groups 3");
  expect_error<ShapeError>([] { group_norm(randn({2, 4, 3}), 3); }, "group_norm: expected num_groups >= 1 dividing");

  EXPECT_EQ(nn::MaxPool1d(2).forward(randn({2, 3, 8})).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(nn::AvgPool1d({.kernel = 3, .stride = 1}).forward(randn({3, 8})).shape(), (Shape{3, 6}));
  EXPECT_EQ(nn::AdaptiveAvgPool1d(4).forward(randn({2, 3, 9})).shape(), (Shape{2, 3, 4}));
  expect_error<ShapeError>([] { max_pool1d(randn({8}), {}); }, "max_pool1d: expected input of 3 dims [N, C, L] or 2");
}

// Recurrent layers: PyTorch's parameter names and order, printout, dropout
// between layers only in training, and errors that name the module.
TEST(Recurrent, NamesPrintoutDropoutAndErrors) {
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = 2, .batch_first = true, .bidirectional = true,
                 .proj_size = 2});
  EXPECT_EQ(names(lstm.named_parameters()),
            (std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0",
                                      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                      "bias_hh_l0_reverse", "weight_hr_l0_reverse", "weight_ih_l1", "weight_hh_l1",
                                      "bias_ih_l1", "bias_hh_l1", "weight_hr_l1", "weight_ih_l1_reverse",
                                      "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse",
                                      "weight_hr_l1_reverse"}));
  EXPECT_EQ(lstm.named_parameters()[10].second.shape(), (Shape{16, 4}));  // layer 1 reads both directions' projections
  EXPECT_EQ(lstm.pretty_print(), "LSTM(3, 4, proj_size=2, num_layers=2, batch_first=True, bidirectional=True)");
  auto [out, hc] = lstm.forward(randn({5, 7, 3}), {});
  EXPECT_EQ(out.shape(), (Shape{5, 7, 4}));
  EXPECT_EQ(std::get<0>(hc).shape(), (Shape{4, 5, 2}));
  EXPECT_EQ(std::get<1>(hc).shape(), (Shape{4, 5, 4}));

  nn::GRU gru({.input_size = 3, .hidden_size = 4, .num_layers = 2, .dropout = 0.5});
  Tensor x = randn({6, 2, 3});
  EXPECT_NE(gru.forward(x).to_vector<float>(), gru.forward(x).to_vector<float>());  // dropout draws
  gru.eval();
  EXPECT_EQ(gru.forward(x).to_vector<float>(), gru.forward(x).to_vector<float>());

  expect_error<ShapeError>([&] { lstm.forward(randn({5, 7, 2})); }, "LSTM: expected input_size 3 in the last dim");
  expect_error<ShapeError>([&] { gru.forward(x, zeros({1, 2, 4})); }, "GRU: expected h0 of shape [2, 2, 4], got [1, 2, 4]");
  expect_error<ValueError>([] { nn::RNN({.input_size = 3, .hidden_size = 4, .nonlinearity = "gelu"}); },
                           "RNN: expected nonlinearity \"tanh\" or \"relu\", got \"gelu\"");
  expect_error<ValueError>([] { nn::GRU({.input_size = 3, .hidden_size = 4, .proj_size = 2}); },
                           "GRU: proj_size is for LSTM only");
  expect_error<ValueError>([] { nn::LSTM({.input_size = 3, .hidden_size = 0}); }, "LSTM: expected hidden_size > 0");
  expect_error<ShapeError>([] { nn::LSTMCell({.input_size = 3, .hidden_size = 4}).forward(randn({2, 5})); },
                           "LSTMCell: expected input (N, 3) or (3), got [2, 5]");
}

RUMUS_DEVICE_SUITE(PackedSequenceOnEveryDevice);

// Variable-length batches: padding, packing and unpacking keep values and
// lengths; a packed LSTM equals running each sequence alone (on every device);
// bad lengths are errors naming the function.
TEST(PackedSequence, PadPackUnpackAndErrors) {
  namespace rnn = nn::utils::rnn;
  const Tensor a = randn({3, 2}), b = randn({1, 2}), c = randn({2, 2});
  const Tensor padded = rnn::pad_sequence({a, b, c}, true, -1.0);
  EXPECT_EQ(padded.shape(), (Shape{3, 3, 2}));
  EXPECT_EQ(padded.select(0, 1).select(0, 0).to_vector<float>(), b.select(0, 0).to_vector<float>());
  EXPECT_EQ(padded.select(0, 1).select(0, 2).to_vector<float>(), (std::vector<float>{-1, -1}));
  EXPECT_EQ(rnn::pad_sequence({a, b, c}).shape(), (Shape{3, 3, 2}));  // time-major by default

  const rnn::PackedSequence packed = rnn::pack_sequence({a, b, c}, false);
  EXPECT_EQ(packed.lengths().to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 1, 2}));
  auto [back, lengths] = rnn::pad_packed_sequence(packed, true, 7.0, 4);
  EXPECT_EQ(back.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(back.select(0, 2).select(0, 1).to_vector<float>(), c.select(0, 1).to_vector<float>());
  EXPECT_EQ(back.select(0, 2).select(0, 2).to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_EQ(back.select(0, 0).select(0, 3).to_vector<float>(), (std::vector<float>{7, 7}));
  EXPECT_EQ(lengths.to_vector<std::int64_t>(), (std::vector<std::int64_t>{3, 1, 2}));

  expect_error<ValueError>([&] { rnn::pack_padded_sequence(padded, tensor(std::vector<std::int64_t>{3, 1, 2}), true); },
                           "pack_padded_sequence: with enforce_sorted the lengths must be non-increasing, but length 2 (2) "
                           "is longer than length 1 (1)");
  expect_error<ValueError>([&] { rnn::pack_padded_sequence(padded, tensor(std::vector<std::int64_t>{3, 0, 2}), true, false); },
                           "pack_padded_sequence: expected every length in [1, 3]");
  expect_error<ShapeError>([&] { rnn::pack_padded_sequence(padded, tensor(std::vector<std::int64_t>{3, 2}), true); },
                           "pack_padded_sequence: expected 3 lengths, one per sequence of the batch, got 2");
  expect_error<ShapeError>([&] { rnn::pack_padded_sequence(padded, tensor({3.0, 2.0, 1.0}), true); },
                           "pack_padded_sequence: expected lengths to be a 1-D integer tensor, got f32 [3]");
  expect_error<ValueError>([&] { rnn::pad_packed_sequence(packed, false, 0.0, 2); },
                           "pad_packed_sequence: expected total_length to be at least 3");
  expect_error<ShapeError>([&] { rnn::pad_sequence({a, randn({2, 3})}); },
                           "pad_sequence: sequence 1 is f32 [2, 3] on cpu, expected (L, [2]) f32 on cpu");
  expect_error<ValueError>([] { rnn::pad_sequence({}); }, "pad_sequence: expected at least one sequence");
}

// A bidirectional LSTM on a packed batch gives each sequence's outputs and
// final state as if it ran alone, with zeros past its end.
TEST_P(PackedSequenceOnEveryDevice, LstmRunsEachSequenceAsAlone) {
  namespace rnn = nn::utils::rnn;
  const Device dev = GetParam();
  const Tensor a = randn({3, 2}), b = randn({1, 2}), c = randn({2, 2});
  manual_seed(3);
  nn::LSTM lstm({.input_size = 2, .hidden_size = 3, .num_layers = 2, .bidirectional = true});
  lstm.to(dev);
  auto [out, hc] = lstm.forward_with_packed_input(rnn::pack_sequence({a.to(dev), b.to(dev), c.to(dev)}, false));
  const Tensor o = std::get<0>(rnn::pad_packed_sequence(out)).cpu();  // (3, 3, 6)
  const Tensor h = std::get<0>(hc).cpu();
  const std::vector<Tensor> seqs{a, b, c};
  for (std::int64_t i = 0; i < 3; ++i) {
    auto [alone, hc_alone] = lstm.forward(seqs[std::size_t(i)].unsqueeze(1).to(dev), {});
    const std::int64_t len = seqs[std::size_t(i)].size(0);
    EXPECT_LT(max(abs(o.narrow(0, 0, len).select(1, i) - alone.cpu().select(1, 0))).item(), 1e-5) << dev.str();
    EXPECT_LT(max(abs(h.select(1, i) - std::get<0>(hc_alone).cpu().select(1, 0))).item(), 1e-5) << dev.str();
    if (len < 3) EXPECT_EQ(max(abs(o.narrow(0, len, 3 - len).select(1, i))).item(), 0.0) << "zeros past the end";
  }
}

// PyTorch's forward hooks: around operator() and containers, not forward().
TEST(Module, ForwardHooksRunAroundCallsAndCanBeRemoved) {
  manual_seed(4);
  nn::Linear inner(3, 2);
  nn::Sequential seq;
  auto lin = std::make_shared<nn::Linear>(3, 3);
  seq.push_back(lin);
  seq.push_back(std::make_shared<nn::ReLU>());
  std::vector<std::string> events;
  auto pre = lin->register_forward_pre_hook([&](nn::Module& m, const Tensor& x) {
    events.push_back(m.type_name() + " pre " + shape_str(x.shape()));
    return mul(x, 2.0);  // replaces the input
  });
  auto post = lin->register_forward_hook([&](nn::Module&, const Tensor& x, const Tensor& y) {
    // The input as the pre-hook left it (doubled while the pre-hook is on).
    events.push_back(fmt::format("post {} of {}", shape_str(y.shape()), x.to_vector<float>()[0]));
    return Tensor();  // keeps the output
  });
  Tensor x = ones({1, 3});
  Tensor through_seq = seq(x);
  EXPECT_EQ(events, (std::vector<std::string>{"Linear pre [1, 3]", "post [1, 3] of 2"}));
  EXPECT_EQ(through_seq.to_vector<float>(), relu(lin->forward(mul(x, 2.0))).to_vector<float>());  // forward() itself: no hooks
  EXPECT_EQ(events.size(), 2u);
  EXPECT_TRUE(pre.active());
  (*lin)(x);
  EXPECT_EQ(events.size(), 4u);
  pre.remove();
  pre.remove();  // idempotent
  EXPECT_FALSE(pre.active());
  auto replace = inner.register_forward_hook([](nn::Module&, const Tensor&, const Tensor& y) { return add(y, 1.0); });
  EXPECT_EQ(inner(x).to_vector<float>(), add(inner.forward(x), 1.0).to_vector<float>());
  (*lin)(x);
  EXPECT_EQ(events.back(), "post [1, 3] of 1");
  EXPECT_EQ(events.size(), 5u);
  post.remove();
  replace.remove();
  EXPECT_EQ(inner(x).to_vector<float>(), inner.forward(x).to_vector<float>());
  expect_error<Error>([&] { inner.register_forward_hook(nullptr); },
                      "Linear.register_forward_hook: expected a callable hook, got an empty one");
  {
    nn::ModuleHookHandle outlived;
    {
      nn::Linear gone(2, 2);
      outlived = gone.register_forward_pre_hook([](nn::Module&, const Tensor&) { return Tensor(); });
    }
    EXPECT_FALSE(outlived.active());
    outlived.remove();  // harmless once the module is gone
  }
}

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  EXPECT_EQ(names(net.named_parameters()),
            (std::vector<std::string>{"block.conv.weight", "block.conv.bias", "block.bn.weight", "block.bn.bias",
                                      "head.1.weight", "head.1.bias", "head.4.weight", "head.4.bias"}));
  EXPECT_EQ(names(net.named_buffers()),
            (std::vector<std::string>{"block.bn.running_mean", "block.bn.running_var", "block.bn.num_batches_tracked"}));
  EXPECT_EQ(net.num_parameters(), 4 * 9 + 4 + 4 + 4 + 64 * 8 + 8 + 8 * 3 + 3);
  EXPECT_EQ(net.state_dict().size(), 11u);
  for (auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, StateDictRoundTripGivesIdenticalOutputs) {
  manual_seed(0);
  Net a;
  manual_seed(1);
  Net b;
  Tensor x = randn({2, 1, 8, 8});
  a.train();
  a.forward(x);  // moves the running statistics away from their initial values
  a.eval();
  b.eval();
  EXPECT_NE(a(x).to_vector<float>(), b(x).to_vector<float>());
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a(x).to_vector<float>(), b(x).to_vector<float>());
  EXPECT_EQ(b.block.bn.num_batches_tracked.item<std::int64_t>(), 1);
  // Loading copies values: the parameters stay the tensors an optimizer holds.
  Tensor w = b.block.conv.weight;
  b.load_state_dict(Net().state_dict());
  EXPECT_EQ(w.impl_ptr(), b.block.conv.weight.impl_ptr());
}

TEST(Module, LoadStateDictChecksNamesShapesAndDtypes) {
  Net net;
  StateDict sd = net.state_dict();
  StateDict missing = sd;
  missing.erase("head.4.bias");
  missing["extra"] = zeros({1});
  try {
    net.load_state_dict(missing);
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("missing [head.4.bias]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected [extra]"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(net.load_state_dict(missing, false));
  StateDict shape = sd;
  shape["head.4.weight"] = zeros({3, 9});
  EXPECT_THROW(net.load_state_dict(shape), ShapeError);
  StateDict dtype = sd;
  dtype["head.4.weight"] = zeros({3, 8}, {.dtype = DType::f64});
  EXPECT_THROW(net.load_state_dict(dtype), DTypeError);
}

TEST(Module, TrainAndEvalReachEverySubmodule) {
  Net net;
  net.eval();
  EXPECT_FALSE(net.head[3].is_training());
  Tensor x = randn({2, 8});
  nn::Dropout drop(0.5);
  drop.eval();
  EXPECT_EQ(drop(x).to_vector<float>(), x.to_vector<float>());
  drop.train();
  auto v = drop(x).to_vector<float>();
  int zeros_seen = 0;
  for (float f : v) zeros_seen += f == 0.0f;
  EXPECT_GT(zeros_seen, 0);
  net.train();
  EXPECT_TRUE(net.block.bn.is_training());
}

RUMUS_DEVICE_SUITE(ModuleOnEveryDevice);

// As torch.nn.Dropout(p=1): all zeros in training, and a zero gradient (no
// 1 / (1 - p) blow-up); the identity in eval. p outside [0, 1] is refused.
TEST_P(ModuleOnEveryDevice, DropoutOfOneZeroesEverything) {
  const Device dev = GetParam();
  Tensor x = randn({3, 5}).to(dev).requires_grad_();
  nn::Dropout drop(1.0);
  drop.to(dev);
  Tensor y = drop(x);
  EXPECT_EQ(y.to(Device::cpu()).to_vector<float>(), std::vector<float>(15, 0.0f));
  GradientStore grads = backward(sum(mul(y, 2.0)));
  EXPECT_EQ(grads.at(x).to(Device::cpu()).to_vector<float>(), std::vector<float>(15, 0.0f));
  // The functional form, in f64 and through its composed path.
  Tensor x64 = randn({4}, {.dtype = DType::f64}).to(dev).requires_grad_();
  Tensor y64 = dropout(x64, 1.0, true);
  EXPECT_EQ(y64.to(Device::cpu()).to_vector<double>(), std::vector<double>(4, 0.0));
  EXPECT_EQ(backward(sum(y64)).at(x64).to(Device::cpu()).to_vector<double>(), std::vector<double>(4, 0.0));
  drop.eval();
  EXPECT_EQ(drop(x).to(Device::cpu()).to_vector<float>(), x.to(Device::cpu()).to_vector<float>());
}

TEST(Module, DropoutRefusesPOutsideZeroToOne) {
  EXPECT_NO_THROW(nn::Dropout(0.0));
  for (double bad : {1.5, -0.1, std::nan("")}) {
    try {
      nn::Dropout d(bad);
      ADD_FAILURE() << "Dropout(" << bad << ") was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("Dropout: expected 0 <= p <= 1, got"), std::string::npos) << e.what();
    }
  }
}

TEST(Module, ToKeepsTensorIdentity) {
  Net net;
  Tensor w = net.head[1].named_parameters()[0].second;
  net.to(Device::cpu());
  EXPECT_EQ(w.impl_ptr(), net.head[1].named_parameters()[0].second.impl_ptr());
}

TEST(Module, RegistrationErrors) {
  struct Bad : nn::Module {
    void twice() {
      register_parameter("w", zeros({1}));
      register_buffer("w", zeros({1}));
    }
    void dotted() { register_parameter("a.b", zeros({1})); }
  } bad;
  EXPECT_THROW(bad.twice(), Error);
  EXPECT_THROW(bad.dotted(), Error);
  EXPECT_THROW(nn::Module().forward(zeros({1})), Error);
  EXPECT_THROW(nn::Linear(0, 3), Error);
  EXPECT_THROW(nn::Conv2d(3, 4, 3, {.groups = 2}), Error);
  EXPECT_THROW(nn::Dropout(1.5), Error);
}

TEST(Layers, ShapesOfEveryLayer) {
  Tensor img = randn({2, 3, 8, 8});
  EXPECT_EQ(nn::Conv2d(3, 5, 3)(img).shape(), (Shape{2, 5, 6, 6}));
  EXPECT_EQ(nn::MaxPool2d(2)(img).shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(nn::AvgPool2d(4)(img).shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1)(img).shape(), (Shape{2, 3, 1, 1}));
  EXPECT_EQ(nn::BatchNorm2d(3)(img).shape(), img.shape());
  EXPECT_EQ(nn::LayerNorm({8})(img).shape(), img.shape());
  EXPECT_EQ(nn::Flatten()(img).shape(), (Shape{2, 192}));
  EXPECT_EQ(nn::Linear(8, 2)(img).shape(), (Shape{2, 3, 8, 2}));
  nn::Embedding emb(10, 4, 0);
  EXPECT_EQ(emb(tensor(std::vector<std::int64_t>{0, 3, 9}, Shape{3})).shape(), (Shape{3, 4}));
  EXPECT_EQ(emb.weight.select(0, 0).to_vector<float>(), std::vector<float>(4, 0.0f));
  nn::ReLU relu_;
  nn::GELU gelu_;
  nn::Tanh tanh_;
  nn::Sigmoid sigmoid_;
  nn::LeakyReLU leaky(0.2);
  nn::SiLU silu_;
  Tensor v = tensor({-1.0, 2.0});
  EXPECT_EQ(relu_(v).to_vector<float>(), (std::vector<float>{0.0f, 2.0f}));
  EXPECT_NEAR(gelu_(v).to_vector<float>()[1], 2.0 * 0.5 * (1 + std::erf(2.0 / std::sqrt(2.0))), 1e-5);
  EXPECT_NEAR(tanh_(v).to_vector<float>()[0], std::tanh(-1.0), 1e-6);
  EXPECT_NEAR(sigmoid_(v).to_vector<float>()[0], 1 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(leaky(v).to_vector<float>()[0], -0.2, 1e-6);
  EXPECT_NEAR(silu_(v).to_vector<float>()[1], 2.0 / (1 + std::exp(-2.0)), 1e-5);
}

TEST(Layers, BatchNormUsesRunningStatisticsInEval) {
  nn::BatchNorm2d bn(2);
  Tensor x = add(mul(randn({4, 2, 3, 3}), 3.0), 5.0);
  bn(x);
  // running = 0.9 * 0 + 0.1 * batch mean (about 5).
  for (float m : bn.running_mean.to_vector<float>()) EXPECT_NEAR(m, 0.5, 0.2);
  bn.eval();
  Tensor y = bn(x);
  EXPECT_GT(std::abs(y.mean().item()), 0.5);  // not renormalised to zero mean
}

TEST(Init, DefaultLinearBoundsAndSeededReproduction) {
  manual_seed(3);
  nn::Linear a(400, 50);
  manual_seed(3);
  nn::Linear b(400, 50);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  double bound = 1.0 / std::sqrt(400.0);
  auto w = a.weight.to_vector<float>();
  double lo = 1, hi = -1, sq = 0;
  for (float v : w) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v), sq += double(v) * v;
  EXPECT_LE(hi, bound);
  EXPECT_GE(lo, -bound);
  EXPECT_GT(hi, 0.9 * bound);
  EXPECT_NEAR(std::sqrt(sq / double(w.size())), bound / std::sqrt(3.0), 0.05 * bound);  // U(-b, b) has std b/sqrt(3)
}

TEST(Init, KaimingAndXavierStandardDeviations) {
  auto stddev = [](const Tensor& t) {
    auto v = t.to_vector<float>();
    double s = 0;
    for (float f : v) s += double(f) * f;
    return std::sqrt(s / double(v.size()));
  };
  Tensor w = empty({256, 128, 3, 3});
  nn::init::kaiming_normal_(w, 0, nn::init::FanMode::fan_in, "relu");
  EXPECT_NEAR(stddev(w), std::sqrt(2.0 / (128 * 9)), 0.01 * std::sqrt(2.0 / (128 * 9)));
  nn::init::kaiming_uniform_(w, 0, nn::init::FanMode::fan_out, "relu");
  EXPECT_NEAR(stddev(w), std::sqrt(2.0 / (256 * 9)), 0.01 * std::sqrt(2.0 / (256 * 9)));
  Tensor m = empty({300, 500});
  nn::init::xavier_uniform_(m);
  EXPECT_NEAR(stddev(m), std::sqrt(2.0 / 800), 0.01 * std::sqrt(2.0 / 800));
  nn::init::xavier_normal_(m, 2.0);
  EXPECT_NEAR(stddev(m), 2.0 * std::sqrt(2.0 / 800), 0.02 * std::sqrt(2.0 / 800));
  nn::init::constant_(m, 0.25);
  EXPECT_EQ(m.to_vector<float>()[7], 0.25f);
  EXPECT_THROW(nn::init::xavier_uniform_(w = empty({5})), ShapeError);
  EXPECT_THROW(nn::init::calculate_gain("softplus"), Error);
  EXPECT_NEAR(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04), 1e-12);
}

TEST(Layers, LinearTrainsWithAnOptimizer) {
  manual_seed(0);
  nn::Sequential net(nn::Linear(2, 16), nn::Tanh(), nn::Linear(16, 1));
  optim::Adam opt(net.parameters(), {.lr = 0.05});
  Tensor x = tensor({{0, 0}, {0, 1}, {1, 0}, {1, 1}}), y = tensor({0.0, 1.0, 1.0, 0.0}).reshape({4, 1});
  double first = 0, last = 0;
  for (int i = 0; i < 200; ++i) {
    Tensor loss = mse_loss(net(x), y);
    if (i == 0) first = loss.item();
    last = loss.item();
    opt.step(backward(loss));
  }
  EXPECT_LT(last, 0.1 * first);
}

TEST(Module, ToDTypeCastsFloatingTensorsInPlace) {
  Net net;
  Tensor w = net.block.conv.weight;
  net.to(DType::f64);
  EXPECT_EQ(w.impl_ptr(), net.block.conv.weight.impl_ptr());  // same parameter, new dtype
  for (auto& [name, p] : net.named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f64) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
  EXPECT_EQ(net.block.bn.running_mean.dtype(), DType::f64);
  EXPECT_EQ(net.block.bn.num_batches_tracked.dtype(), DType::i64);  // integer buffers keep theirs
  net.eval();
  Tensor y = net(rand({2, 1, 8, 8}).to(DType::f64));
  EXPECT_EQ(y.dtype(), DType::f64);
  // An optimizer built afterwards trains the cast parameters.
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  Tensor before = net.block.conv.weight.clone();
  GradientStore g = backward(sum(y));
  opt.step(g);
  EXPECT_NE(before.to_vector<double>(), net.block.conv.weight.to_vector<double>());
  try {
    net.to(DType::i32);
    ADD_FAILURE() << "expected a DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("Net.to: expected a floating dtype"), std::string::npos) << e.what();
  }
}

TEST(Module, PrintsLikePyTorch) {
  nn::Sequential seq(nn::Linear(784, 128), nn::ReLU(), nn::Dropout(0.2), nn::Linear(128, 10, false));
  std::ostringstream os;
  os << seq;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=128, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Dropout(p=0.2)\n"
            "  (3): Linear(in_features=128, out_features=10, bias=false)\n"
            ")");
  Net net;
  EXPECT_EQ(net.pretty_print(),
            "Net(\n"
            "  (block): Block(\n"
            "    (conv): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
            "    (bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true)\n"
            "  )\n"
            "  (head): Sequential(\n"
            "    (0): Flatten(start_dim=1, end_dim=-1)\n"
            "    (1): Linear(in_features=64, out_features=8, bias=true)\n"
            "    (2): ReLU()\n"
            "    (3): Dropout(p=0.5)\n"
            "    (4): Linear(in_features=8, out_features=3, bias=true)\n"
            "  )\n"
            ")");
  EXPECT_EQ(nn::MaxPool2d(2).pretty_print(),
            "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=false)");
  EXPECT_EQ(nn::Embedding(10, 4, 0).pretty_print(), "Embedding(10, 4, padding_idx=0)");
  EXPECT_EQ(nn::LayerNorm({8}).pretty_print(), "LayerNorm((8,), eps=1e-05, elementwise_affine=true)");
}

// The fused layers hold Conv2d's and Linear's parameters under the same names:
// a state dict saved from the unfused layers loads into them one to one, and
// they compute ReLU of the unfused layer.
TEST(Layers, FusedReluLayersKeepTheUnfusedNamesAndValues) {
  manual_seed(3);
  nn::Conv2d conv(3, 8, 3, {.padding = {1, 1}});
  nn::Linear fc(12, 5);
  nn::ConvReLU2d conv_relu(3, 8, 3, {.padding = {1, 1}});
  nn::LinearReLU fc_relu(12, 5);
  EXPECT_EQ(names(conv_relu.named_parameters()), names(conv.named_parameters()));
  EXPECT_EQ(names(fc_relu.named_parameters()), names(fc.named_parameters()));
  conv_relu.load_state_dict(conv.state_dict());
  fc_relu.load_state_dict(fc.state_dict());
  Tensor x = randn({2, 3, 6, 6}), v = randn({4, 12});
  EXPECT_EQ(conv_relu(x).to_vector<float>(), relu(conv(x)).to_vector<float>());
  EXPECT_EQ(fc_relu(v).to_vector<float>(), relu(fc(v)).to_vector<float>());
  EXPECT_EQ(conv_relu.pretty_print(), "ConvReLU2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  EXPECT_EQ(fc_relu.pretty_print(), "LinearReLU(in_features=12, out_features=5, bias=true)");
}

namespace {

struct Tower : nn::Module {
  nn::ModuleList layers{nn::Linear(2, 3), nn::ReLU(), nn::Linear(3, 1)};
  nn::ModuleDict heads{{{"mean", std::make_shared<nn::Linear>(1, 1)}, {"scale", std::make_shared<nn::Linear>(1, 1, false)}}};
  Tower() { register_modules({{"layers", layers}, {"heads", heads}}); }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& layer : layers) h = layer->forward(h);
    return add(heads["mean"](h), heads["scale"](h));
  }
  std::string type_name() const override { return "Tower"; }
};

std::vector<std::string> module_names(const std::vector<std::pair<std::string, nn::Module*>>& named) {
  std::vector<std::string> out;
  for (auto& [n, m] : named) out.push_back(n);
  return out;
}

}  // namespace

TEST(Containers, ModuleListAndModuleDictStateDictNames) {
  Tower t;
  EXPECT_EQ(names(t.named_parameters()),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias",
                                      "heads.mean.weight", "heads.mean.bias", "heads.scale.weight"}));
  // A state dict with PyTorch's names loads strictly.
  StateDict sd = t.state_dict();
  Tower other;
  other.load_state_dict(sd);
  Tensor x = rand({4, 2});
  EXPECT_EQ(t(x).to_vector<float>(), other(x).to_vector<float>());
}

// PyTorch's state dict of the same module (make_reference.py's containers()) loads strictly and gives its output.
TEST(Containers, APyTorchStateDictLoadsStrictly) {
  const std::string dir = RUMUS_TORCH_REFERENCE_DIR;
  Tower t;
  t.to(DType::f64);
  t.load_state_dict(io::load_safetensors(dir + "/module_containers.safetensors"));
  std::ifstream in(dir + "/module_containers.txt");
  std::string header, values;
  std::map<std::string, std::vector<double>> ref;
  while (std::getline(in, header) && std::getline(in, values)) {
    std::istringstream h(header), v(values);
    std::string key;
    h >> key;
    for (double x; v >> x;) ref[key].push_back(x);
  }
  ASSERT_EQ(ref.at("x").size(), 8u);
  Tensor out = t(tensor(ref.at("x"), {4, 2}));
  auto got = out.to_vector<double>();
  ASSERT_EQ(got.size(), ref.at("out").size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref.at("out")[i], 1e-12) << i;
}

TEST(Containers, ModuleListIndexingIterationAndErrors) {
  nn::ModuleList list(nn::Linear(2, 3), nn::ReLU());
  list.push_back(nn::Linear(3, 4));
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[1].type_name(), "ReLU");
  EXPECT_EQ(list[-1].type_name(), "Linear");
  EXPECT_EQ(list.at<nn::Linear>(2).weight.shape(), (Shape{4, 3}));
  std::vector<std::string> types;
  for (const auto& m : list) types.push_back(m->type_name());
  EXPECT_EQ(types, (std::vector<std::string>{"Linear", "ReLU", "Linear"}));
  nn::ModuleList more;
  more.extend(list);
  EXPECT_EQ(more.size(), 3u);
  EXPECT_EQ(more.ptr(0).get(), list.ptr(0).get());  // shared, as PyTorch's extend
  EXPECT_EQ(names(list.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(list.pretty_print(), "ModuleList(\n  (0): Linear(in_features=2, out_features=3, bias=true)\n  (1): ReLU()\n"
                                 "  (2): Linear(in_features=3, out_features=4, bias=true)\n)");
  expect_error<ValueError>([&] { list[3]; }, "ModuleList: index 3 is out of range for a list of 3 modules");
  expect_error<ValueError>([&] { list[-4]; }, "index -4 is out of range");
  expect_error<Error>([&] { list.at<nn::Linear>(1); }, "ModuleList.at: module 1 is a ReLU");
  expect_error<Error>([&] { list.push_back(std::shared_ptr<nn::Module>()); }, "ModuleList.push_back: expected a module");
  expect_error<Error>([&] { list(rand({1, 2})); }, "ModuleList: forward");
}

TEST(Containers, ModuleDictKeysInInsertionOrderAndErrors) {
  nn::ModuleDict dict;
  dict.insert("zeta", nn::Linear(2, 2)).insert("alpha", nn::Tanh());
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"zeta", "alpha"}));
  EXPECT_TRUE(dict.contains("alpha"));
  EXPECT_FALSE(dict.contains("beta"));
  EXPECT_EQ(dict.at<nn::Linear>("zeta").weight.shape(), (Shape{2, 2}));
  EXPECT_EQ(dict.values().size(), 2u);
  EXPECT_EQ(names(dict.named_parameters()), (std::vector<std::string>{"zeta.weight", "zeta.bias"}));
  // A present key gets the new module in place, as PyTorch's dict[key] = module.
  dict.insert("zeta", nn::Linear(2, 5));
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"zeta", "alpha"}));
  EXPECT_EQ(dict.at<nn::Linear>("zeta").weight.shape(), (Shape{5, 2}));
  EXPECT_EQ(dict.named_parameters()[0].second.shape(), (Shape{5, 2}));
  EXPECT_EQ(dict.named_modules().size(), 3u);
  expect_error<ValueError>([&] { dict["beta"]; }, "ModuleDict: expected one of the keys [zeta, alpha], got 'beta'");
  expect_error<Error>([&] { dict.at<nn::Linear>("alpha"); }, "ModuleDict.at: module 'alpha' is a Tanh");
  expect_error<Error>([&] { dict.insert("x.y", nn::ReLU()); }, "invalid name 'x.y'");
}

TEST(Containers, NamedModulesChildrenAndApply) {
  Net net;
  EXPECT_EQ(module_names(net.named_modules()),
            (std::vector<std::string>{"", "block", "block.conv", "block.bn", "head", "head.0", "head.1", "head.2",
                                      "head.3", "head.4"}));
  EXPECT_EQ(module_names(net.named_modules("net")).at(2), "net.block.conv");
  EXPECT_EQ(net.modules().size(), 10u);
  EXPECT_EQ(net.modules().front(), &net);
  ASSERT_EQ(net.children().size(), 2u);
  EXPECT_EQ(net.children()[1], &net.head);
  // A module registered twice is visited once, under its first name (as PyTorch).
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::ModuleList twice;
  twice.push_back(shared).push_back(shared);
  EXPECT_EQ(module_names(twice.named_modules()), (std::vector<std::string>{"", "0"}));
  // apply: children before their parent, each once.
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) { order.push_back(m.type_name()); });
  EXPECT_EQ(order, (std::vector<std::string>{"Conv2d", "BatchNorm2d", "Block", "Flatten", "Linear", "ReLU",
                                             "Dropout", "Linear", "Sequential", "Net"}));
  net.apply([](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::Linear*>(&m)) nn::init::zeros_(lin->weight);
  });
  EXPECT_EQ(sum(abs(dynamic_cast<nn::Linear&>(net.head[1]).weight)).item(), 0.0);
}

TEST(Clone, EqualValuesIndependentTensorsAndAnUntouchedRandomStream) {
  manual_seed(3);
  Net net;
  net.eval();
  manual_seed(11);
  auto copy = nn::clone(net);
  Tensor after_clone = rand({4});
  manual_seed(11);
  EXPECT_EQ(after_clone.to_vector<float>(), rand({4}).to_vector<float>());  // clone drew nothing

  EXPECT_FALSE(copy->is_training());
  auto mine = net.named_parameters(), theirs = copy->named_parameters();
  auto buf_mine = net.named_buffers(), buf_theirs = copy->named_buffers();
  mine.insert(mine.end(), buf_mine.begin(), buf_mine.end());
  theirs.insert(theirs.end(), buf_theirs.begin(), buf_theirs.end());
  ASSERT_EQ(names(mine), names(theirs));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    EXPECT_NE(mine[i].second.storage_ptr(), theirs[i].second.storage_ptr()) << mine[i].first;
    EXPECT_NE(mine[i].second.grad_id(), theirs[i].second.grad_id()) << mine[i].first;
    EXPECT_EQ(mine[i].second.requires_grad(), theirs[i].second.requires_grad()) << mine[i].first;
    EXPECT_EQ(mine[i].second.to(DType::f64).to_vector<double>(), theirs[i].second.to(DType::f64).to_vector<double>())
        << mine[i].first;
  }
  Tensor x = rand({2, 1, 8, 8});
  EXPECT_EQ(net(x).to_vector<float>(), (*copy)(x).to_vector<float>());
  // The members the forward uses are the clone's own: a step on the clone leaves the original alone.
  const auto before = net.head.named_parameters()[0].second.to_vector<float>();
  optim::SGD opt(copy->parameters(), {.lr = 0.1});
  opt.step(backward(sum((*copy)(x))));
  EXPECT_EQ(net.head.named_parameters()[0].second.to_vector<float>(), before);
  EXPECT_NE(copy->head.named_parameters()[0].second.to_vector<float>(), before);
}

TEST(Clone, TakesTheSourceDtypeAndNeedsTheSameStructure) {
  nn::Linear lin(3, 2);
  lin.to(DType::f64);
  auto copy = nn::clone(lin, [] { return nn::Linear(3, 2); });
  EXPECT_EQ(copy->weight.dtype(), DType::f64);
  EXPECT_EQ(copy->weight.to_vector<double>(), lin.weight.to_vector<double>());
  nn::Sequential seq(nn::Linear(2, 2), nn::ReLU());
  expect_error<Error>([&] { nn::clone(seq); },
                      "Sequential.copy_from: expected a module with the same parameters and buffers, got [0.weight, "
                      "0.bias] for []");
  expect_error<ShapeError>([&] { nn::clone(lin, [] { return nn::Linear(2, 2); }); },
                           "Linear.copy_from: 'weight' has shape [2, 3] in the source but [2, 2] here");
  auto seq_copy = nn::clone(seq, [] { return nn::Sequential(nn::Linear(2, 2), nn::ReLU()); });
  EXPECT_EQ(seq_copy->state_dict().at("0.bias").to_vector<float>(), seq.state_dict().at("0.bias").to_vector<float>());
}

RUMUS_DEVICE_SUITE(CloneOnEveryDevice);

TEST_P(CloneOnEveryDevice, KeepsTheSourcesDevice) {
  const Device dev = GetParam();
  nn::Linear on(2, 2);
  on.to(dev);
  auto c = nn::clone(on, [] { return nn::Linear(2, 2); });
  EXPECT_EQ(c->bias.device(), dev);
  EXPECT_EQ(c->bias.to_vector<float>(), on.bias.to_vector<float>());
}

TEST(ParameterVector, RoundTripAndGradient) {
  nn::Linear lin(3, 2);
  Tensor v = nn::parameters_to_vector(lin.parameters());
  ASSERT_EQ(v.shape(), (Shape{8}));
  auto w = lin.weight.to_vector<float>(), b = lin.bias.to_vector<float>();
  w.insert(w.end(), b.begin(), b.end());
  EXPECT_EQ(v.to_vector<float>(), w);
  // Differentiable: d sum(v * c) / d weight is c's first six entries.
  Tensor c = arange(8.0);
  GradientStore g = backward(sum(mul(nn::parameters_to_vector(lin.parameters()), c)));
  EXPECT_EQ(g.at(lin.weight).to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  nn::vector_to_parameters(arange(8.0), lin.parameters());
  EXPECT_EQ(lin.bias.to_vector<float>(), (std::vector<float>{6, 7}));
  EXPECT_EQ(lin.weight.shape(), (Shape{2, 3}));
  expect_error<ShapeError>([&] { nn::vector_to_parameters(arange(7.0), lin.parameters()); },
                           "vector_to_parameters: expected a 1-D vector of 8 elements (the parameters' total), got "
                           "shape [7]");
  expect_error<ValueError>([] { nn::parameters_to_vector({}); }, "parameters_to_vector: expected at least one");
}

TEST(Init, OrthogonalRowsOrColumnsAreOrthonormalTimesGain) {
  manual_seed(4);
  for (Shape shape : {Shape{3, 5}, Shape{5, 3}, Shape{4, 2, 3}, Shape{4, 4}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor w = empty(shape, {.dtype = DType::f64});
    nn::init::orthogonal_(w, 2.0);
    Tensor m = w.reshape({shape[0], -1});
    // The shorter side is orthonormal: W W^T (wide) or W^T W (tall) is gain^2 I.
    Tensor gram = m.size(0) <= m.size(1) ? matmul(m, m.t()) : matmul(m.t(), m);
    const std::int64_t n = gram.size(0);
    Tensor want = mul(eye(n, {.dtype = DType::f64}), 4.0);
    auto g = gram.to_vector<double>(), e = want.to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-12) << i;
  }
  Tensor a = empty({3, 3}), b = empty({3, 3});
  manual_seed(8);
  nn::init::orthogonal_(a);
  manual_seed(8);
  nn::init::orthogonal_(b);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());  // seeded
  Tensor v = empty({3});
  expect_error<ShapeError>([&] { nn::init::orthogonal_(v); },
                           "orthogonal_: expected a tensor of 2 or more dims, got shape [3]");
}

TEST(Init, EyeAndDiracPassTheInputThrough) {
  Tensor w = full({3, 4}, 5.0);
  nn::init::eye_(w);
  EXPECT_EQ(w.to_vector<float>(), eye(3, 4).to_vector<float>());
  // A dirac weight makes a padded convolution the identity, per group too.
  Tensor x = rand({2, 4, 5, 5}, {.dtype = DType::f64});
  Tensor k = empty({4, 4, 3, 3}, {.dtype = DType::f64});
  nn::init::dirac_(k);
  EXPECT_EQ(conv2d(x, k, {}, {.padding = {1, 1}}).to_vector<double>(), x.to_vector<double>());
  Tensor kg = empty({4, 2, 3, 3}, {.dtype = DType::f64});
  nn::init::dirac_(kg, 2);
  EXPECT_EQ(conv2d(x, kg, {}, {.padding = {1, 1}, .groups = 2}).to_vector<double>(), x.to_vector<double>());
  Tensor k1 = empty({3, 3, 5}, {.dtype = DType::f64});
  nn::init::dirac_(k1);
  Tensor x1 = rand({2, 3, 6}, {.dtype = DType::f64});
  EXPECT_EQ(conv1d(x1, k1, {}, {.padding = 2}).to_vector<double>(), x1.to_vector<double>());
  expect_error<ShapeError>([&] { nn::init::eye_(k); }, "eye_: expected a 2-D tensor, got shape [4, 4, 3, 3]");
  expect_error<ShapeError>([&] { nn::init::dirac_(w); }, "dirac_: expected a 3-, 4- or 5-D tensor, got shape [3, 4]");
  expect_error<ValueError>([&] { nn::init::dirac_(k, 3); }, "dirac_: expected dim 0 (4) divisible by groups (3)");
}

RUMUS_DEVICE_SUITE(InitOnEveryDevice);

TEST_P(InitOnEveryDevice, TruncNormalStaysInsideAndHasTheTruncatedMean) {
  const double mean = 0.5, std = 2.0, a = -1.0, b = 2.0;
  const Device dev = GetParam();
  manual_seed(12);
  Tensor t = empty({20000}, {.device = dev});
  nn::init::trunc_normal_(t, mean, std, a, b);
  EXPECT_GE(amin(t, {0}).item(), a);
  EXPECT_LE(amax(t, {0}).item(), b);
  // The truncated normal's mean: mean + std (phi(alpha) - phi(beta)) / (Phi(beta) - Phi(alpha)).
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto Phi = [](double x) { return (1 + std::erf(x / std::sqrt(2.0))) / 2; };
  const double alpha = (a - mean) / std, beta = (b - mean) / std;
  const double want = mean + std * (phi(alpha) - phi(beta)) / (Phi(beta) - Phi(alpha));
  EXPECT_NEAR(rumus::mean(t).item(), want, 0.02);
}

TEST(Init, TruncNormalRefusesBadBounds) {
  Tensor t = empty({4});
  expect_error<ValueError>([&] { nn::init::trunc_normal_(t, 0, 1, 1, 0); },
                           "trunc_normal_: expected a < b, got a = 1, b = 0");
  expect_error<ValueError>([&] { nn::init::trunc_normal_(t, 0, 0); }, "trunc_normal_: expected std > 0, got 0");
}

TEST(ActivationModules, PReLUWeightPrintoutsAndFunctionalForms) {
  nn::PReLU prelu(3);
  ASSERT_EQ(prelu.named_parameters().size(), 1u);
  EXPECT_EQ(prelu.named_parameters()[0].first, "weight");
  EXPECT_EQ(prelu.weight.to_vector<float>(), (std::vector<float>{0.25f, 0.25f, 0.25f}));
  prelu.load_state_dict({{"weight", tensor({0.1, 0.2, 0.3})}});  // PyTorch's key, strict
  Tensor x = tensor({-1.0, -2.0, 3.0, -4.0, 5.0, -6.0}).reshape({1, 3, 2});
  EXPECT_EQ(prelu(x).to_vector<float>(), prelu(x).to_vector<float>());
  EXPECT_EQ(prelu(x).to_vector<float>(), rumus::prelu(x, prelu.weight).to_vector<float>());
  GradientStore g = backward(sum(prelu(x)));
  EXPECT_EQ(g.at(prelu.weight).to_vector<float>(), (std::vector<float>{-3, -4, -6}));  // the negative inputs
  expect_error<ValueError>([] { nn::PReLU(0); }, "PReLU: expected num_parameters >= 1, got 0");

  nn::Sequential seq(nn::ELU(0.5), nn::Softplus(2, 10), nn::Hardtanh(-2, 2), nn::PReLU(), nn::GLU(1),
                     nn::Threshold(0.1, 20), nn::Hardshrink(), nn::Softmax(1), nn::LogSoftmax(-1), nn::Softmin(0),
                     nn::ReLU6(), nn::Mish());
  EXPECT_EQ(seq.pretty_print(),
            "Sequential(\n"
            "  (0): ELU(alpha=0.5)\n"
            "  (1): Softplus(beta=2, threshold=10)\n"
            "  (2): Hardtanh(min_val=-2, max_val=2)\n"
            "  (3): PReLU(num_parameters=1)\n"
            "  (4): GLU(dim=1)\n"
            "  (5): Threshold(threshold=0.1, value=20)\n"
            "  (6): Hardshrink(0.5)\n"
            "  (7): Softmax(dim=1)\n"
            "  (8): LogSoftmax(dim=-1)\n"
            "  (9): Softmin(dim=0)\n"
            "  (10): ReLU6()\n"
            "  (11): Mish()\n"
            ")");
  EXPECT_EQ(seq.state_dict().count("3.weight"), 1u);
  Tensor y = tensor({-1.5, -0.2, 0.3, 2.5});
  EXPECT_EQ(nn::ELU(0.5)(y).to_vector<float>(), elu(y, 0.5).to_vector<float>());
  EXPECT_EQ(nn::SELU()(y).to_vector<float>(), selu(y).to_vector<float>());
  EXPECT_EQ(nn::CELU(2.0)(y).to_vector<float>(), celu(y, 2.0).to_vector<float>());
  EXPECT_EQ(nn::Softsign()(y).to_vector<float>(), softsign(y).to_vector<float>());
  EXPECT_EQ(nn::Hardsigmoid()(y).to_vector<float>(), hardsigmoid(y).to_vector<float>());
  EXPECT_EQ(nn::LogSigmoid()(y).to_vector<float>(), logsigmoid(y).to_vector<float>());
  EXPECT_EQ(nn::Tanhshrink()(y).to_vector<float>(), tanhshrink(y).to_vector<float>());
  EXPECT_EQ(nn::Softshrink(0.4)(y).to_vector<float>(), softshrink(y, 0.4).to_vector<float>());
  EXPECT_EQ(nn::Softmin(0)(y).to_vector<float>(), softmax(neg(y), 0).to_vector<float>());
}

TEST(LossModules, OptionsBuffersAndCalls) {
  Tensor logits = tensor({{0.3, -1.0, 2.0}, {1.5, 0.2, -0.4}});
  Tensor target = tensor(std::vector<std::int64_t>{2, 0});
  Tensor w = tensor({0.5, 3.0, 2.0});
  nn::CrossEntropyLoss ce({.label_smoothing = 0.1, .weight = w});
  // Class weights are buffers under PyTorch's key; none when not given.
  EXPECT_EQ(ce.state_dict().count("weight"), 1u);
  EXPECT_TRUE(nn::CrossEntropyLoss().state_dict().empty());
  EXPECT_EQ(ce(logits, target).item(), cross_entropy(logits, target, {.label_smoothing = 0.1, .weight = w}).item());
  ce.to(DType::f64);
  EXPECT_EQ(ce.options.weight.dtype(), DType::f64);
  nn::NLLLoss nll({.weight = w, .ignore_index = 0});
  EXPECT_EQ(nll(log_softmax(logits, 1), target).item(),
            nll_loss(log_softmax(logits, 1), target, {.weight = w, .ignore_index = 0}).item());
  nn::BCEWithLogitsLoss bce({.pos_weight = tensor({2.0, 1.0, 0.5})});
  EXPECT_EQ(bce.state_dict().count("pos_weight"), 1u);
  EXPECT_EQ(bce.state_dict().count("weight"), 0u);
  Tensor probs = full({2, 3}, 0.25);
  EXPECT_EQ(bce(logits, probs).item(),
            binary_cross_entropy_with_logits(logits, probs, {.pos_weight = tensor({2.0, 1.0, 0.5})}).item());
  nn::BCELoss bce_p(w, "sum");
  EXPECT_EQ(bce_p.state_dict().count("weight"), 1u);
  EXPECT_EQ(bce_p(sigmoid(logits), probs).item(), binary_cross_entropy(sigmoid(logits), probs, w, "sum").item());

  Tensor a = tensor({0.5, -1.0, 2.0}), b = tensor({1.0, 1.0, -1.0}), c = tensor({0.0, 2.0, 1.0});
  EXPECT_EQ(nn::L1Loss("sum")(a, b).item(), l1_loss(a, b, "sum").item());
  EXPECT_EQ(nn::MSELoss()(a, b).item(), mse_loss(a, b).item());
  EXPECT_EQ(nn::SmoothL1Loss("mean", 0.5)(a, b).item(), smooth_l1_loss(a, b, "mean", 0.5).item());
  EXPECT_EQ(nn::HuberLoss("sum", 2.0)(a, b).item(), huber_loss(a, b, "sum", 2.0).item());
  EXPECT_EQ(nn::KLDivLoss("batchmean", true)(a, b).item(), kl_div(a, b, "batchmean", true).item());
  EXPECT_EQ(nn::PoissonNLLLoss({.log_input = false})(c + 1.0, c).item(),
            poisson_nll_loss(c + 1.0, c, {.log_input = false}).item());
  EXPECT_EQ(nn::SoftMarginLoss()(a, b).item(), soft_margin_loss(a, b).item());
  EXPECT_EQ(nn::HingeEmbeddingLoss(0.5)(a, b).item(), hinge_embedding_loss(a, b, 0.5).item());
  EXPECT_EQ(nn::MarginRankingLoss(0.2)(a, c, b).item(), margin_ranking_loss(a, c, b, 0.2).item());
  EXPECT_EQ(nn::CosineEmbeddingLoss(0.1)(a, c, tensor({-1.0}).reshape({})).item(),
            cosine_embedding_loss(a, c, tensor({-1.0}).reshape({}), 0.1).item());
  EXPECT_EQ(nn::TripletMarginLoss({.margin = 3.0, .swap = true})(a, b, c).item(),
            triplet_margin_loss(a, b, c, {.margin = 3.0, .swap = true}).item());
  nn::MultiMarginLoss mm({.p = 2, .weight = w});
  EXPECT_EQ(mm.state_dict().count("weight"), 1u);
  EXPECT_EQ(mm(logits, target).item(), multi_margin_loss(logits, target, {.p = 2, .weight = w}).item());
  EXPECT_EQ(nn::CrossEntropyLoss().pretty_print(), "CrossEntropyLoss()");
}

// ---- nn::DeferredInit ----

namespace {
std::vector<float> floats(const Tensor& t) { return t.detach().contiguous().to_vector<float>(); }

std::shared_ptr<nn::Sequential> deferrable_model() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(6, 5));
  m->push_back(std::make_shared<nn::Conv2d>(3, 4, Size2{3, 3}));
  m->push_back(std::make_shared<nn::LayerNorm>(Shape{5}));
  m->push_back(std::make_shared<nn::BatchNorm2d>(4));
  m->push_back(std::make_shared<nn::Embedding>(7, 3));
  m->push_back(std::make_shared<nn::Embedding>(5, 2, 1));  // padding row: materialised at once
  m->push_back(std::make_shared<nn::LSTM>(4, 3));
  return m;
}
}  // namespace

// Built under a DeferredInit, a model holds no bytes for the parameters its
// modules make with empty() (the embedding with a padding row takes them at
// once; the norms' ones() and zeros() are made as usual), leaves the default generator where an eager
// build leaves it, gives any rows of a parameter alone, and materialises to
// the eager build's values bit for bit. Writing a deferred parameter another
// way raises an Error that says why.
TEST(DeferredInit, MaterialisesTheEagerBuildsValues) {
  manual_seed(5);
  auto eager = deferrable_model();
  const std::vector<float> next_eager = floats(randn({4}));
  manual_seed(5);
  std::shared_ptr<nn::Sequential> deferred;
  {
    nn::DeferredInit scope;
    EXPECT_TRUE(nn::DeferredInit::active());
    deferred = deferrable_model();
  }
  EXPECT_FALSE(nn::DeferredInit::active());
  EXPECT_EQ(floats(randn({4})), next_eager) << "the generator advanced as an eager build advances it";
  const auto want = eager->named_parameters(), got = deferred->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, p] : got) {
    // The norms make their parameters with ones() and zeros(): those keep their values.
    const bool made_with_values = name.rfind("2.", 0) == 0 || name.rfind("3.", 0) == 0 || name.rfind("5.", 0) == 0;
    EXPECT_EQ(nn::is_deferred(p), !made_with_values) << name;
    EXPECT_EQ(p.storage().released(), !made_with_values) << name;
  }
  EXPECT_FALSE(nn::is_deferred(deferred->named_buffers()[0].second)) << "buffers are built as usual";
  // Rows of the Linear's weight and of the LSTM's first weight, alone.
  EXPECT_EQ(floats(nn::deferred_rows(got[0].second, 1, 4)), floats(want[0].second.narrow(0, 1, 3)));
  const std::size_t lstm = got.size() - 4;
  EXPECT_EQ(floats(nn::deferred_rows(got[lstm].second, 5, 12)), floats(want[lstm].second.narrow(0, 5, 7)));
  EXPECT_TRUE(nn::is_deferred(got[0].second)) << "rows leave the parameter deferred";
  expect_error<Error>([&] { got[0].second.detach().mul_(2.0); }, "built under nn::DeferredInit and not materialised");
  expect_error<ShapeError>([&] { nn::deferred_rows(got[0].second, 2, 6); },
                           "deferred_rows: expected 0 <= begin <= end <= 5, got [2, 6)");
  expect_error<Error>([&] { nn::deferred_rows(want[0].second, 0, 1); },
                      "deferred_rows: the tensor is not a deferred parameter");
  nn::materialize(*deferred);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_FALSE(nn::is_deferred(got[i].second)) << got[i].first;
    EXPECT_EQ(floats(got[i].second), floats(want[i].second)) << got[i].first;
  }
}

// A part of a deferred parameter filled by an init (here orthogonal_ and
// constant_ on rows) materialises the whole parameter first, so the rest keeps
// its recorded values; loading a state dict fills deferred parameters too.
TEST(DeferredInit, PartialInitsAndLoadingMaterialise) {
  manual_seed(8);
  nn::Linear eager(4, 6);
  Tensor eager_rows = eager.weight.narrow(0, 0, 2).detach();
  nn::init::constant_(eager_rows, 0.5);
  manual_seed(8);
  std::optional<nn::Linear> deferred;
  {
    nn::DeferredInit scope;
    deferred.emplace(4, 6);
    Tensor rows = Tensor(deferred->weight).narrow(0, 0, 2).detach();
    nn::init::constant_(rows, 0.5);
    EXPECT_FALSE(nn::is_deferred(deferred->weight));
    EXPECT_TRUE(nn::is_deferred(deferred->bias));
    Tensor bias_row = deferred->bias.detach().unsqueeze(0);
    nn::init::orthogonal_(bias_row);
  }
  EXPECT_EQ(floats(deferred->weight), floats(eager.weight));
  EXPECT_FALSE(nn::is_deferred(deferred->bias));
  std::optional<nn::Linear> loaded;
  {
    nn::DeferredInit scope;
    loaded.emplace(4, 6);
  }
  loaded->load_state_dict(eager.state_dict());
  EXPECT_FALSE(nn::is_deferred(loaded->weight));
  EXPECT_EQ(floats(loaded->weight), floats(eager.weight));
  EXPECT_EQ(floats(loaded->bias), floats(eager.bias));
}
