// Agreement with PyTorch: the cases written by torch_reference/make_reference.py,
// rebuilt here by name and compared in f32 (rtol 1e-4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include <rumus/rumus.hpp>

#include "devices.hpp"

using namespace rumus;

namespace {

struct Case {
  std::map<std::string, Tensor> tensors;  // floats as f32, integers as i64
  std::vector<Tensor> inputs;             // in0, in1, ...
};

// A case file: per tensor, a line "name kind ndim dims..." (kind f or i), then its values.
struct Entry {
  std::string key, kind;
  Shape shape;
  std::vector<double> values;
};
std::vector<Entry> read_case(const std::string& name) {
  std::ifstream in(std::string(RUMUS_TORCH_REFERENCE_DIR) + "/" + name + ".txt");
  if (!in) throw std::runtime_error("missing reference file for " + name);
  std::vector<Entry> entries;
  std::string header, values;
  while (std::getline(in, header) && std::getline(in, values)) {
    std::istringstream h(header), v(values);
    Entry e;
    int nd = 0;
    h >> e.key >> e.kind >> nd;
    e.shape.assign(std::size_t(nd), 0);
    for (auto& d : e.shape) h >> d;
    e.values.resize(std::size_t(numel_of(e.shape)));
    // Token by token through strtod, which reads "nan" and "inf" (operator>> does not).
    for (auto& x : e.values) {
      std::string token;
      v >> token;
      x = std::strtod(token.c_str(), nullptr);
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

Case load(const std::string& name) {
  Case c;
  for (const Entry& e : read_case(name)) {
    Tensor t = tensor(e.values, e.shape);
    c.tensors[e.key] = e.kind == "f" ? t.to(DType::f32) : t.to(DType::i64);
  }
  for (int i = 0; c.tensors.count("in" + std::to_string(i)); ++i) c.inputs.push_back(c.tensors["in" + std::to_string(i)]);
  return c;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to_vector<float>(), w = want.to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << what << " element " << i;
  }
}

using V = const std::vector<Tensor>&;
using Fn = std::function<Tensor(V)>;

// The same ops and arguments as make_reference.py, by case name.
const std::map<std::string, Fn>& ops() {
  static const std::map<std::string, Fn> table = {
      // The math library.
      {"sin", [](V x) { return sin(x[0]); }},
      {"cos", [](V x) { return cos(x[0]); }},
      {"tan", [](V x) { return tan(x[0]); }},
      {"asin", [](V x) { return asin(x[0]); }},
      {"acos", [](V x) { return acos(x[0]); }},
      {"atan", [](V x) { return atan(x[0]); }},
      {"sinh", [](V x) { return sinh(x[0]); }},
      {"cosh", [](V x) { return cosh(x[0]); }},
      {"asinh", [](V x) { return asinh(x[0]); }},
      {"acosh", [](V x) { return acosh(x[0]); }},
      {"atanh", [](V x) { return atanh(x[0]); }},
      {"erf", [](V x) { return erf(x[0]); }},
      {"erfc", [](V x) { return erfc(x[0]); }},
      {"erfinv", [](V x) { return erfinv(x[0]); }},
      {"log1p", [](V x) { return log1p(x[0]); }},
      {"expm1", [](V x) { return expm1(x[0]); }},
      {"log2", [](V x) { return log2(x[0]); }},
      {"log10", [](V x) { return log10(x[0]); }},
      {"exp2", [](V x) { return exp2(x[0]); }},
      {"reciprocal", [](V x) { return reciprocal(x[0]); }},
      {"rsqrt", [](V x) { return rsqrt(x[0]); }},
      {"sign", [](V x) { return sign(x[0]); }},
      {"frac", [](V x) { return frac(x[0]); }},
      {"logit", [](V x) { return logit(x[0]); }},
      {"logit_eps", [](V x) { return logit(x[0], 0.2); }},
      {"var_dim_correction0", [](V x) { return var(x[0], {1}, 0); }},
      {"std_dims_keepdim", [](V x) { return rumus::std(x[0], {0, -1}, 1, true); }},
      {"var_mean", [](V x) { auto [v, m] = var_mean(x[0], {0}); return stack({v, m}); }},
      {"std_mean", [](V x) { auto [s, m] = std_mean(x[0], {1}, 2); return stack({s, m}); }},
      {"norm_2", [](V x) { return norm(x[0]); }},
      {"norm_1_dim", [](V x) { return norm(x[0], 1, {1}); }},
      {"norm_inf_dim_keepdim", [](V x) { return norm(x[0], std::numeric_limits<double>::infinity(), {0}, true); }},
      {"norm_3", [](V x) { return norm(x[0], 3, {0, 2}); }},
      {"norm_fro", [](V x) { return norm(x[0], "fro", {0, 1}); }},
      {"logsumexp", [](V x) { return logsumexp(x[0], {1}); }},
      {"logsumexp_dims_keepdim", [](V x) { return logsumexp(x[0], {0, 2}, true); }},
      {"prod_dim_zeros", [](V x) { return prod(x[0], 1); }},
      {"prod_all", [](V x) { return prod(x[0]); }},
      {"nansum_nanmean", [](V x) { return nansum(x[0], {1}) + nanmean(x[0], {1}); }},
      {"atan2", [](V x) { return atan2(x[0], x[1]); }},
      {"fmod", [](V x) { return fmod(x[0], x[1]); }},
      {"remainder", [](V x) { return remainder(x[0], x[1]); }},
      {"lerp", [](V x) { return lerp(x[0], x[1], x[2]); }},
      {"lerp_scalar", [](V x) { return lerp(x[0], x[1], 0.7); }},
      {"clamp_tensor", [](V x) { return clamp(x[0], x[1], x[2]); }},
      {"hypot", [](V x) { return hypot(x[0], x[1]); }},
      {"xlogy", [](V x) { return xlogy(x[0], x[1]); }},
      {"copysign", [](V x) { return copysign(x[0], x[1]); }},
      {"conv2d", [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d_strided_grouped",
       [](V x) {
         return conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2});
       }},
      {"im2col", [](V x) { return im2col(x[0], {2, 3}, {.stride = {1, 2}, .padding = {1, 0}}); }},
      {"col2im", [](V x) { return col2im(x[0], {4, 5}, {2, 2}, {.padding = {1, 1}, .dilation = {1, 2}}); }},
      {"linear", [](V x) { return linear(x[0], x[1], x[2]); }},
      {"conv1d", [](V x) { return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .dilation = 2, .groups = 2}); }},
      {"add_channel_bias", [](V x) { return add_channel_bias(x[0], x[1]); }},
      {"max_pool2d", [](V x) { return max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); }},
      {"max_pool2d_dilated_ceil",
       [](V x) {
         return max_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 1},
                                  .ceil_mode = true});
       }},
      {"avg_pool2d", [](V x) { return avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); }},
      {"avg_pool2d_exclude_pad_ceil",
       [](V x) {
         return avg_pool2d(x[0], {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false,
                                  .ceil_mode = true});
       }},
      {"adaptive_avg_pool2d", [](V x) { return adaptive_avg_pool2d(x[0], {3, 4}); }},
      {"max_pool1d",
       [](V x) { return max_pool1d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true}); }},
      {"avg_pool1d_exclude_pad",
       [](V x) { return avg_pool1d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false}); }},
      {"adaptive_avg_pool1d", [](V x) { return adaptive_avg_pool1d(x[0], 3); }},
      {"batch_norm1d_train", [](V x) { return batch_norm1d(x[0], zeros({3}), ones({3}), x[1], x[2], true, 0.1, 1e-5); }},
      {"group_norm", [](V x) { return group_norm(x[0], 3, x[1], x[2]); }},
      {"conv_transpose2d",
       [](V x) {
         return conv_transpose2d(x[0], x[1], x[2],
                                 {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2,
                                  .dilation = {1, 2}});
       }},
      {"conv_transpose2d_output_padding_dilated",
       [](V x) { return conv_transpose2d(x[0], x[1], {}, {.padding = {1, 0}, .output_padding = 1, .dilation = 2}); }},
      {"conv_transpose1d",
       [](V x) {
         return conv_transpose1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
       }},
      {"pad_constant", [](V x) { return pad(x[0], {1, 2, -1, 1}, "constant", 0.5); }},
      {"pad_reflect", [](V x) { return pad(x[0], {3, 2, 2, 1}, "reflect"); }},
      {"pad_replicate", [](V x) { return pad(x[0], {2, 1, 0, 3}, "replicate"); }},
      {"pad_circular", [](V x) { return pad(x[0], {4, 1}, "circular"); }},
      {"conv1d_same_even_kernel", [](V x) { return conv1d(x[0], x[1], {}, {.padding_str = "same"}); }},
      {"instance_norm_running",
       [](V x) {
         return instance_norm(x[0], x[3].detach().clone(), x[4].detach().clone(), x[1], x[2], true, 0.2, 1e-5);
       }},
      {"instance_norm_eval",
       [](V x) { return instance_norm(x[0], x[3].detach(), x[4].detach(), x[1], x[2], false, 0.1, 1e-3); }},
      {"interpolate_nearest", [](V x) { return interpolate(x[0], {.scale_factor = {2.0, 1.5}}); }},
      {"interpolate_nearest_1d_scale", [](V x) { return interpolate(x[0], {.scale_factor = {1.5}}); }},
      {"interpolate_bilinear", [](V x) { return interpolate(x[0], {.size = {5, 7}, .mode = "bilinear"}); }},
      {"interpolate_bilinear_align_corners",
       [](V x) { return interpolate(x[0], {.scale_factor = {1.5}, .mode = "bilinear", .align_corners = true}); }},
      {"interpolate_bilinear_scale",
       [](V x) { return interpolate(x[0], {.scale_factor = {1.5, 2.5}, .mode = "bilinear"}); }},
      {"interpolate_linear_scale", [](V x) { return interpolate(x[0], {.scale_factor = {1.7}, .mode = "linear"}); }},
      {"pixel_shuffle", [](V x) { return pixel_shuffle(x[0], 2); }},
      {"pixel_unshuffle", [](V x) { return pixel_unshuffle(x[0], 2); }},
      {"adaptive_max_pool2d", [](V x) { return adaptive_max_pool2d(x[0], {3, 4}); }},
      {"adaptive_max_pool1d", [](V x) { return adaptive_max_pool1d(x[0], 3); }},
      {"max_pool2d_with_indices",
       [](V x) {
         return std::get<0>(max_pool2d_with_indices(x[0], {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}));
       }},
      {"max_unpool2d",
       [](V x) {
         auto [v, i] = max_pool2d_with_indices(x[0], {.kernel = 2});
         return max_unpool2d(v, i, {.kernel = 2}, Size2{5, 7});
       }},
      {"batch_norm2d_eval",
       [](V x) { return batch_norm2d(x[0], x[3].detach(), x[4].detach(), x[1], x[2], false, 0.1, 1e-3); }},
      {"layer_norm", [](V x) { return layer_norm(x[0], {4, 5}, x[1], x[2]); }},
      {"layer_norm_no_affine", [](V x) { return layer_norm(x[0], {7}); }},
      {"softmax", [](V x) { return softmax(x[0], 1); }},
      {"log_softmax", [](V x) { return log_softmax(x[0], -1); }},
      {"cross_entropy", [](V x) { return cross_entropy(x[0], x[1]); }},
      {"cross_entropy_sum_ignore",
       [](V x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::sum, .ignore_index = 3}); }},
      {"cross_entropy_none_smoothing",
       [](V x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::none, .label_smoothing = 0.15}); }},
      {"cross_entropy_spatial_smoothing", [](V x) { return cross_entropy(x[0], x[1], {.label_smoothing = 0.1}); }},
      {"nll_loss", [](V x) { return nll_loss(x[0], x[1], Reduction::mean, 2); }},
      {"mse_loss_mean", [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss_sum", [](V x) { return mse_loss(x[0], x[1], Reduction::sum); }},
      {"mse_loss_none", [](V x) { return mse_loss(x[0], x[1], Reduction::none); }},
      {"bce_with_logits", [](V x) { return binary_cross_entropy_with_logits(x[0], x[1]); }},
      {"bce_with_logits_none", [](V x) { return binary_cross_entropy_with_logits(x[0], x[1], Reduction::none); }},
      {"embedding_padding_idx", [](V x) { return embedding(x[0], x[1], 4); }},
      {"sigmoid", [](V x) { return sigmoid(x[0]); }},
      {"tanh", [](V x) { return tanh(x[0]); }},
      {"gelu", [](V x) { return gelu(x[0]); }},
      {"gelu_tanh", [](V x) { return gelu(x[0], "tanh"); }},
      {"leaky_relu", [](V x) { return leaky_relu(x[0], 0.2); }},
      {"silu", [](V x) { return silu(x[0]); }},
      // Composed activations and the losses.
      {"elu", [](V x) { return elu(x[0], 0.7); }},
      {"selu", [](V x) { return selu(x[0]); }},
      {"celu", [](V x) { return celu(x[0], 0.5); }},
      {"softplus", [](V x) { return softplus(x[0], 2.0, 3.0); }},
      {"softsign", [](V x) { return softsign(x[0]); }},
      {"mish", [](V x) { return mish(x[0]); }},
      {"hardtanh", [](V x) { return hardtanh(x[0], -0.5, 1.0); }},
      {"relu6", [](V x) { return relu6(x[0]); }},
      {"hardsigmoid", [](V x) { return hardsigmoid(x[0]); }},
      {"prelu", [](V x) { return prelu(x[0], x[1]); }},
      {"glu", [](V x) { return glu(x[0], 1); }},
      {"logsigmoid", [](V x) { return logsigmoid(x[0]); }},
      {"softmin", [](V x) { return softmin(x[0], 1); }},
      {"tanhshrink", [](V x) { return tanhshrink(x[0]); }},
      {"threshold", [](V x) { return threshold(x[0], 0.1, 20.0); }},
      {"hardshrink", [](V x) { return hardshrink(x[0], 0.3); }},
      {"softshrink", [](V x) { return softshrink(x[0], 0.3); }},
      {"l1_loss", [](V x) { return l1_loss(x[0], x[1]); }},
      {"smooth_l1_loss", [](V x) { return smooth_l1_loss(x[0], x[1], "none", 0.5); }},
      {"huber_loss", [](V x) { return huber_loss(x[0], x[1], "mean", 0.6); }},
      {"binary_cross_entropy", [](V x) { return binary_cross_entropy(x[0], x[1], x[2].detach()); }},
      {"bce_with_logits_weight_pos_weight",
       [](V x) {
         return binary_cross_entropy_with_logits(
             x[0], x[1], {.weight = x[2].detach(), .pos_weight = x[3].detach(), .reduction = "sum"});
       }},
      {"cross_entropy_weight_smoothing",
       [](V x) { return cross_entropy(x[0], x[1], {.label_smoothing = 0.2, .weight = x[2].detach()}); }},
      {"nll_loss_weight", [](V x) { return nll_loss(x[0], x[1], {.weight = x[2].detach()}); }},
      {"kl_div_batchmean", [](V x) { return kl_div(x[0], x[1], "batchmean"); }},
      {"kl_div_log_target", [](V x) { return kl_div(x[0], x[1], "none", true); }},
      {"poisson_nll_loss", [](V x) { return poisson_nll_loss(x[0], x[1]); }},
      {"poisson_nll_loss_full",
       [](V x) { return poisson_nll_loss(x[0], x[1], {.log_input = false, .full = true, .reduction = "sum"}); }},
      {"margin_ranking_loss", [](V x) { return margin_ranking_loss(x[0], x[1], x[2].detach(), 0.1); }},
      {"cosine_embedding_loss", [](V x) { return cosine_embedding_loss(x[0], x[1], x[2].detach(), -0.2, "none"); }},
      {"triplet_margin_loss", [](V x) { return triplet_margin_loss(x[0], x[1], x[2]); }},
      {"triplet_margin_loss_p1_swap",
       [](V x) {
         return triplet_margin_loss(x[0], x[1], x[2], {.margin = 0.5, .p = 1.0, .swap = true, .reduction = "none"});
       }},
      {"soft_margin_loss", [](V x) { return soft_margin_loss(x[0], x[1].detach()); }},
      {"hinge_embedding_loss", [](V x) { return hinge_embedding_loss(x[0], x[1].detach(), 0.5); }},
      {"multi_margin_loss",
       [](V x) {
         return multi_margin_loss(x[0], x[1], {.p = 2, .margin = 0.8, .weight = x[2].detach(), .reduction = "none"});
       }},
      {"multi_margin_loss_p1", [](V x) { return multi_margin_loss(x[0], x[1]); }},
      {"cat", [](V x) { return cat({x[0], x[1], x[2]}, 1); }},
      {"stack", [](V x) { return stack({x[0], x[1]}, 2); }},
      {"gather", [](V x) { return gather(x[0], 1, x[1]); }},
      {"gather_dim0", [](V x) { return gather(x[0], 0, x[1]); }},
      {"scatter_add", [](V x) { return scatter_add(x[0], 1, x[1], x[2]); }},
      // Indexing, reordering, scans and sorts (sorts: values and indices side by side).
      {"index_select", [](V x) { return index_select(x[0], 0, x[1]); }},
      {"scatter_src", [](V x) { return scatter(x[0], 1, x[1], x[2]); }},
      {"scatter_value", [](V x) { return scatter(x[0], 0, x[1], -0.5); }},
      {"index_add", [](V x) { return index_add(x[0], 0, x[1], x[2], 2.0); }},
      {"masked_select", [](V x) { return masked_select(x[0], x[1].to(DType::u8)); }},
      {"index_copy", [](V x) { return index_copy(x[0], 1, x[1], x[2]); }},
      {"index_fill", [](V x) { return index_fill(x[0], 0, x[1], -1.5); }},
      {"take_along_dim", [](V x) { return take_along_dim(x[0], x[1], 1); }},
      {"flip", [](V x) { return flip(x[0], {0, -1}); }},
      {"roll", [](V x) { return roll(x[0], {1, -3}, {0, 1}); }},
      {"roll_flat", [](V x) { return roll(x[0], {5}); }},
      {"repeat", [](V x) { return repeat(x[0], {2, 1, 2}); }},
      {"tile", [](V x) { return tile(x[0], {2}); }},
      {"repeat_interleave", [](V x) { return repeat_interleave(x[0], 2, 1); }},
      {"repeat_interleave_tensor", [](V x) { return repeat_interleave(x[0], x[1], 0); }},
      {"movedim", [](V x) { return movedim(x[0], {0, 1}, {2, 0}); }},
      {"diagonal", [](V x) { return diagonal(x[0], 1); }},
      {"diagonal_3d", [](V x) { return diagonal(x[0], -1, 2, 0); }},
      {"tril", [](V x) { return tril(x[0], -1); }},
      {"triu", [](V x) { return triu(x[0], 1); }},
      {"as_strided", [](V x) { return as_strided(x[0], {2, 3}, {1, 3}, 1); }},
      {"cumsum", [](V x) { return cumsum(x[0], 1); }},
      {"cumprod", [](V x) { return cumprod(x[0], 1); }},
      {"cumprod_zeros", [](V x) { return cumprod(x[0], 1); }},
      {"sort_ties_nan", [](V x) { return cat({std::get<0>(sort(x[0], 1)), argsort(x[0], 1).to(DType::f32)}, 1); }},
      {"sort_ties_nan_descending",
       [](V x) { return cat({std::get<0>(sort(x[0], true, 1, true)), argsort(x[0], true, 1, true).to(DType::f32)}, 1); }},
      {"sort_dim0", [](V x) { return cat({std::get<0>(sort(x[0], 0)), std::get<1>(sort(x[0], 0)).to(DType::f32)}, 0); }},
      {"topk", [](V x) { return cat({std::get<0>(topk(x[0], 3)), std::get<1>(topk(x[0], 3)).to(DType::f32)}, 1); }},
      {"topk_smallest",
       [](V x) { return cat({std::get<0>(topk(x[0], 2, 0, false)), std::get<1>(topk(x[0], 2, 0, false)).to(DType::f32)}, 0); }},
      {"topk_nan", [](V x) { return cat({std::get<0>(topk(x[0], 2)), std::get<1>(topk(x[0], 2)).to(DType::f32)}, 1); }},
      {"kthvalue",
       [](V x) { return cat({std::get<0>(kthvalue(x[0], 2, 1, true)), std::get<1>(kthvalue(x[0], 2, 1, true)).to(DType::f32)}, 1); }},
      {"median",
       [](V x) { return cat({std::get<0>(median(x[0], 1, true)), std::get<1>(median(x[0], 1, true)).to(DType::f32)}, 1); }},
      {"median_all", [](V x) { return median(x[0]); }},
      {"cummax_ties_nan", [](V x) { return cat({std::get<0>(cummax(x[0], 1)), std::get<1>(cummax(x[0], 1)).to(DType::f32)}, 1); }},
      {"cummin_ties_nan", [](V x) { return cat({std::get<0>(cummin(x[0], 1)), std::get<1>(cummin(x[0], 1)).to(DType::f32)}, 1); }},
      {"rounding", [](V x) { return floor(x[0]) + ceil(x[0]) * 2.0 + trunc(x[0]) * 3.0 + round(x[0]) * 4.0 + x[0]; }},
      {"views",
       [](V x) {
         return x[0].permute({2, 0, 1}).slice(0, 1, 5, 2).narrow(2, 1, 2).select(1, 2).flatten().reshape({2, 2}).t() *
                1.0;
       }},
      {"cast_f16", [](V x) { return mul(x[0].to(DType::f16), 2.0).to(DType::f32); }},
      {"cast_bf16", [](V x) { return mul(x[0].to(DType::bf16), 2.0).to(DType::f32); }},
  };
  return table;
}

// Runs `fn` on the case's inputs (floating ones as leaves requiring grad) and
// compares the output and the gradients of sum(out * gout).
void check_case(const std::string& name, const Fn& fn) {
  Case c = load(name);
  std::vector<Tensor> leaves;
  for (const Tensor& t : c.inputs) {
    Tensor leaf = t.clone();
    if (is_floating(leaf.dtype())) leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  Tensor out = fn(leaves);
  expect_close(out, c.tensors.at("out"), name + ": output");
  GradientStore grads = backward(sum(mul(out, c.tensors.at("gout"))));
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    auto it = c.tensors.find("grad" + std::to_string(i));
    if (it == c.tensors.end()) continue;
    Tensor g = grads.get(leaves[i]);
    expect_close(g.defined() ? g : zeros_like(leaves[i]), it->second, name + ": gradient of input " + std::to_string(i));
  }
}

class TorchReference : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchReference, Matches) { check_case(GetParam(), ops().at(GetParam())); }

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : ops()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cases, TorchReference, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

// Training-mode batch norm also updates the running statistics in place.
TEST(TorchReferenceExtra, BatchNormTrainAndRunningStats) {
  Tensor rm, rv;
  check_case("batch_norm2d_train", [&](V x) {
    rm = x[3].detach().clone();
    rv = x[4].detach().clone();
    return batch_norm2d(x[0], rm, rv, x[1], x[2], true, 0.2, 1e-5);
  });
  Case c = load("batch_norm2d_train");
  expect_close(rm, c.tensors.at("running_mean"), "running_mean");
  expect_close(rv, c.tensors.at("running_var"), "running_var");
}

// Instance norm in training updates the running statistics as PyTorch's
// (each instance's mean and unbiased variance, averaged over the batch).
TEST(TorchReferenceExtra, InstanceNormRunningStats) {
  Tensor rm, rv;
  check_case("instance_norm_running", [&](V x) {
    rm = x[3].detach().clone();
    rv = x[4].detach().clone();
    return instance_norm(x[0], rm, rv, x[1], x[2], true, 0.2, 1e-5);
  });
  Case c = load("instance_norm_running");
  expect_close(rm, c.tensors.at("running_mean"), "running_mean");
  expect_close(rv, c.tensors.at("running_var"), "running_var");
}

// Adaptive max pooling's and max_pool2d's indices are PyTorch's (flat positions in each plane).
TEST(TorchReferenceExtra, MaxPoolIndices) {
  for (const char* name : {"adaptive_max_pool2d", "adaptive_max_pool1d"}) {
    Case c = load(name);
    const Tensor x = c.tensors.at("in0");
    const Tensor got = std::string(name) == "adaptive_max_pool2d" ? std::get<1>(adaptive_max_pool2d_with_indices(x, {3, 4}))
                                                                  : std::get<1>(adaptive_max_pool1d_with_indices(x, 3));
    EXPECT_EQ(got.dtype(), DType::i64);
    EXPECT_EQ(got.to_vector<std::int64_t>(), c.tensors.at("indices").to(DType::i64).to_vector<std::int64_t>()) << name;
  }
  Case c = load("max_pool2d_with_indices");
  const Tensor got =
      std::get<1>(max_pool2d_with_indices(c.tensors.at("in0"), {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}));
  EXPECT_EQ(got.to_vector<std::int64_t>(), c.tensors.at("indices").to(DType::i64).to_vector<std::int64_t>());
}

// ---- Second-order gradients, in f64 against PyTorch's float64 (about 1e-10) ----

// A case's tensors as f64, each value read in full (second-order files write doubles).
std::map<std::string, Tensor> load_f64(const std::string& name) {
  std::map<std::string, Tensor> out;
  for (const Entry& e : read_case(name)) out[e.key] = tensor(e.values, e.shape);
  return out;
}

void expect_close_f64(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto g = got.to(DType::f64).to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-12 + 1e-10 * std::abs(w[i])) << what << " " << i;
}

Tensor tanh_mlp(Tensor x, const std::vector<std::pair<Tensor, Tensor>>& layers) {
  for (std::size_t i = 0; i < layers.size(); ++i) {
    x = linear(x, layers[i].first, layers[i].second);
    if (i + 1 < layers.size()) x = tanh(x);
  }
  return x;
}

const std::vector<const char*> kSecondOrder = {"wgan_gp", "hvp_tanh_mlp", "second_derivative_in_x",
                                               "gp_conv_bn_maxpool", "hvp_layer_norm_gelu",
                                               "hvp_causal_attention"};

// WGAN-GP: the penalty ((|grad_x D(x)| - 1)^2).mean() at mixed points, and its
// gradient with respect to the critic's weights (a gradient of a gradient).
TEST(TorchReferenceSecondOrder, WganGradientPenalty) {
  auto c = load_f64("wgan_gp");
  std::vector<Tensor> w = {c["w1"].requires_grad_(), c["b1"].requires_grad_(), c["w2"].requires_grad_(),
                           c["b2"].requires_grad_()};
  Tensor mixed = add(mul(c["alpha"], c["real"]), mul(sub(1.0, c["alpha"]), c["fake"])).requires_grad_();
  Tensor score = tanh_mlp(mixed, {{w[0], w[1]}, {w[2], w[3]}});
  Tensor g = autograd::grad({sum(score)}, {mixed}, {.create_graph = true})[0];
  Tensor penalty = mean(square(sub(sqrt(sum(square(g), {1})), 1.0)));
  expect_close_f64(penalty, c["penalty"], "penalty");
  // The last bias does not move the gradient in x: it gets none (PyTorch's allow_unused gives None too).
  std::vector<Tensor> gw = autograd::grad({penalty}, w, {.allow_unused = true});
  EXPECT_FALSE(gw[3].defined());
  expect_close_f64(zeros_like(w[3]), c["g_b2"], "g_b2");
  const char* names[] = {"g_w1", "g_b1", "g_w2"};
  for (std::size_t i = 0; i < 3; ++i) expect_close_f64(gw[i], c[names[i]], names[i]);
}

// A Hessian-vector product: the gradient of (grad_theta loss . v).
TEST(TorchReferenceSecondOrder, HessianVectorProductOfATanhMlp) {
  auto c = load_f64("hvp_tanh_mlp");
  std::vector<Tensor> w = {c["w1"].requires_grad_(), c["b1"].requires_grad_(), c["w2"].requires_grad_(),
                           c["b2"].requires_grad_()};
  Tensor loss = mean(square(sub(tanh_mlp(c["x"], {{w[0], w[1]}, {w[2], w[3]}}), c["y"])));
  std::vector<Tensor> g = autograd::grad({loss}, w, {.create_graph = true});
  const char* v_names[] = {"v_w1", "v_b1", "v_w2", "v_b2"};
  Tensor dot = sum(mul(g[0], c[v_names[0]]));
  for (std::size_t i = 1; i < g.size(); ++i) dot = add(dot, sum(mul(g[i], c[v_names[i]])));
  std::vector<Tensor> hv = autograd::grad({dot}, w);
  const char* names[] = {"hv_w1", "hv_b1", "hv_w2", "hv_b2"};
  for (std::size_t i = 0; i < hv.size(); ++i) expect_close_f64(hv[i], c[names[i]], names[i]);
}

// u(x), du/dx and d2u/dx2 of a small tanh network, per sample.
TEST(TorchReferenceSecondOrder, SecondDerivativeInTheInput) {
  auto c = load_f64("second_derivative_in_x");
  Tensor x = c["x"].requires_grad_();
  Tensor u = tanh_mlp(x, {{c["w1"], c["b1"]}, {c["w2"], c["b2"]}, {c["w3"], c["b3"]}});
  Tensor du = autograd::grad({sum(u)}, {x}, {.create_graph = true})[0];
  Tensor d2u = autograd::grad({sum(du)}, {x})[0];
  expect_close_f64(u, c["u"], "u");
  expect_close_f64(du, c["du"], "du");
  expect_close_f64(d2u, c["d2u"], "d2u");
}

// A gradient penalty through conv2d, batch_norm2d (training statistics),
// max_pool2d and tanh, and its gradient in the weights.
TEST(TorchReferenceSecondOrder, GradientPenaltyThroughConvBatchNormMaxPool) {
  auto c = load_f64("gp_conv_bn_maxpool");
  std::vector<Tensor> w = {c["cw"].requires_grad_(), c["bw"].requires_grad_(), c["bb"].requires_grad_(),
                           c["lw"].requires_grad_()};
  Tensor x = c["x"].requires_grad_();
  Tensor h = batch_norm2d(conv2d(x, w[0]), Tensor(), Tensor(), w[1], w[2], true);
  Tensor score = linear(tanh(max_pool2d(h, 2)).flatten(1), w[3]);
  Tensor g = autograd::grad({sum(score)}, {x}, {.create_graph = true})[0];
  Tensor penalty = mean(square(sub(sqrt(sum(square(g.flatten(1)), {1})), 1.0)));
  expect_close_f64(penalty, c["penalty"], "penalty");
  std::vector<Tensor> gw = autograd::grad({penalty}, w, {.allow_unused = true});
  const char* names[] = {"g_cw", "g_bw", "g_bb", "g_lw"};
  for (std::size_t i = 0; i < gw.size(); ++i)
    expect_close_f64(gw[i].defined() ? gw[i] : zeros_like(w[i]), c[names[i]], names[i]);
}

// A Hessian-vector product through layer_norm, gelu (exact and tanh) and linear,
// in the input and the weights.
TEST(TorchReferenceSecondOrder, HessianVectorProductThroughLayerNormGelu) {
  auto c = load_f64("hvp_layer_norm_gelu");
  std::vector<Tensor> p = {c["x"].requires_grad_(), c["lnw"].requires_grad_(), c["lnb"].requires_grad_(),
                           c["w"].requires_grad_()};
  Tensor h = gelu(layer_norm(p[0], {5}, p[1], p[2]));
  Tensor loss = sum(square(gelu(linear(h, p[3]), "tanh")));
  std::vector<Tensor> g = autograd::grad({loss}, p, {.create_graph = true});
  const char* v_names[] = {"v_x", "v_lnw", "v_lnb", "v_w"};
  Tensor dot = sum(mul(g[0], c[v_names[0]]));
  for (std::size_t i = 1; i < g.size(); ++i) dot = add(dot, sum(mul(g[i], c[v_names[i]])));
  std::vector<Tensor> hv = autograd::grad({dot}, p);
  const char* names[] = {"hv_x", "hv_lnw", "hv_lnb", "hv_w"};
  for (std::size_t i = 0; i < hv.size(); ++i) expect_close_f64(hv[i], c[names[i]], names[i]);
}

// A Hessian-vector product of causal attention (the fused op, against PyTorch's
// math path) followed by an average pooling.
TEST(TorchReferenceSecondOrder, HessianVectorProductOfCausalAttention) {
  auto c = load_f64("hvp_causal_attention");
  std::vector<Tensor> p = {c["q"].requires_grad_(), c["k"].requires_grad_(), c["v"].requires_grad_()};
  Tensor att = scaled_dot_product_attention(p[0], p[1], p[2], {}, 0.0, true);
  Tensor loss = add(sum(mul(avg_pool2d(att, {.kernel = {2, 1}}), c["r"].slice(2, 0, 2))), sum(square(att)));
  std::vector<Tensor> g = autograd::grad({loss}, p, {.create_graph = true});
  const char* u_names[] = {"u_q", "u_k", "u_v"};
  Tensor dot = sum(mul(g[0], c[u_names[0]]));
  for (std::size_t i = 1; i < g.size(); ++i) dot = add(dot, sum(mul(g[i], c[u_names[i]])));
  std::vector<Tensor> hv = autograd::grad({dot}, p);
  const char* names[] = {"hv_q", "hv_k", "hv_v"};
  for (std::size_t i = 0; i < hv.size(); ++i) expect_close_f64(hv[i], c[names[i]], names[i]);
}

// ---- Recurrent layers and cells (and other modules): a PyTorch state dict loads
// (strict, from safetensors), and outputs, final states and every gradient agree in f64 ----

struct RecurrentCase {
  const char* name;
  std::function<std::unique_ptr<nn::Module>()> make;
  // Runs the module on x and the initial states s (as in the file); returns every output in file order.
  std::function<std::vector<Tensor>(nn::Module&, const Tensor&, const std::vector<Tensor>&)> run;
};

template <class M>
M& as(nn::Module& m) { return dynamic_cast<M&>(m); }

// The reference's PackedRnn: the layer as child "rnn" (so the state dict's
// names match), packed from a padded batch with fixed lengths, unpadded to the input's length.
template <class R>
struct PackedRnn : nn::Module {
  R rnn;
  std::vector<std::int64_t> lengths;
  PackedRnn(nn::RNNOptions o, std::vector<std::int64_t> l) : rnn(o), lengths(std::move(l)) { register_module("rnn", rnn); }
  nn::utils::rnn::PackedSequence pack(const Tensor& x) const {
    return nn::utils::rnn::pack_padded_sequence(x, tensor(lengths), rnn.options().batch_first, false);
  }
  Tensor unpack(const nn::utils::rnn::PackedSequence& out, const Tensor& x) const {
    const bool bf = rnn.options().batch_first;
    return std::get<0>(nn::utils::rnn::pad_packed_sequence(out, bf, 0.0, x.size(bf ? 1 : 0)));
  }
};

const std::vector<RecurrentCase>& recurrent_cases() {
  using S = const std::vector<Tensor>&;
  static const std::vector<RecurrentCase> cases = {
      {"lstm_bidir_2layer",
       [] { return std::make_unique<nn::LSTM>(nn::RNNOptions{.input_size = 3, .hidden_size = 4, .num_layers = 2,
                                                              .batch_first = true, .bidirectional = true}); },
       [](nn::Module& m, const Tensor& x, S s) {
         auto [out, hc] = as<nn::LSTM>(m).forward(x, {s[0], s[1]});
         return std::vector<Tensor>{out, std::get<0>(hc), std::get<1>(hc)};
       }},
      {"lstm_proj",
       [] { return std::make_unique<nn::LSTM>(nn::RNNOptions{.input_size = 3, .hidden_size = 5, .proj_size = 2}); },
       [](nn::Module& m, const Tensor& x, S) {
         auto [out, hc] = as<nn::LSTM>(m).forward(x, {});
         return std::vector<Tensor>{out, std::get<0>(hc), std::get<1>(hc)};
       }},
      {"gru_2layer",
       [] { return std::make_unique<nn::GRU>(nn::RNNOptions{.input_size = 3, .hidden_size = 4, .num_layers = 2}); },
       [](nn::Module& m, const Tensor& x, S s) {
         auto [out, h] = as<nn::GRU>(m).forward(x, s[0]);
         return std::vector<Tensor>{out, h};
       }},
      {"rnn_relu_bidir_no_bias",
       [] {
         return std::make_unique<nn::RNN>(nn::RNNOptions{.input_size = 3, .hidden_size = 4, .nonlinearity = "relu",
                                                         .bias = false, .bidirectional = true});
       },
       [](nn::Module& m, const Tensor& x, S) {
         auto [out, h] = as<nn::RNN>(m).forward(x, Tensor());
         return std::vector<Tensor>{out, h};
       }},
      {"rnn_unbatched", [] { return std::make_unique<nn::RNN>(3, 4); },
       [](nn::Module& m, const Tensor& x, S s) {
         auto [out, h] = as<nn::RNN>(m).forward(x, s[0]);
         return std::vector<Tensor>{out, h};
       }},
      {"lstm_cell", [] { return std::make_unique<nn::LSTMCell>(nn::RNNCellOptions{.input_size = 3, .hidden_size = 4}); },
       [](nn::Module& m, const Tensor& x, S s) {
         auto [h, c] = as<nn::LSTMCell>(m).forward(x, {s[0], s[1]});
         return std::vector<Tensor>{h, c};
       }},
      {"gru_cell", [] { return std::make_unique<nn::GRUCell>(nn::RNNCellOptions{.input_size = 3, .hidden_size = 4}); },
       [](nn::Module& m, const Tensor& x, S s) { return std::vector<Tensor>{as<nn::GRUCell>(m).forward(x, s[0])}; }},
      {"rnn_cell", [] { return std::make_unique<nn::RNNCell>(nn::RNNCellOptions{.input_size = 3, .hidden_size = 4}); },
       [](nn::Module& m, const Tensor& x, S s) { return std::vector<Tensor>{as<nn::RNNCell>(m).forward(x, s[0])}; }},
      // Variable lengths (in no particular order): pack_padded_sequence, the layer, pad_packed_sequence.
      {"lstm_packed_bidir_2layer",
       [] {
         return std::make_unique<PackedRnn<nn::LSTM>>(
             nn::RNNOptions{.input_size = 3, .hidden_size = 4, .num_layers = 2, .batch_first = true, .bidirectional = true},
             std::vector<std::int64_t>{3, 5, 1});
       },
       [](nn::Module& m, const Tensor& x, S s) {
         auto& p = as<PackedRnn<nn::LSTM>>(m);
         auto [out, hc] = p.rnn.forward_with_packed_input(p.pack(x), {s[0], s[1]});
         return std::vector<Tensor>{p.unpack(out, x), std::get<0>(hc), std::get<1>(hc)};
       }},
      {"gru_packed",
       [] {
         return std::make_unique<PackedRnn<nn::GRU>>(nn::RNNOptions{.input_size = 3, .hidden_size = 4},
                                                     std::vector<std::int64_t>{2, 4, 4, 1});
       },
       [](nn::Module& m, const Tensor& x, S s) {
         auto& p = as<PackedRnn<nn::GRU>>(m);
         auto [out, h] = p.rnn.forward_with_packed_input(p.pack(x), s[0]);
         return std::vector<Tensor>{p.unpack(out, x), h};
       }},
      {"rnn_packed_bidir",
       [] {
         return std::make_unique<PackedRnn<nn::RNN>>(nn::RNNOptions{.input_size = 2, .hidden_size = 3, .bidirectional = true},
                                                     std::vector<std::int64_t>{1, 3});
       },
       [](nn::Module& m, const Tensor& x, S) {
         auto& p = as<PackedRnn<nn::RNN>>(m);
         auto [out, h] = p.rnn.forward_with_packed_input(p.pack(x));
         return std::vector<Tensor>{p.unpack(out, x), h};
       }},
      {"conv_transpose2d_module",
       [] {
         return std::make_unique<nn::ConvTranspose2d>(
             4, 6, Size2{3, 2},
             ConvTranspose2dOptions{.stride = 2, .padding = 1, .output_padding = 1, .groups = 2, .dilation = {1, 2}});
       },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
      {"conv_transpose1d_module",
       [] { return std::make_unique<nn::ConvTranspose1d>(3, 2, 3, ConvTranspose1dOptions{.stride = 3}, false); },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
      {"conv2d_same_reflect_module",
       [] {
         return std::make_unique<nn::Conv2d>(
             2, 3, Size2{2, 3}, Conv2dOptions{.dilation = {1, 2}, .padding_str = "same", .padding_mode = "reflect"});
       },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
      {"conv1d_circular_module",
       [] {
         return std::make_unique<nn::Conv1d>(3, 4, 3, Conv1dOptions{.stride = 2, .padding = 2, .padding_mode = "circular"});
       },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
      {"instance_norm1d_module", [] { return std::make_unique<nn::InstanceNorm1d>(3, 1e-5, 0.1, true); },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
      {"prelu_module", [] { return std::make_unique<nn::PReLU>(3); },
       [](nn::Module& m, const Tensor& x, S) { return std::vector<Tensor>{m.forward(x)}; }},
  };
  return cases;
}

// The module in `dt` against PyTorch's f64 values: f64 to 1e-10, f32 (where
// the CPU runs an LSTM's layers on oneDNN's primitive) to a few f32 ulps.
void check_recurrent(const RecurrentCase& rc, DType dt) {
  auto c = load_f64(rc.name);
  auto close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
    if (dt == DType::f64) return expect_close_f64(got, want, what);
    rumus::testing::expect_matches(got.detach().to(DType::f64), want, 2e-5, what);
  };
  auto in = [&](const std::string& key) { return c.at(key).to(dt); };
  std::unique_ptr<nn::Module> m = rc.make();
  m->to(DType::f64);
  m->load_state_dict(io::load_safetensors(std::string(RUMUS_TORCH_REFERENCE_DIR) + "/" + rc.name + ".safetensors"));
  for (const auto& [name, p] : m->named_parameters()) expect_close_f64(p, c.at("p." + name), "p." + name);
  m->to(dt);
  Tensor x = in("x").requires_grad_();
  std::vector<Tensor> states;
  for (int i = 0; c.count("s" + std::to_string(i)); ++i) states.push_back(in("s" + std::to_string(i)).requires_grad_());
  std::vector<Tensor> outs = rc.run(*m, x, states);
  Tensor total;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    close(outs[i], c.at("out" + std::to_string(i)), "out" + std::to_string(i));
    Tensor term = sum(mul(outs[i], in("w" + std::to_string(i))));
    total = total.defined() ? add(total, term) : term;
  }
  std::vector<Tensor> wrt{x};
  wrt.insert(wrt.end(), states.begin(), states.end());
  const auto named = m->named_parameters();
  for (const auto& [name, p] : named) wrt.push_back(p);
  std::vector<Tensor> g = autograd::grad({total}, wrt);
  close(g[0], c.at("grad_x"), "grad_x");
  for (std::size_t i = 0; i < states.size(); ++i)
    close(g[1 + i], c.at("grad_s" + std::to_string(i)), "grad_s" + std::to_string(i));
  for (std::size_t i = 0; i < named.size(); ++i)
    close(g[1 + states.size() + i], c.at("grad." + named[i].first), "grad." + named[i].first);
}

class TorchReferenceRecurrent : public ::testing::TestWithParam<std::size_t> {};

TEST_P(TorchReferenceRecurrent, StateDictOutputsAndGradients) { check_recurrent(recurrent_cases()[GetParam()], DType::f64); }

INSTANTIATE_TEST_SUITE_P(Cases, TorchReferenceRecurrent, ::testing::Range<std::size_t>(0, recurrent_cases().size()),
                         [](const auto& info) { return std::string(recurrent_cases()[info.param].name); });

// The LSTMs over padded batches again in f32: their layers run on oneDNN's
// LSTM primitive on the CPU.
TEST(TorchReferenceRecurrentF32, LstmLayersOnTheSequenceKernels) {
  for (const RecurrentCase& rc : recurrent_cases()) {
    const std::string name = rc.name;
    if (name.rfind("lstm", 0) != 0 || name == "lstm_cell" || name.find("packed") != std::string::npos) continue;
    SCOPED_TRACE(name);
    Profiler prof;
    check_recurrent(rc, DType::f32);
    bool fused = false;
    for (const ProfileRow& r : prof.rows()) fused = fused || r.name.find("lstm_sequence_backward") != std::string::npos;
    EXPECT_TRUE(fused) << prof.table();
  }
}

// Every committed file is exercised by some test.
TEST(TorchReferenceExtra, EveryFileHasACase) {
  for (const auto& entry : std::filesystem::directory_iterator(RUMUS_TORCH_REFERENCE_DIR)) {
    std::string stem = entry.path().stem().string();
    const bool second_order = std::find(kSecondOrder.begin(), kSecondOrder.end(), stem) != kSecondOrder.end();
    bool recurrent = false;
    for (const RecurrentCase& rc : recurrent_cases()) recurrent = recurrent || stem == rc.name;
    // Optimizer trajectories and scheduler curves are compared in test_optim.cpp,
    // module state dicts loaded in test_nn.cpp.
    // The dtype cases (dtypes.txt) are evaluated in test_ops.cpp.
    const bool optim = stem.starts_with("optim_") || stem.starts_with("sched_") || stem.starts_with("module_") ||
                       stem == "dtypes";
    EXPECT_TRUE(ops().count(stem) || stem == "batch_norm2d_train" || second_order || recurrent || optim)
        << stem << " has no C++ case";
  }
}

}  // namespace
